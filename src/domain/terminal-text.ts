/**
 * Text from outside (a request `hookrelay listen` received, a feed line, a value read from the
 * database or from a receiver's answer) made safe to write to a terminal: shown, never obeyed.
 *
 * A terminal acts on what it is sent: ESC and CSI (U+009B, a C1 control that some terminals
 * read as ESC [) begin sequences that move the cursor, clear the screen, set the window title
 * or write to the clipboard (OSC 52); a carriage return lets the rest of a line overwrite what
 * came before it; a bidirectional control (U+202E and its kin) makes "evt_<U+202E>exe.txt" read
 * as "evt_txt.exe"; a zero-width character makes two different ids look the same. Each of those
 * characters is shown escaped instead, in the conventions of lineExcerpt (feed-event.ts), which
 * escapes the excerpts of quarantined feed lines: `\n`, `\r`, `\t`, `\uNNNN` (`\u{NNNNN}` past
 * U+FFFF), `\xNN` for a byte that is not UTF-8, and a backslash doubled, so that what is shown
 * tells apart a value holding ESC from one holding the six characters `\u001b`.
 */

/**
 * What a terminal must not get raw: the C0 and C1 controls and DEL (category Cc), format
 * characters (Cf: bidirectional controls U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069,
 * zero-width ones, the soft hyphen, the byte order mark, interlinear annotations, tags),
 * unpaired surrogates (Cs), the line and paragraph separators (Zl, Zp), U+2065 (unassigned, in
 * the block of invisible operators) and the fillers that display as nothing (combining grapheme
 * joiner, Hangul fillers, Khmer inherent vowels). It holds lineExcerpt's MISLEADING set and the
 * controls it escapes; console/src/format.ts keeps a copy of it for the browser console
 * (test/domain/terminal-text.test.ts checks that the two agree).
 */
export const TERMINAL_UNSAFE_SOURCE = '[\\p{Cc}\\p{Cf}\\p{Cs}\\p{Zl}\\p{Zp}\\u034f\\u115f\\u1160\\u17b4\\u17b5\\u2065\\u3164\\uffa0]';
/** One character of TERMINAL_UNSAFE_SOURCE (a whole code point: the `u` flag). */
export const TERMINAL_UNSAFE = new RegExp(TERMINAL_UNSAFE_SOURCE, 'u');

const UNSAFE_ALL = new RegExp(TERMINAL_UNSAFE_SOURCE, 'gu');
const UNSAFE_OR_BACKSLASH = new RegExp(`${TERMINAL_UNSAFE_SOURCE}|\\\\`, 'u');
const UNSAFE_OR_BACKSLASH_ALL = new RegExp(`${TERMINAL_UNSAFE_SOURCE}|\\\\`, 'gu');
/** The unsafe characters but the line feed, which separates the lines of a multi-line text. */
const UNSAFE_BUT_NEWLINE_ALL = new RegExp(`(?!\\n)${TERMINAL_UNSAFE_SOURCE}`, 'gu');

const hex4 = (code: number) => code.toString(16).padStart(4, '0');

/** One unsafe character (or a backslash) as lineExcerpt writes it. */
function escaped(char: string): string {
  if (char === '\\') return '\\\\';
  if (char === '\n') return '\\n';
  if (char === '\r') return '\\r';
  if (char === '\t') return '\\t';
  const code = char.codePointAt(0)!;
  // Five or six hex digits in braces: `\ue0001` would read as U+E000 followed by "1".
  return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${hex4(code)}`;
}

/**
 * `text` as one line of plain text that a terminal shows as it is: every character of
 * TERMINAL_UNSAFE escaped (a line feed or a tab too: a value printed on one line, or in a table
 * cell, must not break the line or the columns), backslashes doubled. Nothing is cut; the
 * result is never shorter than `text`. Text without any of those characters comes back as it is.
 */
export function terminalSafe(text: string): string {
  return UNSAFE_OR_BACKSLASH.test(text) ? text.replace(UNSAFE_OR_BACKSLASH_ALL, escaped) : text;
}

/** `terminalSafe` for a text of several lines: each line escaped, the line feeds between them kept. */
export function terminalSafeLines(text: string): string {
  return text.split('\n').map(terminalSafe).join('\n');
}

/**
 * The last guard of the CLI's output (src/cli/shared.ts): what `text` holds of TERMINAL_UNSAFE
 * escaped, line feeds kept when `keepNewlines`, and nothing else changed: backslashes are left
 * as they are. For text the program composed around values it has already shown with
 * terminalSafe (which this leaves unchanged: it is idempotent), so that a value a command
 * forgot to escape still reaches the terminal as text, if not unambiguously.
 */
export function escapeTerminalControls(text: string, keepNewlines = false): string {
  return text.replace(keepNewlines ? UNSAFE_BUT_NEWLINE_ALL : UNSAFE_ALL, escaped);
}

/** A JSON `\uNNNN` escape of one character (a pair of them past U+FFFF: JSON has no `\u{...}`). */
function jsonEscaped(char: string): string {
  let out = '';
  for (let i = 0; i < char.length; i++) out += `\\u${hex4(char.charCodeAt(i))}`;
  return out;
}

/**
 * JSON text (JSON.stringify's output, or any valid JSON document) made safe for a terminal and
 * still the same JSON: JSON.stringify escapes the C0 controls but leaves DEL, the C1 controls
 * (U+009B among them), bidirectional and other invisible characters raw, and in JSON text those
 * can only stand inside a string, where `\uNNNN` is JSON's own escape of the same character. So
 * the result parses to the same value. The whitespace of a document that is not JSON.stringify's
 * (a tab, a carriage return between tokens) is shown as `\t`, `\r`; its line feeds are kept.
 */
export function terminalSafeJson(json: string): string {
  return json.replace(UNSAFE_BUT_NEWLINE_ALL, (char) => (char === '\t' || char === '\r' ? escaped(char) : jsonEscaped(char)));
}

/** A byte order mark is kept (TextDecoder drops a leading one by default): it is shown escaped, as any other. */
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** Length of the UTF-8 sequence a lead byte announces; 0 for a byte that cannot begin one. */
function sequenceLength(b: number): number {
  return b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
}

/** The code point of the `length`-byte sequence at `at`, or -1 when it is not UTF-8 (overlong, a surrogate, past U+10FFFF). */
function codePointAt(bytes: Uint8Array, at: number, length: number): number {
  let code = bytes[at]! & (0xff >> (length + 1));
  for (let k = 1; k < length; k++) {
    const c = bytes[at + k]!;
    if ((c & 0xc0) !== 0x80) return -1;
    code = (code << 6) | (c & 0x3f);
  }
  if (code < [0, 0, 0x80, 0x800, 0x10000][length]! || (code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) return -1;
  return code;
}

export interface BytesOptions {
  /** Keep the line feeds (terminalSafeLines); by default the bytes are shown as one line (terminalSafe). */
  readonly lines?: boolean;
  /**
   * The bytes are the start of a longer text: a character cut in two at their end is left out
   * (the caller says there is more), not shown as bytes that are not UTF-8.
   */
  readonly truncated?: boolean;
}

/**
 * Bytes from outside (a request body) as terminalSafe text: UTF-8 decoded, each byte that is
 * not part of a UTF-8 character shown as `\xNN`. (`lineExcerpt(bytes, n)` is this of its first
 * LINE_EXCERPT_BYTES bytes, `truncated` when the line is longer, followed by "...".)
 */
export function terminalSafeBytes(bytes: Uint8Array, options: BytesOptions = {}): string {
  const safe = options.lines === true ? terminalSafeLines : terminalSafe;
  try {
    return safe(utf8.decode(bytes));
  } catch {
    // Not UTF-8 throughout: character by character below.
  }
  let out = '';
  let run = '';
  for (let i = 0; i < bytes.length; ) {
    const b = bytes[i]!;
    const length = sequenceLength(b);
    if (length > 1 && i + length > bytes.length && options.truncated === true) break;
    const code = length === 0 || i + length > bytes.length ? -1 : length === 1 ? b : codePointAt(bytes, i, length);
    if (code === -1) {
      out += safe(run) + `\\x${b.toString(16).padStart(2, '0')}`;
      run = '';
      i++;
    } else {
      run += String.fromCodePoint(code);
      i += length;
    }
  }
  return out + safe(run);
}
