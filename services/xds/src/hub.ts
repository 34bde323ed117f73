/**
 * Every connected node, and the resources each node's place gets (docs/xds.md). Pure: the service
 * hands it requests and tells it when the view changed; it hands back responses to write and
 * streams to end, through XdsTransport.
 *
 * Nodes of one place (zone, and the region the node states) share one set of encoded resources:
 * EDS and ECDS are built once per place per change, not per node, and a node's own state is its
 * subscriptions (session.ts). So memory is bounded per node (LIMITS.nodeBytes) and in total
 * (`maxNodes` nodes, one place per zone a node may name, plus the regions nodes state).
 *
 * Until the view has caught up with the stream (`setReady`), requests are held, not answered: an
 * empty endpoint list would send a gateway's traffic nowhere. Then each node's zone is checked: a
 * zone that is neither in `zones` (when given) nor in the view is an error that ends the stream.
 */
import type { Place, PoolView } from '@spillway/fleet';
import { kindOf, TYPE_URLS, type DiscoveryRequest, type TypeLabel } from '@spillway/xds-protocol';
import { placeResources, staticResources, type EncodedResource } from './resources.js';
import { XdsSession, type NodeInfo, type Outgoing, type ProtocolErrorCode, type RequestOutcome } from './session.js';

export interface HubOptions {
  readonly pool: string;
  /** EDS, LDS, RDS and CDS resource name (`--cluster-name`). */
  readonly clusterName: string;
  /** The zones a node may name (`--zones`); empty: every zone the view holds a pod of. */
  readonly zones: readonly string[];
  /** Most streams at once (`--max-nodes`); a further one is refused with RESOURCE_EXHAUSTED. */
  readonly maxNodes: number;
  /** `control_plane.identifier` of every response. */
  readonly controlPlane: string;
}

/** Where the hub's decisions go: the service writes responses and ends streams. */
export interface XdsTransport {
  send(session: XdsSession, out: Outgoing): void;
  close(session: XdsSession, code: ProtocolErrorCode, message: string): void;
}

/** What the hub saw, for metrics and logs. */
export interface HubObserver {
  request(session: XdsSession, outcome: RequestOutcome): void;
  refused(session: XdsSession, reason: string, message: string): void;
}

export class HubCounters {
  readonly responses = new Map<TypeLabel, number>();
  readonly acks = new Map<TypeLabel, number>();
  readonly nacks = new Map<TypeLabel, number>();
  stale = 0;
  readonly refused = new Map<string, number>();
  /** Places whose resources were rebuilt, and of those the ones whose content changed. */
  rebuilds = 0;
  changedPlaces = 0;
}

interface PlaceEntry {
  readonly key: string;
  readonly zone: string;
  readonly statedRegion: string;
  readonly sessions: Set<XdsSession>;
  resources: readonly EncodedResource[];
  bytes: number;
  /** The view generation the resources were built from. */
  generation: number;
}

export interface HubMemory {
  readonly nodes: number;
  /** Sum and maximum of the nodes' accounted state (session.ts). */
  readonly nodeBytes: number;
  readonly maxNodeBytes: number;
  /** Places with connected nodes, and the bytes of their encoded resources (shared by their nodes). */
  readonly places: number;
  readonly placeBytes: number;
}

export class XdsHub {
  readonly counters = new HubCounters();
  private readonly sessions = new Set<XdsSession>();
  /** Nodes waiting for the view to catch up (not yet checked or placed). */
  private readonly waiting = new Set<XdsSession>();
  private readonly places = new Map<string, PlaceEntry>();
  private readonly placeOf = new Map<XdsSession, PlaceEntry>();
  private readonly fixed: readonly EncodedResource[];
  private ready = false;
  private generation = 0;
  private zonesCache: { generation: number; zones: ReadonlySet<string> } | undefined;
  private nextId = 1;

  constructor(
    private readonly view: () => PoolView | undefined,
    private readonly options: HubOptions,
    private readonly transport: XdsTransport,
    private readonly observer: HubObserver,
  ) {
    this.fixed = staticResources(options.clusterName);
  }

  get isReady(): boolean {
    return this.ready;
  }

  get nodeCount(): number {
    return this.sessions.size;
  }

  /** A new stream; undefined when `maxNodes` are connected (the caller refuses it). */
  open(): XdsSession | undefined {
    if (this.sessions.size >= this.options.maxNodes) {
      this.count(this.counters.refused, 'capacity');
      return undefined;
    }
    const session = new XdsSession(this.nextId++, this.options.controlPlane);
    this.sessions.add(session);
    this.waiting.add(session);
    return session;
  }

  /** The stream ended (either side): forget the node. */
  close(session: XdsSession): void {
    if (!this.sessions.delete(session)) return;
    this.waiting.delete(session);
    const place = this.placeOf.get(session);
    if (place === undefined) return;
    this.placeOf.delete(session);
    place.sessions.delete(session);
    if (place.sessions.size === 0) this.places.delete(place.key);
  }

  onRequest(session: XdsSession, request: DiscoveryRequest): void {
    if (!this.sessions.has(session)) return;
    const outcome = session.onRequest(request);
    this.observer.request(session, outcome);
    switch (outcome.kind) {
      case 'error':
        this.refuse(session, outcome.reason, outcome.code, outcome.message);
        return;
      case 'stale':
        this.counters.stale++;
        return;
      case 'ack':
        this.count(this.counters.acks, kindOf(outcome.typeUrl));
        break;
      case 'nack':
        this.count(this.counters.nacks, kindOf(outcome.typeUrl));
        break;
      case 'subscribe':
        break;
    }
    if (!this.ready) return;
    if (this.waiting.has(session) && !this.admit(session)) return;
    this.serve(session, outcome.typeUrl);
  }

  /** The view caught up: check and answer every node that was waiting. */
  setReady(): void {
    if (this.ready) return;
    this.ready = true;
    for (const session of [...this.waiting]) {
      if (session.node === undefined || !this.admit(session)) continue;
      for (const typeUrl of [...session.subscribedTypes()]) this.serve(session, typeUrl);
    }
  }

  /** The view's routing changed (a pod's readiness, address or region): the next flush rebuilds. */
  changed(): void {
    this.generation++;
  }

  /**
   * Rebuilds the resources of every place built before the last change and sends each node of a
   * place whose content changed what it subscribed to (session.ts decides; a node still to ACK its
   * last response gets the newest version when it does). Returns the responses sent.
   */
  flush(): number {
    if (!this.ready) return 0;
    let sent = 0;
    for (const place of this.places.values()) {
      if (place.generation === this.generation) continue;
      const before = place.resources;
      this.build(place);
      if (sameVersions(before, place.resources)) continue;
      this.counters.changedPlaces++;
      for (const session of place.sessions) {
        for (const typeUrl of [TYPE_URLS.eds, TYPE_URLS.ecds]) if (this.serve(session, typeUrl)) sent++;
      }
    }
    return sent;
  }

  memory(): HubMemory {
    let nodeBytes = 0;
    let maxNodeBytes = 0;
    for (const session of this.sessions) {
      const bytes = session.accountedBytes;
      nodeBytes += bytes;
      if (bytes > maxNodeBytes) maxNodeBytes = bytes;
    }
    let placeBytes = 0;
    for (const place of this.places.values()) placeBytes += place.bytes;
    return { nodes: this.sessions.size, nodeBytes, maxNodeBytes, places: this.places.size, placeBytes };
  }

  /** Connected nodes by zone (placed nodes only: a waiting node's zone is not checked yet). */
  nodesByZone(): Map<string, number> {
    const out = new Map<string, number>();
    for (const place of this.places.values()) out.set(place.zone, (out.get(place.zone) ?? 0) + place.sessions.size);
    return out;
  }

  /** The resources a placed node gets now, by type URL (for tests and the debug endpoint). */
  resourcesFor(session: XdsSession): readonly EncodedResource[] {
    const place = this.placeOf.get(session);
    return place === undefined ? [] : [...place.resources, ...this.fixed];
  }

  /** Checks the node's zone and places it; false when the stream was refused. */
  private admit(session: XdsSession): boolean {
    const node = session.node as NodeInfo;
    const known = this.knownZones();
    if (!known.has(node.zone)) {
      const list = [...known].sort().join(', ') || 'none yet';
      const source = this.options.zones.length > 0 ? '--zones' : `the pods of pool ${this.options.pool}`;
      this.refuse(
        session,
        'unknown-zone',
        'INVALID_ARGUMENT',
        `node.locality.zone ${JSON.stringify(node.zone)} is not a zone of pool ${this.options.pool} (zones from ${source}: ${list}); set the gateway's node.locality.zone to the zone it runs in`,
      );
      return false;
    }
    this.waiting.delete(session);
    const key = `${node.zone}\u0000${node.region}`;
    let place = this.places.get(key);
    if (place === undefined) {
      place = { key, zone: node.zone, statedRegion: node.region, sessions: new Set(), resources: [], bytes: 0, generation: -1 };
      this.places.set(key, place);
    }
    place.sessions.add(session);
    this.placeOf.set(session, place);
    if (place.generation !== this.generation) this.build(place);
    return true;
  }

  /** `--zones`, else the zones of the view's pods (not deleted ones); computed once per view generation. */
  private knownZones(): ReadonlySet<string> {
    if (this.zonesCache?.generation === this.generation) return this.zonesCache.zones;
    const zones = new Set<string>(this.options.zones);
    const pool = this.view();
    if (zones.size === 0 && pool !== undefined) for (const endpoint of pool.endpoints()) if (!endpoint.deleted) zones.add(endpoint.zone);
    this.zonesCache = { generation: this.generation, zones };
    return zones;
  }

  private build(place: PlaceEntry): void {
    const pool = this.view();
    // The view's region for the zone when it knows one (what the EPPs price with), else the node's word.
    const region = pool?.regionOf(place.zone) ?? (place.statedRegion === '' ? undefined : place.statedRegion);
    const node: Place = { zone: place.zone, region };
    place.resources = placeResources(pool, node, this.options.clusterName);
    place.bytes = place.resources.reduce((sum, r) => sum + r.any.value.length + r.name.length + r.typeUrl.length, 0);
    place.generation = this.generation;
    this.counters.rebuilds++;
  }

  /** Sends the node the type's response if session.ts says one is due; true when sent. */
  private serve(session: XdsSession, typeUrl: string): boolean {
    const place = this.placeOf.get(session);
    if (place === undefined) return false;
    const out = session.respond(typeUrl, this.available(place, typeUrl));
    if (out === undefined) return false;
    this.count(this.counters.responses, kindOf(typeUrl));
    this.transport.send(session, out);
    return true;
  }

  private available(place: PlaceEntry, typeUrl: string): readonly EncodedResource[] {
    const kind = kindOf(typeUrl);
    if (kind === 'eds' || kind === 'ecds') return place.resources.filter((r) => r.typeUrl === typeUrl);
    return this.fixed.filter((r) => r.typeUrl === typeUrl);
  }

  private refuse(session: XdsSession, reason: string, code: ProtocolErrorCode, message: string): void {
    this.count(this.counters.refused, reason);
    this.observer.refused(session, reason, message);
    this.close(session);
    this.transport.close(session, code, message);
  }

  private count<K>(map: Map<K, number>, key: K): void {
    map.set(key, (map.get(key) ?? 0) + 1);
  }
}

function sameVersions(a: readonly EncodedResource[], b: readonly EncodedResource[]): boolean {
  return a.length === b.length && a.every((r, i) => r.version === b[i]?.version && r.name === b[i]?.name);
}
