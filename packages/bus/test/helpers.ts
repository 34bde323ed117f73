import type { JetStreamManager } from '@nats-io/jetstream';
import { eventually } from '@spillway/testkit';

// The event builders are shared with spillway-fleet's tests, so they live in the test kit.
export { metrics, podEvents, publishAll, readiness, zoneOf } from '@spillway/testkit';

/** Core publishes reach the stream asynchronously: wait until it holds `count` messages. */
export async function waitForStored(jsm: JetStreamManager, stream: string, count: number, timeoutMs = 20_000): Promise<void> {
  await eventually(async () => {
    const info = await jsm.streams.info(stream);
    if (info.state.messages < count) throw new Error(`stream ${stream} holds ${info.state.messages} of ${count} messages`);
  }, timeoutMs);
}
