/**
 * Validates requests with their zod schemas (schemas/requests.ts) and answers a refusal as the
 * API always has: 422 `validation_failed`, each refused field once in `invalid_params`, in the
 * schema's order, with the sentence clients and tests know. The sentence of a field is, in order:
 *
 * 1. its domain wording (`worded`), for a field whose rules the domain checks for the CLI as well
 *    (an e-mail, a webhook URL, its headers, its rate limit): the domain's own reasons;
 * 2. the message the schema gives (`error` on the schema or on one of its checks);
 * 3. the house wording of an issue the schema leaves to this module (`must be one of ...` for an
 *    enum, from its values).
 */
import { z } from 'zod';
import { type InvalidParam, validationError } from '../domain/errors.ts';

/** The domain's reasons for refusing `value` (none: it accepts it). */
export type Wording = (value: unknown) => readonly string[];

const wordings = z.registry<{ wording: Wording }>();

/**
 * `schema` refused in the words of the domain: `wording` runs as one of its checks (so what the
 * domain refuses beyond the shape is refused), and a field refused for any reason answers the
 * domain's reasons. The metadata added after (description, examples) keeps the wording.
 */
export function worded<T extends z.ZodType>(schema: T, wording: Wording): T {
  const checked = schema.superRefine((value, ctx) => {
    for (const reason of wording(value)) ctx.addIssue({ code: 'custom', message: reason, input: value });
  });
  wordings.add(checked, { wording });
  return checked;
}

/** A domain check's answer (null: accepted) as a list of reasons. */
export function reasons(problem: string | null): readonly string[] {
  return problem === null ? [] : [problem];
}

/** The wording of `schema`, looked up through optional, nullable and default wrappers. */
function wordingOf(schema: z.ZodType | undefined): Wording | undefined {
  for (let s = schema; s !== undefined; ) {
    const found = wordings.get(s);
    if (found !== undefined) return found.wording;
    const def = s.def as { type: string; innerType?: z.ZodType };
    s = def.type === 'optional' || def.type === 'nullable' || def.type === 'default' || def.type === 'prefault' ? def.innerType : undefined;
  }
  return undefined;
}

/** The house wording of an issue whose schema says nothing of its own. */
function houseWording(issue: z.core.$ZodRawIssue): string | undefined {
  if (issue.code === 'invalid_value') return `must be one of ${issue.values.map(String).join(', ')}`;
  return undefined;
}

/**
 * `input` as `schema` reads it, or the `validation_failed` error (`detail` as its message) that
 * lists every refused field.
 */
export function parseRequest<S extends z.ZodObject>(schema: S, input: Readonly<Record<string, unknown>>, detail: string): z.output<S> {
  const result = schema.safeParse(input, { error: houseWording });
  if (result.success) return result.data;
  throw validationError(detail, invalidParams(schema, input, result.error.issues));
}

/** One entry per refused field (several when its domain wording gives several), in the order zod met them. */
export function invalidParams(schema: z.ZodObject, input: Readonly<Record<string, unknown>>, issues: readonly z.core.$ZodIssue[]): InvalidParam[] {
  const firstIssue = new Map<string, string>();
  for (const issue of issues) {
    const name = String(issue.path[0] ?? '');
    if (!firstIssue.has(name)) firstIssue.set(name, issue.message);
  }
  const out: InvalidParam[] = [];
  for (const [name, message] of firstIssue) {
    const wording = wordingOf(schema.shape[name] as z.ZodType | undefined);
    const domain = wording?.(input[name]) ?? [];
    if (domain.length > 0) out.push(...domain.map((reason) => ({ name, reason })));
    else out.push({ name, reason: message });
  }
  return out;
}

/** A query as schemas read it: the first value of a repeated parameter (as the API always read them). */
export function firstValues(query: Readonly<Record<string, string | string[] | undefined>>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const [name, value] of Object.entries(query)) out[name] = Array.isArray(value) ? value[0] : value;
  return out;
}
