import type { IncomingMessage, ServerResponse } from 'node:http';
import { apiError } from './openai.js';
import type { ApiError } from './openai.js';

const MAX_BODY_BYTES = 8 * 1024 * 1024;

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) });
  res.end(data);
}

export function sendError(res: ServerResponse, e: ApiError): void {
  sendJson(res, e.status, e.body);
}

/** The request body parsed as JSON, or the error to answer with. */
export async function readJson(req: IncomingMessage): Promise<{ ok: true; value: unknown } | { ok: false; error: ApiError }> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return { ok: false, error: apiError(413, `request body larger than ${MAX_BODY_BYTES} bytes`) };
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return { ok: true, value: JSON.parse(text) as unknown };
  } catch (err) {
    return { ok: false, error: apiError(400, `invalid JSON body: ${err instanceof Error ? err.message : String(err)}`) };
  }
}
