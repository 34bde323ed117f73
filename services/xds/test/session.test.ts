/**
 * The xDS state machine of one stream (session.ts): the first request is answered, an ACK with the
 * last nonce records the version, a NACK keeps the client on its last good version and the rejected
 * version is never sent again (no loop), a stale nonce is ignored, one response per type awaits its
 * answer (later changes go out as one newest version after it), subscriptions change with the
 * names, and every bound is an error naming it.
 */
import { describe, expect, it } from 'vitest';
import { LIMITS, TYPE_URLS, XdsSession, versionOf, type DiscoveryRequest, type EncodedResource } from '../src/index.js';

const NODE = {
  id: 'envoy-1',
  cluster: 'gateways',
  locality: { region: 'r1', zone: 'zone-a', subZone: '' },
  userAgentName: 'envoy',
  userAgentVersionType: undefined,
};
const EDS = TYPE_URLS.eds;

function request(overrides: Partial<DiscoveryRequest> = {}): DiscoveryRequest {
  return {
    versionInfo: '',
    node: undefined,
    resourceNames: ['model-servers'],
    typeUrl: EDS,
    responseNonce: '',
    errorDetail: undefined,
    ...overrides,
  };
}

function resource(name: string, content: string, typeUrl: string = EDS): EncodedResource {
  return { typeUrl, name, any: { typeUrl, value: new TextEncoder().encode(content) }, version: `v-${content}` };
}

function opened(): XdsSession {
  const session = new XdsSession(1, 'test');
  expect(session.onRequest(request({ node: NODE }))).toEqual({ kind: 'subscribe', typeUrl: EDS });
  return session;
}

describe('XdsSession', () => {
  it('answers the first request, then waits for the ACK before sending a change', () => {
    const session = opened();
    const first = session.respond(EDS, [resource('model-servers', 'one')]);
    expect(first?.response).toMatchObject({ versionInfo: 'v-one', typeUrl: EDS, nonce: '1', controlPlane: { identifier: 'test' } });
    expect(first?.response.resources).toHaveLength(1);
    // A change while the first response awaits its answer is held ...
    expect(session.respond(EDS, [resource('model-servers', 'two')])).toBeUndefined();
    expect(session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1' }))).toEqual({
      kind: 'ack',
      typeUrl: EDS,
      version: 'v-one',
    });
    expect(session.ackedVersion(EDS)).toBe('v-one');
    // ... and sent, newest, once the ACK is in.
    expect(session.respond(EDS, [resource('model-servers', 'three')])?.response).toMatchObject({ versionInfo: 'v-three', nonce: '2' });
  });

  it('sends nothing when the content did not change', () => {
    const session = opened();
    session.respond(EDS, [resource('model-servers', 'one')]);
    session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1' }));
    expect(session.respond(EDS, [resource('model-servers', 'one')])).toBeUndefined();
  });

  it('a NACK keeps the last good version and the rejected version is not sent again; a newer one is', () => {
    const session = opened();
    session.respond(EDS, [resource('model-servers', 'good')]);
    session.onRequest(request({ versionInfo: 'v-good', responseNonce: '1' }));
    session.respond(EDS, [resource('model-servers', 'bad')]);
    const nack = session.onRequest(
      request({ versionInfo: 'v-good', responseNonce: '2', errorDetail: { code: 3, message: 'duplicate address', details: [] } }),
    );
    expect(nack).toEqual({ kind: 'nack', typeUrl: EDS, version: 'v-bad', message: 'duplicate address' });
    expect(session.ackedVersion(EDS)).toBe('v-good');
    // The same content, asked again and again, is never re-sent: no loop.
    for (let i = 0; i < 5; i++) expect(session.respond(EDS, [resource('model-servers', 'bad')])).toBeUndefined();
    expect(session.respond(EDS, [resource('model-servers', 'fixed')])?.response.versionInfo).toBe('v-fixed');
  });

  it('ignores a request answering an older nonce (stale), and one for a type never sent with a nonce', () => {
    const session = opened();
    session.respond(EDS, [resource('model-servers', 'one')]);
    session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1' }));
    session.respond(EDS, [resource('model-servers', 'two')]);
    expect(session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1', resourceNames: ['other'] }))).toEqual({
      kind: 'stale',
      typeUrl: EDS,
    });
    expect(session.awaitingAck(EDS)).toBe(true);
    expect(session.onRequest(request({ typeUrl: TYPE_URLS.ecds, responseNonce: '7' }))).toEqual({ kind: 'stale', typeUrl: TYPE_URLS.ecds });
  });

  it('follows the names: only subscribed resources, a changed subscription is answered, no names means nothing for EDS', () => {
    const session = opened();
    const available = [resource('model-servers', 'one'), resource('other', 'x')];
    expect(session.respond(EDS, available)?.response.resources).toHaveLength(1);
    // After the ACK the client adds a name, with the same nonce: answered with both.
    session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1' }));
    expect(session.onRequest(request({ versionInfo: 'v-one', responseNonce: '1', resourceNames: ['other', 'model-servers'] }))).toEqual({
      kind: 'subscribe',
      typeUrl: EDS,
    });
    const both = session.respond(EDS, available);
    expect(both?.response.resources).toHaveLength(2);
    expect(both?.version).toBe(versionOf(available));
    session.onRequest(request({ versionInfo: both!.version, responseNonce: '2', resourceNames: [] }));
    expect(session.respond(EDS, available)).toBeUndefined();
  });

  it('treats LDS and CDS asked with no names as all of them, and * as all for any type', () => {
    const session = opened();
    session.onRequest(request({ typeUrl: TYPE_URLS.lds, resourceNames: [] }));
    expect(
      session.respond(TYPE_URLS.lds, [resource('a', '1', TYPE_URLS.lds), resource('b', '2', TYPE_URLS.lds)])?.response.resources,
    ).toHaveLength(2);
    session.onRequest(request({ typeUrl: TYPE_URLS.ecds, resourceNames: ['*'] }));
    expect(session.respond(TYPE_URLS.ecds, [resource('x', '1', TYPE_URLS.ecds)])?.response.resources).toHaveLength(1);
  });

  it('answers a fresh subscription (empty nonce) again, even with a response in flight', () => {
    const session = opened();
    session.respond(EDS, [resource('model-servers', 'one')]);
    expect(session.onRequest(request())).toEqual({ kind: 'subscribe', typeUrl: EDS });
    expect(session.respond(EDS, [resource('model-servers', 'one')])?.response.nonce).toBe('2');
  });

  it('requires a node with a zone on the first request, keeps it, and refuses a move to another zone', () => {
    const session = new XdsSession(1, 'test');
    expect(session.onRequest(request())).toMatchObject({ kind: 'error', code: 'INVALID_ARGUMENT', reason: 'no-node' });
    expect(new XdsSession(2, 't').onRequest(request({ node: { ...NODE, locality: undefined } }))).toMatchObject({
      kind: 'error',
      reason: 'no-zone',
      message: expect.stringMatching(/node\.locality\.zone is empty/),
    });
    const s = opened();
    expect(s.node).toMatchObject({ id: 'envoy-1', zone: 'zone-a', region: 'r1', userAgent: 'envoy' });
    expect(s.onRequest(request({ node: { ...NODE, locality: { region: 'r1', zone: 'zone-b', subZone: '' } } }))).toMatchObject({
      kind: 'error',
      reason: 'node-moved',
    });
  });

  it('bounds what a node can make it hold, naming the bound', () => {
    const bad = (overrides: Partial<DiscoveryRequest>) => opened().onRequest(request(overrides));
    expect(bad({ typeUrl: 'envoy.config.endpoint.v3.ClusterLoadAssignment' })).toMatchObject({ kind: 'error', reason: 'bad-type-url' });
    expect(bad({ resourceNames: Array.from({ length: LIMITS.namesPerType + 1 }, (_, i) => `n${i}`) })).toMatchObject({
      kind: 'error',
      code: 'RESOURCE_EXHAUSTED',
      message: expect.stringContaining(`at most ${LIMITS.namesPerType}`),
    });
    expect(bad({ resourceNames: ['x'.repeat(LIMITS.nameChars + 1)] })).toMatchObject({ kind: 'error', reason: 'too-long' });
    expect(new XdsSession(3, 't').onRequest(request({ node: { ...NODE, id: 'x'.repeat(LIMITS.nodeFieldChars + 1) } }))).toMatchObject({
      kind: 'error',
      reason: 'too-long',
    });
    const session = opened();
    let outcome;
    for (let i = 0; i <= LIMITS.typesPerNode; i++) outcome = session.onRequest(request({ typeUrl: `type.googleapis.com/t${i}` }));
    expect(outcome).toMatchObject({ kind: 'error', reason: 'too-many-types' });
    // Long names in many types reach the byte bound before the type bound.
    const heavy = opened();
    const names = Array.from({ length: LIMITS.namesPerType }, (_, i) => `${'n'.repeat(200)}${i}`);
    let last;
    for (let i = 0; i < LIMITS.typesPerNode && last?.kind !== 'error'; i++)
      last = heavy.onRequest(request({ typeUrl: `type.googleapis.com/t${i}`, resourceNames: names }));
    expect(last).toMatchObject({ kind: 'error', reason: 'node-bytes' });
    expect(heavy.accountedBytes).toBeLessThanOrEqual(LIMITS.nodeBytes);
  });
});
