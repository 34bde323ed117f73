/**
 * Envoy's own schema for a static config: the YAML is read into the v3 `Bootstrap` message with the
 * .proto files of Envoy's API (the copy shipped in @grpc/grpc-js-xds, `deps/`), strictly: an
 * unknown field, a field in the wrong message, a value of the wrong type, an enum name Envoy does
 * not have, two members of one oneof, or an `Any` whose type URL names no known message is an
 * error naming the path. That is how Envoy's own config loader treats a config (proto3 JSON
 * mapping, unknown fields rejected), minus its hand-written validation rules.
 *
 * The copy predates a few things the config uses; they are added from their published field
 * numbers: the override_host policy (envoy-proto/override_host.proto) and the ext_proc
 * BodySendMode values FULL_DUPLEX_STREAMED = 4 and GRPC = 5.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const require = createRequire(import.meta.url);
const DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
// protobufjs carries the well-known types itself, and google/protobuf/descriptor.proto as a file.
const INCLUDE = [
  join(dirname(fileURLToPath(import.meta.url)), 'envoy-proto'),
  ...['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => join(DEPS, d)),
  dirname(require.resolve('protobufjs/package.json')),
];

/** Every message a `typed_config` in Spillway's Envoy configs may name, plus the Bootstrap itself. */
const FILES = [
  'envoy/config/bootstrap/v3/bootstrap.proto',
  'envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto',
  'envoy/extensions/filters/http/router/v3/router.proto',
  'envoy/extensions/filters/http/set_metadata/v3/set_metadata.proto',
  'envoy/extensions/filters/http/ext_proc/v3/ext_proc.proto',
  'envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.proto',
  'envoy/extensions/upstreams/http/v3/http_protocol_options.proto',
  'envoy/extensions/transport_sockets/tls/v3/tls.proto',
  'override_host.proto',
];

let cached: protobuf.Root | undefined;

/** The Envoy API as protobufjs reflection, loaded once. */
export function envoyApi(): protobuf.Root {
  if (cached) return cached;
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    // The well-known types are built into protobufjs (common.js); loading their files again would clash.
    if (/^google\/protobuf\/(any|duration|empty|struct|timestamp|wrappers|field_mask)\.proto$/.test(target)) return null;
    return INCLUDE.map((dir) => join(dir, target)).find((p) => existsSync(p)) ?? target;
  };
  root.loadSync(FILES, { keepCase: true });
  const bodyMode = root.lookupEnum('envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode');
  if (bodyMode.values['FULL_DUPLEX_STREAMED'] === undefined) bodyMode.add('FULL_DUPLEX_STREAMED', 4);
  if (bodyMode.values['GRPC'] === undefined) bodyMode.add('GRPC', 5);
  root.resolveAll();
  cached = root;
  return root;
}

const TYPE_URL_PREFIX = 'type.googleapis.com/';
const INT = /^(int32|uint32|sint32|fixed32|sfixed32)$/;
const LONG = /^(int64|uint64|sint64|fixed64|sfixed64)$/;

function kindOf(value: unknown): string {
  return Array.isArray(value) ? 'a list' : value === null ? 'null' : typeof value === 'object' ? 'a mapping' : `a ${typeof value}`;
}

/** Problems found, each `path: message`; empty when the value is a valid `type`. */
export function checkMessage(value: unknown, typeName: string, root: protobuf.Root = envoyApi()): string[] {
  const problems: string[] = [];
  checkType(value, root.lookupType(typeName), '', problems, root);
  return problems;
}

function checkType(value: unknown, type: protobuf.Type, path: string, problems: string[], root: protobuf.Root): void {
  const at = path || '(root)';
  switch (type.fullName) {
    case '.google.protobuf.Duration':
      if (typeof value !== 'string' || !/^-?\d+(\.\d{1,9})?s$/.test(value))
        problems.push(`${at}: a Duration is a string like "1.5s", not ${JSON.stringify(value)}`);
      return;
    case '.google.protobuf.Struct':
      if (typeof value !== 'object' || value === null || Array.isArray(value))
        problems.push(`${at}: a Struct is a mapping, not ${kindOf(value)}`);
      return;
    case '.google.protobuf.Value':
      return;
    case '.google.protobuf.ListValue':
      if (!Array.isArray(value)) problems.push(`${at}: a ListValue is a list, not ${kindOf(value)}`);
      return;
    case '.google.protobuf.Any':
      return checkAny(value, path, problems, root);
    case '.google.protobuf.BoolValue':
      if (typeof value !== 'boolean') problems.push(`${at}: expected a boolean, not ${kindOf(value)}`);
      return;
    case '.google.protobuf.StringValue':
      if (typeof value !== 'string') problems.push(`${at}: expected a string, not ${kindOf(value)}`);
      return;
    case '.google.protobuf.UInt32Value':
    case '.google.protobuf.Int32Value':
    case '.google.protobuf.UInt64Value':
    case '.google.protobuf.Int64Value':
    case '.google.protobuf.DoubleValue':
      if (typeof value !== 'number') problems.push(`${at}: expected a number, not ${kindOf(value)}`);
      return;
  }
  checkFields(value, type, path, problems, root);
}

function checkAny(value: unknown, path: string, problems: string[], root: protobuf.Root): void {
  const at = path || '(root)';
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    problems.push(`${at}: an Any is a mapping with "@type", not ${kindOf(value)}`);
    return;
  }
  const { '@type': url, ...rest } = value as Record<string, unknown>;
  if (typeof url !== 'string' || !url.startsWith(TYPE_URL_PREFIX)) {
    problems.push(`${at}: "@type" must be "${TYPE_URL_PREFIX}<message>"`);
    return;
  }
  const name = url.slice(TYPE_URL_PREFIX.length);
  let type: protobuf.Type;
  try {
    type = root.lookupType(name);
  } catch {
    problems.push(`${at}: "@type" ${url} names no message Envoy's API defines`);
    return;
  }
  checkType(rest, type, path, problems, root);
}

function checkFields(value: unknown, type: protobuf.Type, path: string, problems: string[], root: protobuf.Root): void {
  const at = path || '(root)';
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    problems.push(`${at}: ${type.name} is a mapping, not ${kindOf(value)}`);
    return;
  }
  const byName = new Map<string, protobuf.Field>();
  for (const field of type.fieldsArray) {
    byName.set(field.name, field);
    // Proto3 JSON accepts the lowerCamelCase name too.
    byName.set(
      field.name.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()),
      field,
    );
  }
  const oneofs = new Map<string, string>();
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
    const here = path ? `${path}.${key}` : key;
    const field = byName.get(key);
    if (!field) {
      problems.push(`${here}: unknown field of ${type.fullName.slice(1)}`);
      continue;
    }
    if (field.partOf) {
      const other = oneofs.get(field.partOf.name);
      if (other !== undefined) problems.push(`${here}: ${other} and ${key} are both set, but they are one of ${field.partOf.name}`);
      oneofs.set(field.partOf.name, key);
    }
    checkField(child, field, here, problems, root);
  }
}

function checkField(value: unknown, field: protobuf.Field, path: string, problems: string[], root: protobuf.Root): void {
  if (field instanceof protobuf.MapField) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      problems.push(`${path}: a map is a mapping, not ${kindOf(value)}`);
      return;
    }
    for (const [key, item] of Object.entries(value as Record<string, unknown>)) checkSingle(item, field, `${path}.${key}`, problems, root);
    return;
  }
  if (field.repeated) {
    if (!Array.isArray(value)) {
      problems.push(`${path}: a repeated field is a list, not ${kindOf(value)}`);
      return;
    }
    value.forEach((item, i) => checkSingle(item, field, `${path}[${i}]`, problems, root));
    return;
  }
  checkSingle(value, field, path, problems, root);
}

function checkSingle(value: unknown, field: protobuf.Field, path: string, problems: string[], root: protobuf.Root): void {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Type) return checkType(value, resolved, path, problems, root);
  if (resolved instanceof protobuf.Enum) {
    const known =
      typeof value === 'string' ? value in resolved.values : typeof value === 'number' && Object.values(resolved.values).includes(value);
    if (!known)
      problems.push(
        `${path}: ${JSON.stringify(value)} is not a value of ${resolved.fullName.slice(1)} (${Object.keys(resolved.values).join(', ')})`,
      );
    return;
  }
  const type = field.type;
  const ok =
    type === 'string' || type === 'bytes'
      ? typeof value === 'string'
      : type === 'bool'
        ? typeof value === 'boolean'
        : INT.test(type)
          ? typeof value === 'number' && Number.isInteger(value)
          : LONG.test(type)
            ? (typeof value === 'number' && Number.isInteger(value)) || (typeof value === 'string' && /^-?\d+$/.test(value))
            : typeof value === 'number';
  if (!ok) problems.push(`${path}: expected ${type}, not ${kindOf(value)} ${JSON.stringify(value)}`);
}
