/**
 * src/domain/terminal-text.ts (issue 47): text from outside made safe for a terminal. What is
 * escaped (C0, DEL, C1, bidirectional controls, invisible characters, unpaired surrogates), how
 * (lineExcerpt's conventions, unambiguously: a test-only decoder gives every input back), JSON
 * kept the same JSON, bytes that are not UTF-8, and the console's copy of the set agreeing with
 * it on every code point.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { INVISIBLE_SOURCE } from '../../console/src/format.ts';
import { LINE_EXCERPT_BYTES, lineExcerpt } from '../../src/domain/feed-event.ts';
import { escapeTerminalControls, TERMINAL_UNSAFE, TERMINAL_UNSAFE_SOURCE, terminalSafe, terminalSafeBytes, terminalSafeJson, terminalSafeLines } from '../../src/domain/terminal-text.ts';

const BIDI_CONTROLS = ['\u061c', '\u200e', '\u200f', '\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069'];
const INVISIBLE = ['\u00ad', '\u180e', '\u200b', '\u200c', '\u200d', '\u2060', '\u2061', '\u2064', '\u2065', '\ufeff', '\ufff9', '\ufffb', '\u034f', '\u115f', '\u3164', '\uffa0', '\u{e0001}', '\u{e0041}', '\u{1d173}'];
/** What a terminal must never get raw from outside text. */
const RAW = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]|\p{Cf}|\p{Cs}/u;
/** RAW but the line feed: what a text of several lines must not hold. */
const RAW_BUT_NEWLINE = /(?!\n)[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]|\p{Cf}|\p{Cs}/u;

/** The inverse of terminalSafe (tests only): shows that every output stands for one input. */
function unescape(text: string): string {
  return text.replace(/\\(\\|n|r|t|u\{([0-9a-f]+)\}|u([0-9a-f]{4}))/g, (_, what: string, astral?: string, bmp?: string) => {
    if (what === '\\') return '\\';
    if (what === 'n') return '\n';
    if (what === 'r') return '\r';
    if (what === 't') return '\t';
    return astral !== undefined ? String.fromCodePoint(Number.parseInt(astral, 16)) : String.fromCharCode(Number.parseInt(bmp!, 16));
  });
}

/** A pseudo-random generator with a seed, so that a failure can be run again. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** A string of `length` characters drawn from a mix of the dangerous and the ordinary. */
function randomText(next: () => number, length: number): string {
  const pool = ['a', 'Z', '0', ' ', '\\', 'u', '{', '"', 'é', '日', '😀', '\u{1f468}\u200d\u{1f469}', '\x1b', '\x07', '\n', '\r', '\t', '\x00', '\x7f', '\u0085', '\u009b', '\u009d', '\u2028', '\ud800', '\udfff', ...BIDI_CONTROLS, ...INVISIBLE];
  let out = '';
  for (let i = 0; i < length; i++) out += pool[Math.floor(next() * pool.length)]!;
  return out;
}

describe('terminalSafe', () => {
  test('escape sequences are shown, not sent: ESC, BEL, CSI (U+009B), OSC (U+009D), DEL', () => {
    assert.equal(terminalSafe('\x1b]0;pwned\x07'), '\\u001b]0;pwned\\u0007');
    assert.equal(terminalSafe('\x1b[2J\x1b[H'), '\\u001b[2J\\u001b[H');
    assert.equal(terminalSafe('\u009b31mred\u009d52;c;aGk=\u009c'), '\\u009b31mred\\u009d52;c;aGk=\\u009c');
    assert.equal(terminalSafe('a\x7fb\x00c'), 'a\\u007fb\\u0000c');
  });

  test('a value is one line: line feed, carriage return and tab as \\n, \\r, \\t; the line and paragraph separators escaped', () => {
    assert.equal(terminalSafe('one\ntwo\r\nthree\tfour'), 'one\\ntwo\\r\\nthree\\tfour');
    assert.equal(terminalSafe('a\u2028b\u2029c'), 'a\\u2028b\\u2029c');
  });

  test('bidirectional controls and invisible characters as \\uNNNN (\\u{NNNNN} past U+FFFF)', () => {
    assert.equal(terminalSafe('evt_\u202efdp.exe'), 'evt_\\u202efdp.exe');
    for (const c of BIDI_CONTROLS) assert.equal(terminalSafe(c), `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
    assert.equal(terminalSafe('pay\u00adpal\u200b'), 'pay\\u00adpal\\u200b');
    assert.equal(terminalSafe('\ufeffid'), '\\ufeffid');
    assert.equal(terminalSafe('ok\u{e0041}\u{e0042}'), 'ok\\u{e0041}\\u{e0042}');
  });

  test('unpaired surrogates are escaped; a pair is the character it makes', () => {
    assert.equal(terminalSafe('a\ud800b\udc00'), 'a\\ud800b\\udc00');
    assert.equal(terminalSafe('😀'), '😀');
  });

  test('backslashes are doubled: a value holding ESC and one holding the text \\u001b look different', () => {
    assert.equal(terminalSafe('C:\\temp'), 'C:\\\\temp');
    assert.notEqual(terminalSafe('\x1b'), terminalSafe('\\u001b'));
    assert.equal(terminalSafe('\\u001b'), '\\\\u001b');
  });

  test('ordinary text, accents, CJK, emoji and a zero-width-joined emoji sequence\'s letters stay as they are', () => {
    for (const text of ['acme', 'Zoë Müller <zoe@example.com>', '東京', 'ok 👍', 'a"b\'c', 'https://hooks.example.com/a?b=c']) assert.equal(terminalSafe(text), text);
    // The joiner itself is invisible: escaped, as lineExcerpt does (a family emoji shows as its parts).
    assert.equal(terminalSafe('👨\u200d👩'), '👨\\u200d👩');
  });

  test('every output holds nothing raw and gives its input back (random strings)', () => {
    const next = random(47);
    for (let i = 0; i < 2000; i++) {
      const text = randomText(next, 1 + Math.floor(next() * 12));
      const safe = terminalSafe(text);
      assert.doesNotMatch(safe, RAW, JSON.stringify(text));
      assert.equal(unescape(safe), text, JSON.stringify(text));
      // The guard of the CLI's output leaves it as it is.
      assert.equal(escapeTerminalControls(safe, true), safe);
      assert.equal(escapeTerminalControls(safe), safe);
    }
  });

  test('the set holds lineExcerpt\'s: every character lineExcerpt escapes, terminalSafe escapes (the whole BMP but surrogates, and the astral planes\' samples)', () => {
    for (let code = 0; code <= 0xffff; code++) {
      if (code >= 0xd800 && code <= 0xdfff) continue;
      const char = String.fromCharCode(code);
      if (lineExcerpt(Buffer.from(char, 'utf8')) !== char) assert.notEqual(terminalSafe(char), char, `U+${code.toString(16)}`);
    }
  });
});

describe('terminalSafeLines and escapeTerminalControls', () => {
  test('terminalSafeLines keeps the line feeds, escapes the rest', () => {
    assert.equal(terminalSafeLines('line one\r\n\x1b[2Jline\ttwo\\'), 'line one\\r\n\\u001b[2Jline\\ttwo\\\\');
  });

  test('escapeTerminalControls escapes what a terminal acts on and leaves backslashes, so that text already escaped stays as it is', () => {
    assert.equal(escapeTerminalControls('a\x1b[31mb\u202ec\nd'), 'a\\u001b[31mb\\u202ec\\nd');
    assert.equal(escapeTerminalControls('a\x1b[31mb\nc', true), 'a\\u001b[31mb\nc');
    assert.equal(escapeTerminalControls('unknown field "a\\"b"'), 'unknown field "a\\"b"');
  });
});

describe('terminalSafeJson', () => {
  test('JSON.stringify leaves DEL, C1, bidirectional and invisible characters raw; here they are JSON escapes, and the JSON is the same', () => {
    const value = { name: 'Evil\u009b31m\u202eCorp\u007f', tag: 'a\u{e0041}', line: 'x\u2028y', esc: '\x1b]0;t\x07', plain: 'é😀' };
    const raw = JSON.stringify(value, null, 2);
    assert.match(raw, /\u009b/u, 'JSON.stringify writes U+009B raw');
    const safe = terminalSafeJson(raw);
    assert.doesNotMatch(safe, RAW_BUT_NEWLINE);
    assert.deepEqual(JSON.parse(safe), value);
    assert.match(safe, /"Evil\\u009b31m\\u202eCorp\\u007f"/);
    assert.match(safe, /"a\\udb40\\udc41"/);
    assert.ok(safe.includes('é😀'));
    assert.equal(safe.split('\n').length, raw.split('\n').length, 'the lines of pretty-printed JSON stay');
  });

  test('any JSON value, random strings in it: the same value back, nothing raw', () => {
    const next = random(4711);
    for (let i = 0; i < 500; i++) {
      const value = { [randomText(next, 3)]: [randomText(next, 8), { k: randomText(next, 5) }] };
      const safe = terminalSafeJson(JSON.stringify(value, null, 2));
      assert.doesNotMatch(safe, RAW_BUT_NEWLINE);
      assert.deepEqual(JSON.parse(safe), value);
    }
  });

  test('a JSON document\'s own whitespace (tab, carriage return) is shown as \\t, \\r', () => {
    assert.equal(terminalSafeJson('{\r\n\t"a": 1\r\n}'), '{\\r\n\\t"a": 1\\r\n}');
  });
});

describe('terminalSafeBytes', () => {
  test('UTF-8 is decoded; a byte that is not UTF-8 is \\xNN; a byte order mark is kept (escaped)', () => {
    assert.equal(terminalSafeBytes(Buffer.from('évt\u202e', 'utf8')), 'évt\\u202e');
    assert.equal(terminalSafeBytes(Buffer.from([0x61, 0xff, 0x62, 0xc3, 0x28, 0x1b])), 'a\\xffb\\xc3(\\u001b');
    assert.equal(terminalSafeBytes(Buffer.from([0xef, 0xbb, 0xbf, 0x61])), '\\ufeffa');
    // Overlong, a surrogate, past U+10FFFF: not UTF-8.
    assert.equal(terminalSafeBytes(Buffer.from([0xc0, 0xaf, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80])), '\\xc0\\xaf\\xed\\xa0\\x80\\xf4\\x90\\x80\\x80');
  });

  test('lines: the line feeds stay; truncated: a character cut at the end is left out', () => {
    assert.equal(terminalSafeBytes(Buffer.from([0x61, 0x0a, 0xff, 0x0a, 0x62]), { lines: true }), 'a\n\\xff\nb');
    const cut = Buffer.from('ab€', 'utf8').subarray(0, 4);
    assert.equal(terminalSafeBytes(cut), 'ab\\xe2\\x82');
    assert.equal(terminalSafeBytes(cut, { truncated: true }), 'ab');
  });

  test('lineExcerpt is terminalSafeBytes of the kept bytes, "..." when cut (random lines of characters both escape alike)', () => {
    const next = random(31);
    const pieces = [[0x61], [0x5c], [0x0a], [0x0d], [0x09], [0x1b], [0x7f], [0xc2, 0x9b], [0xe2, 0x80, 0xae], [0xc2, 0xad], [0xef, 0xbb, 0xbf], [0xe2, 0x80, 0xa8], [0xc3, 0xa9], [0xf0, 0x9f, 0x98, 0x80], [0xff], [0xc3], [0xe2, 0x80], [0xed, 0xa0, 0x80], [0xc0, 0x80]];
    for (let i = 0; i < 3000; i++) {
      const bytes: number[] = [];
      const length = Math.floor(next() * 40);
      for (let k = 0; k < length; k++) bytes.push(...pieces[Math.floor(next() * pieces.length)]!);
      const line = Buffer.from(bytes);
      const shown = line.subarray(0, LINE_EXCERPT_BYTES);
      const cut = line.length > shown.length;
      assert.equal(terminalSafeBytes(shown, { truncated: cut }) + (cut ? '...' : ''), lineExcerpt(line), line.toString('hex'));
    }
  });
});

describe('the console marks the same characters (console/src/format.ts markInvisible, tested in console-unit.test.ts)', () => {
  test('its copy of the set is the same set, on every code point', () => {
    assert.equal(INVISIBLE_SOURCE, TERMINAL_UNSAFE_SOURCE);
    const console = new RegExp(INVISIBLE_SOURCE, 'u');
    for (let code = 0; code <= 0x10ffff; code++) {
      const char = String.fromCodePoint(code);
      if (console.test(char) !== TERMINAL_UNSAFE.test(char)) assert.fail(`U+${code.toString(16)}: the console and the terminal disagree`);
    }
  });

});
