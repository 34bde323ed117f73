// The gateway's own error replies, in the OpenAI error shape the EPP uses, so a client sees one
// format whether the EPP, the gateway or a model server refused the request.
import type { LocalReply } from './mutations.js';

const TYPES: Readonly<Record<number, string>> = {
  400: 'invalid_request_error',
  413: 'invalid_request_error',
  500: 'server_error',
  502: 'server_error',
  503: 'service_unavailable_error',
  504: 'timeout_error',
};

export function gatewayError(status: number, code: string, message: string): LocalReply {
  const body = JSON.stringify({ error: { message, type: TYPES[status] ?? 'server_error', code } });
  return { status, headers: [['content-type', 'application/json']], body: Buffer.from(body, 'utf8') };
}
