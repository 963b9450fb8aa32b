/**
 * zod schemas as the JSON Schema of docs/openapi.json (OpenAPI 3.1 is JSON Schema 2020-12):
 * z.toJSONSchema, then written the way the document has always written it: a nullable value as
 * `type: [T, "null"]` (not `anyOf`), no bounds zod adds to every integer, components referenced
 * as `#/components/schemas/<id>`, and only the keywords the document uses (checked: the contract
 * test's validator understands exactly these).
 */
import { z } from 'zod';

export type JsonSchema = { [keyword: string]: unknown };

const COMPONENTS = '#/components/schemas/';

/** The keywords the document may use; anything else zod emits fails the build. */
const KEYWORDS = new Set([
  '$ref', 'allOf', 'type', 'enum', 'const', 'required', 'properties', 'additionalProperties', 'items',
  'pattern', 'minLength', 'maxLength', 'minimum', 'maximum', 'format', 'maxProperties', 'propertyNames',
  'description', 'examples', 'default', 'title',
]);

/** The order keywords are written in: the assertions, then the annotations, then what nests. */
const ORDER = [
  '$ref', 'type', 'const', 'enum', 'format', 'pattern', 'minLength', 'maxLength', 'minimum', 'maximum', 'maxProperties', 'default',
  'description', 'required', 'additionalProperties', 'propertyNames', 'properties', 'items', 'allOf', 'examples',
];

/** Every schema with an `id` in its metadata (globalRegistry), as `components.schemas`. */
export function componentSchemas(): Record<string, JsonSchema> {
  const { schemas } = z.toJSONSchema(z.globalRegistry, { target: 'draft-2020-12', io: 'input', uri: (id) => COMPONENTS + id, unrepresentable: 'throw' });
  const out: Record<string, JsonSchema> = {};
  for (const [id, schema] of Object.entries(schemas)) {
    if (id === '__shared') throw new Error('a schema without an id is shared by components: give it an id or define it once per use');
    out[id] = normalize(schema as JsonSchema, `#/components/schemas/${id}`);
  }
  return out;
}

/**
 * One schema as the document writes it where it is used (a parameter, an answer without a
 * component of its own): a component is referenced, anything else written out.
 */
export function jsonSchema(schema: z.ZodType, at: string): JsonSchema {
  const converted = z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'input', unrepresentable: 'throw' }) as JsonSchema;
  const { $defs, ...rest } = converted;
  // The schemas with an id zod put in $defs are the components: referenced where they are.
  for (const id of Object.keys(($defs ?? {}) as object)) {
    if (!z.globalRegistry._idmap.has(id)) throw new Error(`${at}: ${id} is not a component`);
  }
  const text = JSON.stringify(rest).replaceAll('"#/$defs/', `"${COMPONENTS}`);
  return normalize(JSON.parse(text) as JsonSchema, at);
}

/** `node` written the document's way (see the module comment); throws on a keyword the document does not use. */
function normalize(node: JsonSchema, at: string): JsonSchema {
  let schema: JsonSchema = { ...node };
  delete schema.$schema;
  delete schema.$id;
  schema = nullableAsType(schema, at);
  if (schema.type === 'integer' || (Array.isArray(schema.type) && schema.type.includes('integer'))) {
    if (schema.minimum === Number.MIN_SAFE_INTEGER) delete schema.minimum;
    if (schema.maximum === Number.MAX_SAFE_INTEGER) delete schema.maximum;
  }
  if (isObject(schema.additionalProperties) && Object.keys(schema.additionalProperties).length === 0) delete schema.additionalProperties;
  if (isObject(schema.propertyNames)) {
    const { type, ...names } = schema.propertyNames;
    if (type !== 'string') throw new Error(`${at}: property names are strings`);
    if (Object.keys(names).length === 0) delete schema.propertyNames;
    else schema.propertyNames = names;
  }
  const out: JsonSchema = {};
  for (const key of [...ORDER, ...Object.keys(schema).filter((k) => !ORDER.includes(k))]) {
    if (!(key in schema)) continue;
    if (!KEYWORDS.has(key) && !key.startsWith('x-')) throw new Error(`${at}: the document does not use the keyword "${key}" (${JSON.stringify(schema[key])})`);
    const value = schema[key];
    if (key === 'properties') {
      // A property of any value (`{}`, z.unknown()) says nothing but that it may be there: `required` says it must.
      const properties = Object.entries(value as Record<string, JsonSchema>).filter(([, child]) => Object.keys(child).length > 0);
      if (properties.length > 0) out[key] = Object.fromEntries(properties.map(([name, child]) => [name, normalize(child, `${at}/properties/${name}`)]));
    }
    else if (key === 'items' || key === 'additionalProperties' || key === 'propertyNames') out[key] = isObject(value) ? normalize(value, `${at}/${key}`) : value;
    else if (key === 'allOf') out[key] = (value as JsonSchema[]).map((child, i) => normalize(child, `${at}/allOf/${i}`));
    else out[key] = value;
  }
  return out;
}

/** `anyOf: [T, {type: "null"}]` as `type: [T's type, "null"]` (with null in T's enum, if any). */
function nullableAsType(schema: JsonSchema, at: string): JsonSchema {
  const anyOf = schema.anyOf as JsonSchema[] | undefined;
  if (anyOf === undefined) return schema;
  const nonNull = anyOf.filter((branch) => !(branch.type === 'null' && Object.keys(branch).length === 1));
  const [value] = nonNull;
  if (nonNull.length !== 1 || anyOf.length !== 2 || value === undefined || typeof value.type !== 'string') {
    throw new Error(`${at}: only a nullable value may be a union (${JSON.stringify(anyOf)})`);
  }
  const { anyOf: _, ...outer } = schema;
  const merged: JsonSchema = { ...value, ...outer, type: [value.type, 'null'] };
  if (Array.isArray(value.enum)) merged.enum = [...value.enum, null];
  return merged;
}

function isObject(value: unknown): value is JsonSchema {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
