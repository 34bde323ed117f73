import type { Endpoint } from './endpoint.js';
import type { EndpointRecord } from './endpoint.js';

/** Read-side queries over one pool, shaped for the scheduler: every lookup is O(1) or O(answer). */
export interface PoolView {
  readonly name: string;
  /** Every pod ever seen and not yet pruned, including not-ready, deleted and metrics-only ones. */
  endpoints(): IterableIterator<Endpoint>;
  /** Routable pods (ready, not deleted, with an address) of one zone. */
  readyInZone(zone: string): ReadonlySet<Endpoint>;
  /** Zones that have at least one routable pod. */
  readyZones(): IterableIterator<string>;
  /** Region of a zone, from its pods' readiness events. */
  regionOf(zone: string): string | undefined;
  /** The pool has a pod in this zone that is not deleted (ready or not, or known only by metrics). */
  hasZone(zone: string): boolean;
  /** Routable pods at an exact canonical `ip:port` (normally zero or one). */
  routableAt(addressKey: string): readonly Endpoint[];
  /** Routable pods on an IP, any port (a bare-IP subset entry). */
  routableOnIp(ip: string): readonly Endpoint[];
  readonly readyCount: number;
  /**
   * When the zone's newest metrics sample, and newest readiness event, were received (-Infinity
   * before any). They tell a pod whose events stopped from a zone whose events all stopped
   * (collector or NATS outage): docs/picking.md, "Event gaps are not overload".
   */
  zoneLastSampleAt(zone: string): number;
  zoneLastReadinessAt(zone: string): number;
}

const NONE: readonly Endpoint[] = Object.freeze([]);
const EMPTY_SET: ReadonlySet<Endpoint> = new Set();

function addTo<K, V>(index: Map<K, V[]>, key: K, value: V): void {
  const list = index.get(key);
  if (list) list.push(value);
  else index.set(key, [value]);
}

function removeFrom<K, V>(index: Map<K, V[]>, key: K, value: V): void {
  const list = index.get(key);
  if (!list) return;
  const at = list.indexOf(value);
  if (at >= 0) list.splice(at, 1);
  if (list.length === 0) index.delete(key);
}

/**
 * The pods of one zone of a pool, by name. `deleted` holds its tombstoned pods in the order they
 * were deleted, so the oldest tombstone is the first to go when the zone is full.
 */
export class ZonePods {
  readonly pods = new Map<string, EndpointRecord>();
  readonly deleted = new Set<EndpointRecord>();

  constructor(readonly zone: string) {}

  /** Keeps `deleted` in step with a record whose readiness just changed. */
  track(record: EndpointRecord): void {
    if (record.deleted) this.deleted.add(record);
    else this.deleted.delete(record);
  }

  remove(record: EndpointRecord): void {
    this.pods.delete(record.pod);
    this.deleted.delete(record);
  }

  /** Forgets the oldest tombstone no request still holds; false when there is none. */
  evictOldestTombstone(): boolean {
    for (const record of this.deleted) {
      if (record.inFlight === 0) {
        this.remove(record);
        return true;
      }
    }
    return false;
  }
}

/**
 * The indexes of one pool. Only the fleet mutates them, around each readiness change.
 *
 * An address belongs to one zone. Every ready pod *claims* its address; which claimants are
 * routable is settled per address from the claimants alone, so the view does not depend on the
 * order events arrive in: the claimants of one zone share it (a stale pod and its successor);
 * when pods of several zones claim it, a view held for a zone (`localZone`, an EPP's) routes only
 * that zone's claimants (its collector is the one that knows its pods), and without a local
 * claimant none — a pod of one zone naming another zone's address is never merged into that
 * zone's lists. A view held for no zone (spillway-xds, which settles per gateway zone; the
 * operator's table) keeps every claimant routable and marks them (`addressConflict`).
 */
export class PoolState implements PoolView {
  /** Pods by zone, then by name: a pod is identified by (pool, zone, pod). */
  readonly zones = new Map<string, ZonePods>();
  /** Ready pods by address, whether routable or refused for a conflict. */
  private readonly claims = new Map<string, EndpointRecord[]>();
  private readonly readyByZone = new Map<string, Set<EndpointRecord>>();
  private readonly byAddress = new Map<string, EndpointRecord[]>();
  private readonly byIp = new Map<string, EndpointRecord[]>();
  /** Per zone, how many live pods name each region; a zone's region is the most named one. */
  private readonly zoneRegions = new Map<string, Map<string, number>>();
  readyCount = 0;
  private readonly lastSampleAt = new Map<string, number>();
  private readonly lastReadinessAt = new Map<string, number>();

  constructor(
    readonly name: string,
    /** Whose claims win a conflict over an address (the EPP's zone); none: no zone's. */
    private readonly localZone?: string,
  ) {}

  noteSample(zone: string, receivedAt: number): void {
    if (!(receivedAt <= (this.lastSampleAt.get(zone) ?? Number.NEGATIVE_INFINITY))) this.lastSampleAt.set(zone, receivedAt);
  }

  noteReadiness(zone: string, receivedAt: number): void {
    if (!(receivedAt <= (this.lastReadinessAt.get(zone) ?? Number.NEGATIVE_INFINITY))) this.lastReadinessAt.set(zone, receivedAt);
  }

  zoneLastSampleAt(zone: string): number {
    return this.lastSampleAt.get(zone) ?? Number.NEGATIVE_INFINITY;
  }

  zoneLastReadinessAt(zone: string): number {
    return this.lastReadinessAt.get(zone) ?? Number.NEGATIVE_INFINITY;
  }

  /** Takes a pod out of the routing indexes before its readiness changes. */
  unindex(record: EndpointRecord): void {
    if (record.region !== undefined && !record.deleted) this.countRegion(record.zone, record.region, -1);
    if (!record.claimsAddress) return;
    const address = record.address as string;
    removeFrom(this.claims, address, record);
    this.unroute(record);
    record.addressConflict = record.addressRefused = false;
    this.settle(address);
  }

  /**
   * Puts a pod back into the routing indexes after its readiness changed. Returns whether its
   * address is claimed by pods of more than one zone (counted and logged by the caller).
   */
  index(record: EndpointRecord): boolean {
    if (record.region !== undefined && !record.deleted) this.countRegion(record.zone, record.region, 1);
    if (!record.claimsAddress || record.ip === undefined) return false;
    const address = record.address as string;
    addTo(this.claims, address, record);
    return this.settle(address);
  }

  /** Routes exactly the claimants of `address` that may have it (see the class comment); true when zones conflict over it. */
  private settle(address: string): boolean {
    const claimants = this.claims.get(address);
    if (claimants === undefined) return false;
    let zone: string | undefined;
    let conflict = false;
    let local = false;
    for (const claimant of claimants) {
      if (zone === undefined) zone = claimant.zone;
      else if (claimant.zone !== zone) conflict = true;
      if (claimant.zone === this.localZone) local = true;
    }
    for (const claimant of claimants) {
      const refused = conflict && this.localZone !== undefined && !(local && claimant.zone === this.localZone);
      claimant.addressConflict = conflict;
      claimant.addressRefused = refused;
      if (refused) this.unroute(claimant);
      else this.route(claimant);
    }
    return conflict;
  }

  private unroute(record: EndpointRecord): void {
    if (!record.indexed) return;
    record.indexed = false;
    const zoneSet = this.readyByZone.get(record.zone);
    if (zoneSet?.delete(record)) {
      this.readyCount--;
      if (zoneSet.size === 0) this.readyByZone.delete(record.zone);
    }
    if (record.address !== undefined) removeFrom(this.byAddress, record.address, record);
    if (record.ip !== undefined) removeFrom(this.byIp, record.ip, record);
  }

  private route(record: EndpointRecord): void {
    if (record.indexed || record.address === undefined || record.ip === undefined) return;
    record.indexed = true;
    let zoneSet = this.readyByZone.get(record.zone);
    if (!zoneSet) {
      zoneSet = new Set();
      this.readyByZone.set(record.zone, zoneSet);
    }
    zoneSet.add(record);
    this.readyCount++;
    addTo(this.byAddress, record.address, record);
    addTo(this.byIp, record.ip, record);
  }

  /** Zones holding at least one pod record (live, metrics-only or tombstoned). */
  get zoneCount(): number {
    return this.zones.size;
  }

  *endpoints(): IterableIterator<Endpoint> {
    for (const zone of this.zones.values()) yield* zone.pods.values();
  }

  /** Forgets a zone that holds no pod any more, with what the pool noted about it. */
  dropZone(zone: string): void {
    if ((this.zones.get(zone)?.pods.size ?? 0) > 0) return;
    this.zones.delete(zone);
    this.lastSampleAt.delete(zone);
    this.lastReadinessAt.delete(zone);
  }

  /** The pods of one zone, created on first use. */
  zonePods(zone: string): ZonePods {
    let pods = this.zones.get(zone);
    if (!pods) {
      pods = new ZonePods(zone);
      this.zones.set(zone, pods);
    }
    return pods;
  }

  readyInZone(zone: string): ReadonlySet<Endpoint> {
    return this.readyByZone.get(zone) ?? EMPTY_SET;
  }

  readyZones(): IterableIterator<string> {
    return this.readyByZone.keys();
  }

  hasZone(zone: string): boolean {
    const pods = this.zones.get(zone);
    return pods !== undefined && pods.pods.size > pods.deleted.size;
  }

  /**
   * Pods of one zone should agree on its region; if they do not, the most named region wins
   * (ties to the smallest name), so the answer does not depend on the order events arrived in.
   */
  regionOf(zone: string): string | undefined {
    const counts = this.zoneRegions.get(zone);
    if (!counts) return undefined;
    let best: string | undefined;
    let bestCount = 0;
    for (const [region, count] of counts) {
      if (count > bestCount || (count === bestCount && best !== undefined && region < best)) {
        best = region;
        bestCount = count;
      }
    }
    return best;
  }

  private countRegion(zone: string, region: string, delta: number): void {
    let counts = this.zoneRegions.get(zone);
    if (!counts) {
      counts = new Map();
      this.zoneRegions.set(zone, counts);
    }
    const next = (counts.get(region) ?? 0) + delta;
    if (next > 0) counts.set(region, next);
    else counts.delete(region);
    if (counts.size === 0) this.zoneRegions.delete(zone);
  }

  routableAt(addressKey: string): readonly Endpoint[] {
    return this.byAddress.get(addressKey) ?? NONE;
  }

  routableOnIp(ip: string): readonly Endpoint[] {
    return this.byIp.get(ip) ?? NONE;
  }
}
