// The gateway's health view decides its subset hint: active checks plus outlier ejection.
import { GATEWAY_ZONE_KEY, SUBSET_KEY, SUBSET_NAMESPACE } from '@spillway/protocol';
import { eventually } from '@spillway/testkit';
import { describe, expect, it } from 'vitest';
import { completion, fakeEpp, gateway, post, rawUpstream, sim } from './fixtures.js';

async function setStall(url: string, stall: boolean): Promise<void> {
  const res = await fetch(`${url}/admin/fault`, { method: 'POST', body: JSON.stringify({ stall }) });
  if (res.status !== 200) throw new Error(`fault injection failed: ${res.status}`);
}

describe('health view', () => {
  it('drops an endpoint whose /health fails from the subset hint and restores it when healthy', async () => {
    const [a, b] = [await sim(), await sim()];
    const epp = await fakeEpp(() => ({ destination: b.address }));
    const gw = await gateway({
      epp: epp.address,
      zone: 'z',
      healthIntervalMs: 30,
      healthTimeoutMs: 100,
      unhealthyThreshold: 2,
      endpoints: [
        { address: a.address, zone: 'z' },
        { address: b.address, zone: 'z' },
      ],
    });
    expect(gw.subsetHint()).toEqual([a.address, b.address]);

    await setStall(a.url, true);
    await eventually(() => expect(gw.subsetHint()).toEqual([b.address]));
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    const hinted = epp.streams.at(-1)?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE];
    expect(hinted).toEqual({ [SUBSET_KEY]: [b.address], [GATEWAY_ZONE_KEY]: 'z' });
    expect(gw.stats().endpoints.find((e) => e.address === a.address)).toMatchObject({ healthy: false, activeHealthy: false });

    await setStall(a.url, false);
    await eventually(() => expect(gw.subsetHint()).toEqual([a.address, b.address]));
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    expect(epp.streams.at(-1)?.messages[0]?.metadataContext?.filterMetadata[SUBSET_NAMESPACE]).toEqual({
      [SUBSET_KEY]: [a.address, b.address],
      [GATEWAY_ZONE_KEY]: 'z',
    });
  });

  it('counts a non-2xx /health answer as a failed check', async () => {
    let status = 503;
    const upstream = await rawUpstream((req, res) => {
      req.resume();
      res.writeHead(req.url === '/ready' ? status : 404).end();
    });
    const epp = await fakeEpp(() => ({ hang: true }));
    const gw = await gateway({
      epp: epp.address,
      healthIntervalMs: 30,
      healthPath: '/ready',
      unhealthyThreshold: 1,
      endpoints: [{ address: upstream.address }],
    });
    // start() awaits the first round, so the first hint already reflects it.
    expect(gw.subsetHint()).toEqual([]);
    status = 200;
    await eventually(() => expect(gw.subsetHint()).toEqual([upstream.address]));
  });

  it('lists only healthy local endpoints, in configuration order, whatever the remote ones do', async () => {
    const [l1, r1, l2] = [await sim(), await sim(), await sim()];
    const epp = await fakeEpp(() => ({ destination: l1.address }));
    const gw = await gateway({
      epp: epp.address,
      zone: 'zone-a',
      healthIntervalMs: 30,
      healthTimeoutMs: 100,
      unhealthyThreshold: 1,
      endpoints: [
        { address: l2.address, zone: 'zone-a' },
        { address: r1.address, zone: 'zone-b' },
        { address: l1.address, zone: 'zone-a' },
      ],
    });
    expect(gw.subsetHint()).toEqual([l2.address, l1.address]);
    await setStall(r1.url, true);
    await eventually(() => expect(gw.stats().endpoints.find((e) => e.address === r1.address)?.healthy).toBe(false));
    expect(gw.subsetHint()).toEqual([l2.address, l1.address]);
  });

  it('lets an ejected endpoint back into the hint once its ejection expires', async () => {
    const failing = await sim({ errorRate: 1 });
    const live = await sim();
    const epp = await fakeEpp(() => ({ destination: `${failing.address},${live.address}` }));
    const gw = await gateway({
      epp: epp.address,
      outlierFailures: 1,
      // Long enough that the request (with its retry back-off) is surely over before it expires.
      outlierEjectionMs: 1_500,
      endpoints: [{ address: failing.address }, { address: live.address }],
    });
    expect((await post(`${gw.url}/v1/completions`, completion())).status).toBe(200);
    expect(gw.subsetHint()).toEqual([live.address]);
    await eventually(() => expect(gw.subsetHint()).toEqual([failing.address, live.address]));
  });
});
