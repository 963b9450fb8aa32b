/**
 * How the document writes an operation and its parameters. A parameter is a field of a request
 * schema (schemas/requests.ts): its description and first example are the field's metadata.
 */
import { z } from 'zod';
import type { Permission } from '../../domain/permissions.ts';
import { jsonSchema } from './json-schema.ts';

type Json = Record<string, unknown>;

export interface OperationSpec {
  readonly tag: 'users' | 'webhook' | 'deliveries' | 'audit' | 'operations';
  readonly operationId: string;
  readonly summary: string;
  readonly description: string;
  /** The permission the route requires (app.ts RouteInfo); null for the public routes. */
  readonly permission: Permission | null;
  /** Public routes: who may call (`[]`: anyone). Authenticated ones use the document's bearerAuth. */
  readonly security?: readonly Json[];
  readonly requestBody?: Json;
  readonly parameters?: readonly Json[];
  readonly responses: Json;
}

export function operation(spec: OperationSpec): Json {
  return {
    tags: [spec.tag],
    operationId: spec.operationId,
    summary: spec.summary,
    description: spec.description,
    ...(spec.security === undefined ? {} : { security: spec.security }),
    'x-permission': spec.permission,
    ...(spec.requestBody === undefined ? {} : { requestBody: spec.requestBody }),
    ...(spec.parameters === undefined ? {} : { parameters: spec.parameters }),
    responses: spec.responses,
  };
}

/** Another method of `operation`, which it behaves exactly as (`x-alias-of`). */
export function alias(of: Json, spec: { readonly operationId: string; readonly summary: string; readonly description: string }): Json {
  const { tags, operationId, summary: _summary, description: _description, ...rest } = of;
  return { tags, operationId: spec.operationId, summary: spec.summary, description: spec.description, 'x-alias-of': operationId, ...rest };
}

/** The parameter `name` of `schema` (a z.object of the query or the path). */
export function parameter(schema: z.ZodObject, name: string, where: 'query' | 'path'): Json {
  const field = schema.shape[name] as z.ZodType | undefined;
  if (field === undefined) throw new Error(`no parameter ${name}`);
  const { description, examples: _examples, ...fieldSchema } = jsonSchema(field, `${where} parameter ${name}`);
  // zod leaves out the default and examples of a value it transforms (they are of its output):
  // a parameter's are read as written, from its metadata.
  const meta = z.globalRegistry.get(field);
  if (meta?.default !== undefined && fieldSchema.default === undefined) fieldSchema.default = meta.default;
  const examples = meta?.examples;
  const required = where === 'path' || !field.safeParse(undefined).success;
  return {
    name,
    in: where,
    required,
    ...(description === undefined ? {} : { description }),
    schema: fieldSchema,
    ...(Array.isArray(examples) && examples.length > 0 ? { example: examples[0] } : {}),
  };
}

/** Every parameter of a query schema, in its order. */
export function queryParameters(schema: z.ZodObject): Json[] {
  return Object.keys(schema.shape).map((name) => parameter(schema, name, 'query'));
}
