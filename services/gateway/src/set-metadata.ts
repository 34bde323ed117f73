// Envoy's set_metadata filter on a request's untyped dynamic metadata (envoyproxy/envoy
// source/extensions/filters/http/set_metadata/set_metadata_filter.cc, SetMetadataFilter::
// decodeHeaders): what spillway-xds's ECDS config `spillway-subset-hint` writes before ext_proc
// (the zone-local subset and the gateway's zone). Pure.

/** One untyped entry of a set_metadata Config: a namespace, its value, and whether it may merge into one already there. */
export interface SetMetadataEntry {
  readonly metadataNamespace: string;
  readonly allowOverwrite: boolean;
  /** The untyped value (a Struct); undefined for a typed entry, which untyped metadata never sees. */
  readonly value?: Readonly<Record<string, unknown>> | undefined;
}

type Namespace = Record<string, unknown>;

/**
 * Applies the entries in order: a namespace not yet present gets the entry's value (a copy); one
 * already present is left alone, unless the entry allows overwriting, in which case the value is
 * merged in (StructUtil::update): a key not there is added, one of another kind is replaced, lists
 * are appended to, structs merged key by key, and other values replaced.
 */
export function applySetMetadata(namespaces: Map<string, Namespace>, entries: readonly SetMetadataEntry[]): void {
  for (const entry of entries) {
    if (entry.value === undefined) continue;
    const existing = namespaces.get(entry.metadataNamespace);
    if (existing === undefined) namespaces.set(entry.metadataNamespace, structuredClone({ ...entry.value }));
    else if (entry.allowOverwrite) mergeStruct(existing, entry.value);
  }
}

function isStruct(value: unknown): value is Namespace {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function mergeStruct(target: Namespace, source: Readonly<Namespace>): void {
  for (const [key, value] of Object.entries(source)) {
    // A Struct key, never an object's prototype.
    if (key === '__proto__') continue;
    const current = target[key];
    if (Array.isArray(current) && Array.isArray(value)) current.push(...structuredClone(value));
    else if (isStruct(current) && isStruct(value)) mergeStruct(current, value);
    else target[key] = structuredClone(value);
  }
}
