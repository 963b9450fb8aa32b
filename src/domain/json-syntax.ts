/**
 * Where JSON text goes wrong, and why, in words that quote none of it. JSON.parse's own
 * messages quote the text around the error ("Unexpected token 'o', "root:*:2022"... is not
 * valid JSON"), so a message built from them carries part of whatever was fed in: a feed line
 * that was never meant to be one, a secret. This scanner runs only after JSON.parse has
 * refused the text, and follows RFC 8259 without building anything; it keeps its own stack, so
 * that deeply nested text cannot overflow the call stack.
 */

export interface JsonSyntaxError {
  /** UTF-16 index into the text of the first character that cannot be part of valid JSON (the text's length when it ends too early). */
  readonly index: number;
  /** A short reason that quotes nothing of the text ("unexpected character", "the text ends inside a string"). */
  readonly reason: string;
}

const ARRAY = 0;
const OBJECT = 1;

function isWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d;
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

function isHex(c: number): boolean {
  return isDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

/** Scans the string starting at text[start] (a quote): the index after its closing quote, or the error. */
function scanString(text: string, start: number): number | JsonSyntaxError {
  const n = text.length;
  let i = start;
  for (i++; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return i + 1;
    if (c < 0x20) return { index: i, reason: 'a control character inside a string (escape it)' };
    if (c !== 0x5c) continue;
    const e = text.charCodeAt(++i);
    if (i >= n) break;
    if (e === 0x75) {
      for (let k = 1; k <= 4; k++) if (i + k >= n || !isHex(text.charCodeAt(i + k))) return { index: Math.min(i + k, n), reason: 'an invalid \\u escape in a string' };
      i += 4;
    } else if (!'"\\/bfnrt'.includes(text[i]!)) return { index: i, reason: 'an invalid escape in a string' };
  }
  return { index: n, reason: 'the text ends inside a string' };
}

/** Scans the number starting at text[start]: the index after it, or the error. */
function scanNumber(text: string, start: number): number | JsonSyntaxError {
  let i = start;
  if (text.charCodeAt(i) === 0x2d) i++;
  if (text.charCodeAt(i) === 0x30) i++;
  else if (isDigit(text.charCodeAt(i))) while (isDigit(text.charCodeAt(i))) i++;
  else return { index: i, reason: 'an invalid number' };
  if (text.charCodeAt(i) === 0x2e) {
    if (!isDigit(text.charCodeAt(++i))) return { index: i, reason: 'an invalid number (no digit after its decimal point)' };
    while (isDigit(text.charCodeAt(i))) i++;
  }
  if (text.charCodeAt(i) === 0x65 || text.charCodeAt(i) === 0x45) {
    i++;
    if (text.charCodeAt(i) === 0x2b || text.charCodeAt(i) === 0x2d) i++;
    if (!isDigit(text.charCodeAt(i))) return { index: i, reason: 'an invalid number (no digit in its exponent)' };
    while (isDigit(text.charCodeAt(i))) i++;
  }
  return i;
}

/** The first syntax error of `text`, or null when it is one valid JSON value (with whitespace around it). */
export function jsonSyntaxError(text: string): JsonSyntaxError | null {
  const n = text.length;
  const stack: number[] = [];
  let i = 0;
  const skip = () => {
    while (i < n && isWhitespace(text.charCodeAt(i))) i++;
  };
  const fail = (index: number, reason: string): JsonSyntaxError => ({ index, reason });

  type State = 'value' | 'key' | 'after';
  let state: State = 'value';
  skip();
  if (i >= n) return fail(n, n === 0 ? 'the text is empty' : 'the text holds only whitespace');
  for (;;) {
    skip();
    if (state === 'value') {
      if (i >= n) return fail(n, stack.at(-1) === OBJECT ? 'the text ends inside an object' : 'the text ends inside an array');
      const c = text.charCodeAt(i);
      if (c === 0x7b || c === 0x5b) {
        stack.push(c === 0x7b ? OBJECT : ARRAY);
        i++;
        skip();
        if (text.charCodeAt(i) === (c === 0x7b ? 0x7d : 0x5d)) {
          stack.pop();
          i++;
          state = 'after';
        } else state = c === 0x7b ? 'key' : 'value';
        continue;
      }
      if (c === 0x22 || c === 0x2d || isDigit(c)) {
        const end = c === 0x22 ? scanString(text, i) : scanNumber(text, i);
        if (typeof end !== 'number') return end;
        i = end;
      } else {
        const literal = ['true', 'false', 'null'].find((word) => word.charCodeAt(0) === c);
        if (literal === undefined) return fail(i, 'an unexpected character where a value should be');
        for (let k = 1; k < literal.length; k++) {
          if (text.charCodeAt(i + k) !== literal.charCodeAt(k)) return fail(Math.min(i + k, n), i + k >= n ? 'the text ends inside a literal' : 'an unexpected character (true, false or null misspelt?)');
        }
        i += literal.length;
      }
      state = 'after';
    } else if (state === 'key') {
      if (i >= n) return fail(n, 'the text ends inside an object');
      if (text.charCodeAt(i) !== 0x22) return fail(i, 'an unexpected character where a field name in double quotes should be');
      const end = scanString(text, i);
      if (typeof end !== 'number') return end;
      i = end;
      skip();
      if (i >= n) return fail(n, 'the text ends inside an object');
      if (text.charCodeAt(i) !== 0x3a) return fail(i, "an unexpected character where ':' should follow a field name");
      i++;
      state = 'value';
    } else {
      const top = stack.at(-1);
      if (top === undefined) return i < n ? fail(i, 'more text after the JSON value') : null;
      if (i >= n) return fail(n, top === OBJECT ? 'the text ends inside an object' : 'the text ends inside an array');
      const c = text.charCodeAt(i);
      if (c === 0x2c) {
        i++;
        state = top === OBJECT ? 'key' : 'value';
      } else if (c === (top === OBJECT ? 0x7d : 0x5d)) {
        stack.pop();
        i++;
      } else return fail(i, top === OBJECT ? "an unexpected character where ',' or '}' should be" : "an unexpected character where ',' or ']' should be");
    }
  }
}
