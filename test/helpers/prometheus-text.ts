/**
 * A parser of the Prometheus text exposition format (version 0.0.4), strict enough to fail on
 * what Prometheus would refuse: every sample belongs to a family declared by # TYPE (histogram
 * samples by their _bucket, _sum and _count suffixes), label values are quoted with their
 * escapes, values are floats or +Inf, -Inf, NaN, and no series appears twice.
 */

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Family {
  readonly name: string;
  readonly type: 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';
  readonly help: string;
  readonly samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** A value as Go's strconv.ParseFloat reads it (which Prometheus uses): NaN and Inf in any case. */
function parseValue(text: string, line: string): number {
  const special = /^([-+]?)(inf|infinity|nan)$/i.exec(text);
  if (special) return special[2]!.toLowerCase() === 'nan' ? Number.NaN : special[1] === '-' ? -Infinity : Infinity;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`not a sample value: ${JSON.stringify(text)} in ${line}`);
  return Number(text);
}

/** Parses `{a="x",b="y\"z"}` from `text` at `start` (the "{"); returns the labels and the index after "}". */
function parseLabels(text: string, start: number, line: string): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = start + 1;
  for (;;) {
    if (text[i] === '}') return { labels, end: i + 1 };
    const eq = text.indexOf('=', i);
    if (eq < 0) throw new Error(`unterminated labels in ${line}`);
    const name = text.slice(i, eq);
    if (!LABEL_NAME.test(name)) throw new Error(`bad label name ${JSON.stringify(name)} in ${line}`);
    if (text[eq + 1] !== '"') throw new Error(`label value not quoted in ${line}`);
    let value = '';
    let j = eq + 2;
    for (; j < text.length && text[j] !== '"'; j++) {
      if (text[j] === '\\') {
        const next = text[++j];
        if (next === 'n') value += '\n';
        else if (next === '\\' || next === '"') value += next;
        else throw new Error(`bad escape \\${next} in ${line}`);
      } else value += text[j];
    }
    if (j >= text.length) throw new Error(`unterminated label value in ${line}`);
    if (Object.hasOwn(labels, name)) throw new Error(`label ${name} twice in ${line}`);
    labels[name] = value;
    i = j + 1;
    if (text[i] === ',') i++;
    else if (text[i] !== '}') throw new Error(`expected , or } in ${line}`);
  }
}

const SUFFIXES: ReadonlyArray<readonly [string, readonly Family['type'][]]> = [
  ['_bucket', ['histogram']],
  ['_sum', ['histogram', 'summary']],
  ['_count', ['histogram', 'summary']],
];

/** The family a sample belongs to: its own name, or a histogram's or summary's with a suffix. */
function familyOf(families: Map<string, Family>, name: string): Family | undefined {
  const direct = families.get(name);
  if (direct !== undefined && direct.type !== 'histogram') return direct;
  for (const [suffix, types] of SUFFIXES) {
    const family = name.endsWith(suffix) ? families.get(name.slice(0, -suffix.length)) : undefined;
    if (family !== undefined && types.includes(family.type)) return family;
  }
  return undefined;
}

/** The families of an exposition, by name. Throws on the first malformed line. */
export function parsePrometheusText(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const help = new Map<string, string>();
  const seen = new Set<string>();
  if (text !== '' && !text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  for (const line of text.split('\n')) {
    if (line === '') continue;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) continue; // a comment
      const [, kind, name, rest] = m as unknown as [string, string, string, string];
      if (!NAME.test(name)) throw new Error(`bad metric name in ${line}`);
      if (kind === 'HELP') help.set(name, rest.replace(/\\n/g, '\n').replace(/\\\\/g, '\\'));
      else {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) throw new Error(`bad type in ${line}`);
        if (families.has(name)) throw new Error(`# TYPE ${name} twice`);
        families.set(name, { name, type: rest as Family['type'], help: help.get(name) ?? '', samples: [] });
      }
      continue;
    }
    const nameEnd = line.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`not a sample line: ${line}`);
    const name = line.slice(0, nameEnd);
    if (!NAME.test(name)) throw new Error(`bad metric name in ${line}`);
    let labels: Record<string, string> = {};
    let rest = nameEnd;
    if (line[nameEnd] === '{') ({ labels, end: rest } = parseLabels(line, nameEnd, line));
    const fields = line.slice(rest).trim().split(/\s+/);
    if (fields.length < 1 || fields.length > 2 || fields[0] === '') throw new Error(`expected a value (and a timestamp) in ${line}`);
    const value = parseValue(fields[0]!, line);
    const family = familyOf(families, name);
    if (family === undefined) throw new Error(`sample ${name} has no # TYPE line`);
    const key = `${name}${JSON.stringify(Object.entries(labels).sort())}`;
    if (seen.has(key)) throw new Error(`series twice: ${line}`);
    seen.add(key);
    family.samples.push({ name, labels, value });
  }
  return families;
}

/** The value of the one sample `name` with exactly `labels`; throws when there is none. */
export function sampleValue(families: Map<string, Family>, name: string, labels: Record<string, string> = {}): number {
  for (const family of families.values()) {
    for (const s of family.samples) {
      if (s.name !== name) continue;
      const keys = Object.keys(s.labels);
      if (keys.length === Object.keys(labels).length && keys.every((k) => s.labels[k] === labels[k])) return s.value;
    }
  }
  throw new Error(`no sample ${name}${JSON.stringify(labels)}`);
}
