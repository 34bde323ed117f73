/**
 * One xDS stream's protocol state, state of the world (docs/xds.md, "Versions and nonces"), after
 * Envoy's xDS protocol document (envoyproxy/envoy:api/xds_protocol.rst, "ACK and NACK semantics",
 * "When to send an update", "Resource updates") and go-control-plane's SotW server
 * (pkg/server/sotw/v3/server.go: at most one response per type awaiting its ACK). Pure: requests
 * in, outcomes and responses out; the service writes them.
 *
 * Per type URL a stream has a subscription (names, or all), the version and nonce of the last
 * response sent, and whether that response still awaits the client's ACK or NACK.
 * - A request whose `response_nonce` is not the last one sent for its type is stale and ignored
 *   (the client will answer the newer response, with its current names).
 * - A request with the last nonce and no `error_detail` ACKs that version; one with `error_detail`
 *   NACKs it: the client keeps its last good version, the rejected version is remembered and never
 *   sent to this stream again, so a NACK cannot start a loop. A later change of content (a new
 *   version) is sent as usual.
 * - At most one response per type awaits an answer: changes that arrive meanwhile are sent, as
 *   one newest version, once the client answers. That bounds what a slow client makes the server
 *   buffer, and coalesces bursts.
 * - The first request of a type on a stream is always answered, whatever version the client says
 *   it holds.
 */
import type { DiscoveryRequest, DiscoveryResponse } from '@spillway/xds-protocol';
import { textHash } from './hash.js';
import { LIMITS, NAME_OVERHEAD_BYTES, SESSION_OVERHEAD_BYTES, TYPE_OVERHEAD_BYTES } from './limits.js';
import { TYPE_URL_PREFIX, wildcardWhenEmpty } from '@spillway/xds-protocol';
import type { EncodedResource } from './resources.js';

/** Who is on the other end of the stream, from the first request's `node`. */
export interface NodeInfo {
  readonly id: string;
  readonly cluster: string;
  /** `node.locality.zone`: the zone whose subset and priorities this node gets. */
  readonly zone: string;
  /** `node.locality.region`; empty when the node does not say. */
  readonly region: string;
  readonly userAgent: string;
}

export type ProtocolErrorCode = 'INVALID_ARGUMENT' | 'RESOURCE_EXHAUSTED';

/** What a request did. `error` ends the stream with that gRPC status and message. */
export type RequestOutcome =
  | { readonly kind: 'subscribe'; readonly typeUrl: string }
  | { readonly kind: 'ack'; readonly typeUrl: string; readonly version: string }
  | { readonly kind: 'nack'; readonly typeUrl: string; readonly version: string; readonly message: string }
  | { readonly kind: 'stale'; readonly typeUrl: string }
  | { readonly kind: 'error'; readonly code: ProtocolErrorCode; readonly reason: string; readonly message: string };

interface TypeState {
  /** Sorted, unique. */
  names: string[];
  wildcard: boolean;
  /** The subscription changed since the last response was sent. */
  changed: boolean;
  sentVersion: string | undefined;
  sentNonce: string | undefined;
  awaiting: boolean;
  ackedVersion: string | undefined;
  rejectedVersion: string | undefined;
  bytes: number;
}

/** A response to write, and the version it carries. */
export interface Outgoing {
  readonly response: DiscoveryResponse;
  readonly version: string;
}

const WILDCARD = '*';

export class XdsSession {
  node: NodeInfo | undefined;
  private readonly types = new Map<string, TypeState>();
  private nonces = 0;
  private nodeBytes = 0;
  private typeBytes = 0;

  constructor(
    readonly id: number,
    private readonly controlPlane: string,
  ) {}

  /** Bytes this stream's state is accounted at (docs/xds.md, "Bounds"); at most LIMITS.nodeBytes. */
  get accountedBytes(): number {
    return SESSION_OVERHEAD_BYTES + this.nodeBytes + this.typeBytes;
  }

  get typeCount(): number {
    return this.types.size;
  }

  subscribedTypes(): IterableIterator<string> {
    return this.types.keys();
  }

  /** The last version the client ACKed for a type (undefined before any ACK). */
  ackedVersion(typeUrl: string): string | undefined {
    return this.types.get(typeUrl)?.ackedVersion;
  }

  awaitingAck(typeUrl: string): boolean {
    return this.types.get(typeUrl)?.awaiting === true;
  }

  onRequest(request: DiscoveryRequest): RequestOutcome {
    const nodeProblem = this.takeNode(request);
    if (nodeProblem !== undefined) return nodeProblem;
    const typeUrl = request.typeUrl;
    if (!typeUrl.startsWith(TYPE_URL_PREFIX) || typeUrl.length > LIMITS.nameChars) {
      return invalid('bad-type-url', `type_url ${JSON.stringify(typeUrl.slice(0, 80))} is not type.googleapis.com/<message>`);
    }
    const tooLong = [request.versionInfo, request.responseNonce].find((s) => s.length > LIMITS.nameChars);
    if (tooLong !== undefined) return invalid('too-long', `version_info and response_nonce are at most ${LIMITS.nameChars} characters`);
    if (request.resourceNames.length > LIMITS.namesPerType) {
      return exhausted('too-many-names', `at most ${LIMITS.namesPerType} resource names per type (got ${request.resourceNames.length})`);
    }
    if (request.resourceNames.some((n) => n.length > LIMITS.nameChars)) {
      return invalid('too-long', `a resource name is at most ${LIMITS.nameChars} characters`);
    }

    let state = this.types.get(typeUrl);
    const nonce = request.responseNonce;
    if (nonce !== '' && (state === undefined || nonce !== state.sentNonce)) return { kind: 'stale', typeUrl };
    if (state === undefined) {
      if (this.types.size >= LIMITS.typesPerNode) {
        return exhausted('too-many-types', `at most ${LIMITS.typesPerNode} resource types per stream`);
      }
      state = {
        names: [],
        wildcard: false,
        changed: true,
        sentVersion: undefined,
        sentNonce: undefined,
        awaiting: false,
        ackedVersion: undefined,
        rejectedVersion: undefined,
        bytes: 0,
      };
    }
    const problem = this.subscribe(typeUrl, state, request.resourceNames);
    if (problem !== undefined) return problem;
    this.types.set(typeUrl, state);

    const answering = state.awaiting;
    state.awaiting = false;
    if (nonce === '') {
      // A (re)subscription of the type: answer it whatever is in flight.
      state.changed = true;
      return { kind: 'subscribe', typeUrl };
    }
    // The last response was answered already: this request only changes the names.
    if (!answering) return { kind: 'subscribe', typeUrl };
    const version = state.sentVersion ?? '';
    if (request.errorDetail !== undefined) {
      state.rejectedVersion = state.sentVersion;
      return { kind: 'nack', typeUrl, version, message: request.errorDetail.message.slice(0, LIMITS.nackMessageChars) };
    }
    state.ackedVersion = state.sentVersion;
    return { kind: 'ack', typeUrl, version };
  }

  /**
   * The response for a type given what the server holds (`available`: every resource of that type
   * for this node's place), or undefined when nothing should be sent now: no subscription, an
   * answer still awaited, or nothing new (the same version as sent, or the version this stream
   * rejected).
   */
  respond(typeUrl: string, available: readonly EncodedResource[]): Outgoing | undefined {
    const state = this.types.get(typeUrl);
    if (state === undefined || state.awaiting) return undefined;
    if (!state.wildcard && state.names.length === 0) return undefined;
    const resources = state.wildcard ? available : available.filter((r) => state.names.includes(r.name));
    const version = versionOf(resources);
    const first = state.sentVersion === undefined;
    if (!first && !state.changed && (version === state.sentVersion || version === state.rejectedVersion)) return undefined;
    const nonce = (++this.nonces).toString(36);
    state.sentVersion = version;
    state.sentNonce = nonce;
    state.awaiting = true;
    state.changed = false;
    return {
      version,
      response: {
        versionInfo: version,
        resources: resources.map((r) => r.any),
        canary: false,
        typeUrl,
        nonce,
        controlPlane: { identifier: this.controlPlane },
      },
    };
  }

  /** Reads the node from the first request; later requests may repeat it but not move it. */
  private takeNode(request: DiscoveryRequest): RequestOutcome | undefined {
    const node = request.node;
    if (this.node !== undefined) {
      if (node !== undefined && node.locality !== undefined && node.locality.zone !== '' && node.locality.zone !== this.node.zone) {
        return invalid('node-moved', `node.locality.zone changed from ${this.node.zone} to ${node.locality.zone} within one stream`);
      }
      return undefined;
    }
    if (node === undefined) return invalid('no-node', 'the first request of a stream must carry node (with node.locality.zone)');
    const zone = node.locality?.zone ?? '';
    if (zone === '') {
      return invalid(
        'no-zone',
        "node.locality.zone is empty: spillway-xds serves each gateway its zone's subset and priorities, so the node must say its zone (Envoy: node.locality in the bootstrap)",
      );
    }
    const fields = [node.id, node.cluster, zone, node.locality?.region ?? '', node.userAgentName];
    if (fields.some((f) => f.length > LIMITS.nodeFieldChars)) {
      return invalid('too-long', `node.id, node.cluster, the locality and user_agent_name are at most ${LIMITS.nodeFieldChars} characters`);
    }
    const version = node.userAgentVersionType?.$case === 'userAgentVersion' ? node.userAgentVersionType.value : '';
    this.node = {
      id: node.id,
      cluster: node.cluster,
      zone,
      region: node.locality?.region ?? '',
      userAgent: `${node.userAgentName}${version === '' ? '' : `/${version.slice(0, LIMITS.nodeFieldChars)}`}`,
    };
    this.nodeBytes = fields.reduce((sum, f) => sum + f.length, 0) + Math.min(version.length, LIMITS.nodeFieldChars);
    return undefined;
  }

  /** Sets the type's names (sorted, unique; `*` or a legacy empty LDS/CDS request means all), within the byte bound. */
  private subscribe(typeUrl: string, state: TypeState, requested: readonly string[]): RequestOutcome | undefined {
    const names = [...new Set(requested)].sort();
    // Legacy wildcard: listeners and clusters asked for with no names, from the first request on.
    const fresh = state.sentVersion === undefined && state.bytes === 0;
    const wildcard = names.includes(WILDCARD) || (names.length === 0 && wildcardWhenEmpty(typeUrl) && (fresh || state.wildcard));
    const bytes =
      TYPE_OVERHEAD_BYTES +
      typeUrl.length +
      names.reduce((sum, n) => sum + NAME_OVERHEAD_BYTES + n.length, 0) +
      // sent and acked versions (16 hex), the rejected one, the nonce
      3 * 16 +
      8;
    const total = this.accountedBytes - state.bytes + bytes;
    if (total > LIMITS.nodeBytes) {
      return exhausted('node-bytes', `this stream's subscriptions would take ${total} bytes, over the ${LIMITS.nodeBytes} a node may hold`);
    }
    if (wildcard !== state.wildcard || names.length !== state.names.length || names.some((n, i) => n !== state.names[i])) {
      state.changed = true;
    }
    state.names = names;
    state.wildcard = wildcard;
    this.typeBytes += bytes - state.bytes;
    state.bytes = bytes;
    return undefined;
  }
}

/** The version of a response: its resources' names and versions, hashed (one resource: its own version). */
export function versionOf(resources: readonly EncodedResource[]): string {
  if (resources.length === 1) return (resources[0] as EncodedResource).version;
  return textHash(resources.map((r) => `${r.name}\u0000${r.version}`).join('\u0001'));
}

function invalid(reason: string, message: string): RequestOutcome {
  return { kind: 'error', code: 'INVALID_ARGUMENT', reason, message };
}

function exhausted(reason: string, message: string): RequestOutcome {
  return { kind: 'error', code: 'RESOURCE_EXHAUSTED', reason, message };
}
