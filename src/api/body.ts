import type { Context, Next } from 'koa';
import { ErrorCode, excerpt } from '../domain/errors.ts';
import { problem } from './problem.ts';

/**
 * Reads a JSON object body of at most `limitBytes` into `ctx.state.body`. An empty body is `{}`
 * (so missing fields are reported field by field); anything but a JSON object is refused.
 */
export function jsonBody(limitBytes: number) {
  return async function readJsonBody(ctx: Context, next: Next): Promise<void> {
    const declared = Number(ctx.get('Content-Length') || Number.NaN);
    if (declared > limitBytes) throw tooLarge(limitBytes);
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limitBytes) throw tooLarge(limitBytes);
      chunks.push(chunk);
    }
    const text = Buffer.concat(chunks).toString('utf8');
    if (text.trim() === '') {
      ctx.state.body = {};
    } else {
      const type = ctx.get('Content-Type');
      if (type !== '' && !ctx.is('application/json', '+json')) {
        throw problem(ErrorCode.unsupportedMediaType, `Content-Type ${excerpt(type)} is not supported; send the body as application/json`);
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        // Not the parser's message: it quotes the body.
        throw problem(ErrorCode.malformedJson, `The body is not valid JSON (${text.length} characters); send a JSON object`);
      }
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
        throw problem(ErrorCode.malformedJson, 'The body must be a JSON object');
      }
      ctx.state.body = parsed;
    }
    await next();
  };
}

function tooLarge(limitBytes: number) {
  return problem(ErrorCode.payloadTooLarge, `The body is larger than ${limitBytes} bytes; send a smaller JSON object`, {
    limit_bytes: limitBytes,
  });
}
