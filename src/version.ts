import { readFileSync } from 'node:fs';

/** hookrelay's version, from package.json (one level above both src/ and dist/). */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** The User-Agent of every delivery request (the deliverer's, and the delivery page's request as sent). */
export const DELIVERY_USER_AGENT = `hookrelay/${VERSION}`;
