#!/usr/bin/env node
/**
 * Writes docs/openapi.json from the code: the request and answer schemas the routes validate
 * with (src/api/schemas/) and the rest of the document (src/api/openapi/), as compiled into
 * dist/ by the tsc step before this one. test/api/openapi-document.test.ts fails when the
 * committed file differs from what the code generates, so it is regenerated (and committed)
 * with any change.
 *
 *     node scripts/build-openapi.mjs        (part of npm run build, after tsc)
 *     node scripts/build-openapi.mjs --check (exit 1 when docs/openapi.json is not up to date)
 */
import { readFileSync, writeFileSync } from 'node:fs';

const target = new URL('../docs/openapi.json', import.meta.url);
const { openApiText } = await import(new URL('../dist/api/openapi/document.js', import.meta.url).href);
const text = openApiText();
let current = null;
try {
  current = readFileSync(target, 'utf8');
} catch {}

if (process.argv.includes('--check')) {
  if (current !== text) {
    console.error('build-openapi: docs/openapi.json is not what the code generates; run npm run build and commit it');
    process.exit(1);
  }
} else if (current !== text) {
  writeFileSync(target, text);
  console.log(`build-openapi: docs/openapi.json written (${text.length} bytes)`);
}
