/**
 * Pure validators for identifiers that travel through the API, the CLI and the feed.
 * Each returns `null` when the value is acceptable, or a sentence saying what is expected.
 */

export const ORG_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export const ROLE_NAME_PATTERN = /^[a-z][a-z0-9_]{0,63}$/;
/** Deliberately permissive (RFC 5322 is not a useful target): one @, no spaces, a dot-less local part is fine. */
const EMAIL_PATTERN = /^[^\s@]{1,64}@[^\s@]{1,255}$/;
export const MAX_EMAIL_LENGTH = 320;

export function checkOrgId(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  if (!ORG_ID_PATTERN.test(value)) {
    return 'must be 1-64 characters of letters, digits, ".", "_" or "-", starting with a letter or digit';
  }
  return null;
}

export function checkRoleName(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  if (!ROLE_NAME_PATTERN.test(value)) {
    return 'must be 1-64 characters of lower-case letters, digits or "_", starting with a letter';
  }
  return null;
}

/**
 * Control characters (U+0000-U+001F, U+007F): never part of a name, a description or an
 * e-mail address, and PostgreSQL text cannot hold U+0000 at all.
 */
const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/;

/** A free text (an organization's name, a role's description): 1 to `max` characters, no control characters. */
export function checkText(value: string, max: number): string | null {
  if (value.length === 0 || value.length > max) return `must be 1-${max} characters`;
  if (CONTROL_CHARACTER.test(value)) return 'must not contain control characters';
  return null;
}

export function checkEmail(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  const trimmed = value.trim();
  if (trimmed.length === 0) return 'must not be empty';
  if (trimmed.length > MAX_EMAIL_LENGTH) return `must be at most ${MAX_EMAIL_LENGTH} characters`;
  if (CONTROL_CHARACTER.test(trimmed)) return 'must not contain control characters';
  if (!EMAIL_PATTERN.test(trimmed)) return 'must be an e-mail address such as ada@example.com';
  return null;
}

/**
 * The form under which e-mails are compared, in tokens, the API and the CLI alike (per
 * organization): trimmed, ASCII letters lower-cased (A-Z only: `Ada@Example.COM` is
 * `ada@example.com`), then the whole in Unicode NFC, so that a composed and a decomposed
 * `é` are one address. No other case folding: JavaScript's toLowerCase() turned the Kelvin
 * sign (U+212A) into "k", so `\u212Aate@` was `kate@`. NFC turns it into an upper-case "K",
 * which no key can otherwise hold (its ASCII letters are lower-cased first): it stays apart.
 */
export function emailKey(email: string): string {
  return email
    .trim()
    .replace(/[A-Z]+/g, (letters) => letters.toLowerCase())
    .normalize('NFC');
}

export const MAX_WEBHOOK_URL_LENGTH = 2048;

/**
 * Checks the form of a webhook URL as registered by an organization: absolute, at most 2048
 * characters, a host, no fragment, no spaces or control characters. What it may point at
 * (scheme, user-info, addresses) is the URL policy's (dispatch/network-guard.ts checkTarget).
 */
export function checkWebhookUrl(value: unknown): string | null {
  if (typeof value !== 'string') return 'must be a string';
  if (value.length === 0) return 'must not be empty';
  if (value.length > MAX_WEBHOOK_URL_LENGTH) return `must be at most ${MAX_WEBHOOK_URL_LENGTH} characters`;
  // The URL is stored as typed, but the WHATWG parser drops spaces, tabs and newlines and
  // accepts "https:host": refuse what would be called as something other than what is stored.
  if (/[\s\u0000-\u001f\u007f]/.test(value)) return 'must not contain spaces or control characters';
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return 'must be an absolute URL such as https://example.com/hooks';
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return 'must be an absolute URL such as https://example.com/hooks';
  }
  if (value.includes('#')) return 'must not contain a fragment (#...)';
  if (url.hostname === '') return 'must name a host';
  return null;
}

/**
 * The part of a webhook URL that may be written to logs: scheme, host and port. The path and
 * query of webhook URLs often carry the receiver's secret (a token in the query, or in the
 * path as Slack's and Discord's do), and logs travel further than the database.
 */
export function loggableUrl(value: string): string {
  try {
    const url = new URL(value);
    return url.origin === 'null' ? '(not a URL)' : url.origin;
  } catch {
    return '(not a URL)';
  }
}
