// Several EPPs behind one gateway, as the shipped Envoy config's EPP cluster holds a zone's EPPs
// (services/gateway/src/epp-cluster.ts): each host health-checked on its own, new ext_proc streams
// by round robin over the healthy ones, all of them in panic, none with the threshold at 0; and the
// other zones' EPPs at lower priorities (--epp-fallback), which take the streams while this zone's
// fail their checks (Envoy's priority load: services/gateway/test/priority-lb.test.ts).
import { eventually } from '@spillway/testkit';
import { describe, expect, it } from 'vitest';
import { GATEWAY_ZONE_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import { parseGatewayArgs } from '../src/flags.js';
import { resolveOptions } from '../src/options.js';
import { completion, fakeEpp, gateway, post, sim } from './fixtures.js';

describe('an EPP cluster of several hosts', () => {
  it('spreads streams over the healthy hosts, leaves one out while it fails its checks, and takes it back', async () => {
    const upstream = await sim();
    const [a, b] = [await fakeEpp(() => ({ destination: upstream.address })), await fakeEpp(() => ({ destination: upstream.address }))];
    const gw = await gateway({ epp: `${a.address},${b.address}`, endpoints: [{ address: upstream.address }], eppHealthIntervalMs: 50 });
    const send = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const res = await post(`${gw.url}/v1/completions`, completion());
        expect(res.status).toBe(200);
        await res.text();
      }
    };
    await send(6);
    expect([a.streams.length, b.streams.length]).toEqual([3, 3]);
    expect(gw.stats().eppHosts).toEqual([
      { address: a.address, priority: 0, healthy: true, streams: 3 },
      { address: b.address, priority: 0, healthy: true, streams: 3 },
    ]);

    // A reports NOT_SERVING (draining): after two failed checks it gets no new stream.
    a.serving = false;
    await eventually(() => expect(gw.stats().eppHosts[0]?.healthy).toBe(false));
    const before = a.streams.length;
    await send(4);
    expect(a.streams.length).toBe(before);
    expect(b.streams.length).toBe(7);
    expect(gw.stats().eppHealthy).toBe(true);

    a.serving = true;
    await eventually(() => expect(gw.stats().eppHosts[0]?.healthy).toBe(true));
    await send(4);
    expect(a.streams.length).toBe(before + 2);
  });

  it('uses every host when too few are healthy (panic), and none with the panic threshold at 0', async () => {
    const upstream = await sim();
    const hosts = [await fakeEpp(() => ({ destination: upstream.address })), await fakeEpp(() => ({ destination: upstream.address }))];
    for (const host of hosts) host.serving = false;
    const epp = hosts.map((h) => h.address).join(',');
    const panic = await gateway({ epp, endpoints: [{ address: upstream.address }], eppHealthIntervalMs: 50 });
    const strict = await gateway({ epp, endpoints: [{ address: upstream.address }], eppHealthIntervalMs: 50, eppHealthyPanicThreshold: 0 });
    await eventually(() => expect([panic.stats().eppHealthy, strict.stats().eppHealthy]).toEqual([false, false]));
    for (let i = 0; i < 2; i++) {
      const res = await post(`${panic.url}/v1/completions`, completion());
      expect(res.status).toBe(200);
      await res.text();
    }
    expect(hosts.map((h) => h.streams.length)).toEqual([1, 1]);
    const refused = await post(`${strict.url}/v1/completions`, completion());
    expect(refused.status).toBe(500);
    await refused.text();
    expect(hosts.map((h) => h.streams.length)).toEqual([1, 1]);
  });

  it("fails over to the next priority while this zone's EPP fails its checks, and comes back", async () => {
    const upstream = await sim();
    const fake = () => fakeEpp(() => ({ destination: upstream.address }));
    const [own, near, far] = [await fake(), await fake(), await fake()];
    const gw = await gateway({
      epp: own.address,
      eppFallback: `${near.address}/${far.address}`,
      zone: 'zone-a',
      endpoints: [{ address: upstream.address, zone: 'zone-a' }],
      eppHealthIntervalMs: 50,
    });
    const send = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const res = await post(`${gw.url}/v1/completions`, completion());
        expect(res.status).toBe(200);
        await res.text();
      }
    };
    const streams = () => [own, near, far].map((e) => e.streams.length);
    await send(4);
    expect(streams()).toEqual([4, 0, 0]);
    expect(gw.stats().eppHosts.map((h) => h.priority)).toEqual([0, 1, 2]);

    own.serving = false;
    await eventually(() => expect(gw.stats().eppHosts[0]?.healthy).toBe(false));
    await send(4);
    expect(streams()).toEqual([4, 4, 0]);
    // The fallback EPP is told the gateway's zone, so it picks for zone-a.
    expect(near.streams.at(-1)?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]?.[GATEWAY_ZONE_KEY]).toBe('zone-a');

    near.serving = false;
    await eventually(() => expect(gw.stats().eppHosts[1]?.healthy).toBe(false));
    await send(2);
    expect(streams()).toEqual([4, 4, 2]);

    own.serving = true;
    await eventually(() => expect(gw.stats().eppHosts[0]?.healthy).toBe(true));
    await send(3);
    expect(streams()).toEqual([7, 4, 2]);
  });

  it('--epp-fallback takes priority groups separated by /, and names a bad or repeated entry', () => {
    const parsed = parseGatewayArgs(
      ['--epp', '10.0.0.1:9002', '--epp-fallback', 'epp-b:9002,10.0.0.2:9002/epp-c:9002', '--passthrough'],
      {},
    );
    expect(parsed.help === false && resolveOptions(parsed.options).eppPriorities).toEqual([
      ['10.0.0.1:9002'],
      ['epp-b:9002', '10.0.0.2:9002'],
      ['epp-c:9002'],
    ]);
    expect(() => parseGatewayArgs(['--epp', '10.0.0.1:9002', '--epp-fallback', 'epp-b:9002//epp-c:9002', '--passthrough'], {})).toThrow(
      /--epp-fallback: must be HOST:PORT/,
    );
    expect(() => parseGatewayArgs(['--epp', '10.0.0.1:9002', '--epp-fallback', 'epp-b', '--passthrough'], {})).toThrow(/--epp-fallback/);
    expect(() => parseGatewayArgs(['--epp', '10.0.0.1:9002', '--epp-fallback', '10.0.0.1:9002', '--passthrough'], {})).toThrow(
      /--epp-fallback: 10\.0\.0\.1:9002 is listed twice/,
    );
  });

  it('--epp takes a comma-separated list and names a bad entry', () => {
    const parsed = parseGatewayArgs(['--epp', '10.0.0.1:9002,epp-b:9002', '--passthrough'], {});
    expect(parsed.help === false && parsed.options.epp).toBe('10.0.0.1:9002,epp-b:9002');
    expect(() => parseGatewayArgs(['--epp', '10.0.0.1:9002,', '--passthrough'], {})).toThrow(/--epp: must be HOST:PORT/);
  });
});
