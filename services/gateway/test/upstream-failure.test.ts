// A model server that dies while the gateway is forwarding its response. Real processes:
// `spillway-sim` binaries SIGKILLed mid-request, the gateway in-process between a fake EPP and the
// simulators. The client's response is cut at once, never left open until a timeout.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { LB_NAMESPACE, SERVED_KEY } from '@spillway/protocol';
import { eventually } from '@spillway/testkit';
import { beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { messagesOf } from './fake-epp.js';
import { MODEL, fakeEpp, gateway, onCleanup, post, sim } from './fixtures.js';

const SIM_BIN = fileURLToPath(new URL('../../sim/bin/spillway-sim.js', import.meta.url));
const SIM_MAIN = fileURLToPath(new URL('../../sim/dist/main.js', import.meta.url));

beforeAll(() => {
  if (!existsSync(SIM_MAIN)) throw new Error(`${SIM_MAIN} is missing: run \`npm run build\` (tsc -b) before this test`);
});

interface SimProcess {
  readonly url: string;
  readonly address: string;
  readonly child: ChildProcess;
  kill(): Promise<void>;
}

/**
 * A `spillway-sim` process on the test preset, slowed down so a 200-token stream takes ~20 s:
 * 100 ms of wall time per token.
 */
async function simProcess(args: string[] = []): Promise<SimProcess> {
  const child = spawn(process.execPath, [SIM_BIN, '--port', '0', '--preset', 'test', '--time-scale', '0.05', '--model', MODEL, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGKILL');
    await gone;
  };
  onCleanup(kill);
  for await (const line of createInterface({ input: child.stdout as NodeJS.ReadableStream })) {
    const parsed = z.object({ url: z.string() }).safeParse(JSON.parse(line));
    if (parsed.success) return { url: parsed.data.url, address: new URL(parsed.data.url).host, child, kill };
  }
  throw new Error('spillway-sim exited without logging its URL');
}

const streaming = (maxTokens: number): string =>
  JSON.stringify({ model: MODEL, prompt: 'tell me a long story', max_tokens: maxTokens, stream: true });

/** Reads an SSE body until `until` holds for the text so far, or the body ends or fails. */
async function readUntil(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  until: (text: string) => boolean,
  seen = '',
): Promise<{ text: string; outcome: 'matched' | 'ended' | 'failed' }> {
  let text = seen;
  const decoder = new TextDecoder();
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      return { text, outcome: 'failed' };
    }
    if (chunk.done) return { text, outcome: 'ended' };
    text += decoder.decode(chunk.value, { stream: true });
    if (until(text)) return { text, outcome: 'matched' };
  }
}

/** `work`, or 'still-open' if it has not settled within `ms` (a safety bound, not a speed target). */
async function within<T>(ms: number, work: Promise<T>): Promise<T | 'still-open'> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'still-open'>((resolve) => (timer = setTimeout(() => resolve('still-open'), ms)));
  try {
    return await Promise.race([work, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

describe('an upstream that dies during the response', () => {
  it('mid-stream: the client response is cut at once, not left open until a timeout', { timeout: 60_000 }, async () => {
    const dying = await simProcess();
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${dying.address},${live.address}` }));
    const gw = await gateway({
      epp: epp.address,
      requestTimeoutMs: 120_000,
      endpoints: [{ address: dying.address }, { address: live.address }],
    });

    const res = await post(`${gw.url}/v1/completions`, streaming(200));
    expect(res.status).toBe(200);
    expect(res.headers.get('x-spillway-served-endpoint')).toBe(dying.address);
    const reader = res.body!.getReader();
    const started = await readUntil(reader, (text) => text.includes('"text"'));
    expect(started.outcome).toBe('matched');

    await dying.kill();
    // The stream can only end incomplete (no [DONE]); before the fix it stayed open for 120 s.
    const rest = await within(
      15_000,
      readUntil(reader, (text) => text.includes('[DONE]'), started.text),
    );
    expect(rest).not.toBe('still-open');
    if (rest !== 'still-open') {
      expect(rest.outcome).not.toBe('matched');
      expect(rest.text).not.toContain('[DONE]');
    }
    await eventually(() => expect(gw.stats().upstreamResets).toBe(1));
    // The EPP's stream is ended too, and the dead endpoint counts as failed for the health view.
    const stream = epp.streams[0]!;
    await within(15_000, stream.finished);
    expect(stream.cancelled).toBe(true);
  });

  it(
    'after its response headers, before its first token: the response is committed, so it is cut (as Envoy does)',
    { timeout: 60_000 },
    async () => {
      // One running sequence: a long stream occupies it, so the gateway's request waits in the
      // queue. The simulator (like vLLM) has already sent that request's response headers, and
      // Envoy's router commits to an attempt at its response headers: no retry from here.
      const dying = await simProcess(['--max-num-seqs', '1']);
      const live = await sim();
      const hog = await post(`${dying.url}/v1/completions`, streaming(200));
      expect(hog.status).toBe(200);
      const epp = await fakeEpp(() => ({ destination: `${dying.address},${live.address}` }));
      const gw = await gateway({
        epp: epp.address,
        requestTimeoutMs: 120_000,
        endpoints: [{ address: dying.address }, { address: live.address }],
      });

      const pending = post(`${gw.url}/v1/completions`, streaming(5));
      await eventually(async () => {
        const metrics = await (await fetch(`${dying.url}/metrics`)).text();
        expect(metrics).toMatch(/^vllm:num_requests_waiting\{[^}]*\} 1$/m);
      }, 15_000);
      await dying.kill();
      void hog.body?.cancel().catch(() => undefined);

      const res = await within(15_000, pending);
      expect(res).not.toBe('still-open');
      if (res === 'still-open') return;
      expect(res.status).toBe(200);
      expect(res.headers.get('x-spillway-served-endpoint')).toBe(dying.address);
      expect(res.headers.get('x-spillway-attempts')).toBe('1');
      const rest = await within(
        15_000,
        readUntil(res.body!.getReader(), (text) => text.includes('[DONE]')),
      );
      expect(rest).not.toBe('still-open');
      if (rest !== 'still-open') expect(rest.outcome).not.toBe('matched');
      await eventually(() => expect(gw.stats()).toMatchObject({ fallbacks: 0, upstreamResets: 1 }));
      expect(live.engine.stats().submitted).toBe(0);
      // The EPP saw the response headers of the endpoint that was committed to.
      const stream = epp.streams[0]!;
      await stream.finished;
      const served = messagesOf(stream, 'responseHeaders').map((m) => m.metadataContext?.filterMetadata[LB_NAMESPACE]?.[SERVED_KEY]);
      expect(served).toEqual([dying.address]);
    },
  );

  it('a per-try timeout bounds the wait for the response headers, never the stream after them', { timeout: 60_000 }, async () => {
    const slow = await simProcess();
    const epp = await fakeEpp(() => ({ destination: slow.address }));
    const gw = await gateway({ epp: epp.address, perTryTimeoutMs: 2_000, endpoints: [{ address: slow.address }] });
    // 30 tokens at 100 ms each: 3 s of stream, longer than the per-try timeout.
    const res = await post(`${gw.url}/v1/completions`, streaming(30));
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('[DONE]');
  });
});
