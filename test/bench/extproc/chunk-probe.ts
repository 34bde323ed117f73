import { connect, constants as h2 } from 'node:http2';
import { setTimeout as sleep } from 'node:timers/promises';
import { EXT_PROC_PATH, ProcessingResponse } from '@spillway/protocol';
import type { EncodedExchange } from './request.js';

/**
 * The latency one streamed response chunk gains by passing through an ext_proc processor, measured
 * as a model server paces its tokens: one ext_proc stream at a time sends the exchange's head
 * (request headers and body, response headers) in one write, waits for the reply to
 * response_headers, then sends each response body chunk alone, `gapMs` after the previous chunk's
 * reply, and times the chunk's round trip to its streamed_response. A chunk waits for nothing but
 * the processor (and whatever else the processor is busy with: the bench runs h2load beside it).
 * The frames are pre-encoded; replies to chunks are counted, not decoded, so the client does little.
 */
export interface ProbeResult {
  /** Round trip per chunk, ms, ascending. */
  readonly roundTripsMs: Float64Array;
  readonly streams: number;
}

export async function probeChunks(port: number, exchange: EncodedExchange, streams: number, gapMs: number): Promise<ProbeResult> {
  const session = connect(`http://127.0.0.1:${port}`);
  const chunkFrames = exchange.frames.slice(exchange.headFrames);
  const head = Buffer.concat(exchange.frames.slice(0, exchange.headFrames));
  const times: number[] = [];
  try {
    for (let s = 0; s < streams; s++) await oneStream(session, head, chunkFrames, gapMs, times);
  } finally {
    session.close();
  }
  return { roundTripsMs: Float64Array.from(times).sort(), streams };
}

async function oneStream(
  session: ReturnType<typeof connect>,
  head: Buffer,
  chunks: readonly Buffer[],
  gapMs: number,
  times: number[],
): Promise<void> {
  const stream = session.request({
    [h2.HTTP2_HEADER_METHOD]: 'POST',
    [h2.HTTP2_HEADER_PATH]: EXT_PROC_PATH,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  // gRPC frames are read as they come; every reply after the response headers' is a chunk's.
  let pending: Buffer = Buffer.alloc(0);
  let headAnswered = false;
  let replies = 0;
  let wake: (() => void) | undefined;
  let failure: Error | undefined;
  stream.on('data', (data: Buffer) => {
    pending = pending.length === 0 ? data : Buffer.concat([pending, data]);
    while (pending.length >= 5) {
      const length = pending.readUInt32BE(1);
      if (pending.length < 5 + length) break;
      if (!headAnswered) headAnswered = ProcessingResponse.decode(pending.subarray(5, 5 + length)).response?.$case === 'responseHeaders';
      else replies++;
      pending = pending.subarray(5 + length);
    }
    wake?.();
  });
  const ended = new Promise<void>((resolve) => {
    stream.on('close', () => {
      failure ??= stream.rstCode !== 0 ? new Error(`the probe's stream was reset (${stream.rstCode})`) : undefined;
      wake?.();
      resolve();
    });
  });
  stream.on('error', (error: Error) => (failure = error));
  const until = async (done: () => boolean, what: string): Promise<void> => {
    const deadline = Date.now() + 10_000;
    while (!done()) {
      if (failure !== undefined) throw failure;
      if (Date.now() > deadline) throw new Error(`the probe timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 100);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      wake = undefined;
    }
  };
  stream.write(head);
  await until(() => headAnswered, 'the reply to response_headers');
  for (let i = 0; i < chunks.length; i++) {
    const started = performance.now();
    stream.write(chunks[i]);
    await until(() => replies > i, `the reply to response chunk ${i + 1}`);
    times.push(performance.now() - started);
    if (gapMs > 0) await sleep(gapMs);
  }
  stream.end();
  await ended;
  if (failure !== undefined) throw failure;
}
