#!/usr/bin/env node
/**
 * Builds the browser console into dist/console (served under /console/ by the daemon):
 * compiles console/src/*.ts with console/tsconfig.json (native ES modules, no bundler) and
 * copies console/static/* beside them. Fails when the result is larger than the budget.
 *
 *     node scripts/build-console.mjs        (part of npm run build)
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const root = fileURLToPath(new URL('..', import.meta.url));
const out = join(root, 'dist', 'console');
const staticDir = join(root, 'console', 'static');
/** The console stays under 100 KB (issue 27), minified, its pages of issue 42 included: the build fails above this. */
const BUDGET_BYTES = 100 * 1024;

rmSync(out, { recursive: true, force: true });

const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
const compiled = spawnSync(process.execPath, [tsc, '-p', join(root, 'console', 'tsconfig.json')], { stdio: 'inherit' });
if (compiled.status !== 0) {
  console.error(`build-console: tsc -p console/tsconfig.json failed (${compiled.status ?? compiled.signal})`);
  process.exit(1);
}

// Each compiled module minified on its own (whitespace, syntax and local names; exports, imports
// and file names kept: still native ES modules, no bundle), by esbuild, which tsx already brings.
const { transformSync } = createRequire(import.meta.url)('esbuild');
for (const name of readdirSync(out)) {
  if (!name.endsWith('.js')) continue;
  const path = join(out, name);
  const { code } = transformSync(readFileSync(path, 'utf8'), { minify: true, format: 'esm', target: 'es2022', charset: 'utf8', legalComments: 'none' });
  // A module of types only (app-contract.ts) compiles to nothing the browser loads: not shipped.
  if (/^\s*(export\s*\{\s*\};?)?\s*$/.test(code)) rmSync(path);
  else writeFileSync(path, code);
}

mkdirSync(out, { recursive: true });
for (const name of readdirSync(staticDir)) copyFileSync(join(staticDir, name), join(out, name));

const files = [];
const walk = (dir) => {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else files.push(path);
  }
};
walk(out);
let raw = 0;
let gzip = 0;
for (const path of files) {
  const body = readFileSync(path);
  raw += body.length;
  gzip += gzipSync(body, { level: 9 }).length;
}
const kb = (n) => `${(n / 1024).toFixed(1)} KB`;
console.log(`console: ${files.length} files in ${relative(root, out)}, ${kb(raw)} (${kb(gzip)} gzip -9 file by file)`);
if (raw > BUDGET_BYTES) {
  console.error(`build-console: dist/console is ${kb(raw)}, over the ${kb(BUDGET_BYTES)} budget`);
  process.exit(1);
}
