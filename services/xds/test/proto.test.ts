/**
 * The trimmed protos (packages/xds-protocol/proto) are Envoy's on the wire: every message and enum they
 * define exists in Envoy's own .proto files (the copy in @grpc/grpc-js-xds, deps/) under the same
 * full name, and every field has Envoy's number, type, label and oneof; every enum value Envoy's
 * number. The resources spillway-xds encodes decode with Envoy's files to what docs/xds.md says.
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { placeResources, staticResources } from '../src/index.js';
import { CLUSTER, POOL, THREE_ZONES, fleetOf } from './fixtures.js';

const require = createRequire(import.meta.url);
const DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const TRIMMED = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'packages', 'xds-protocol', 'proto');
const WELL_KNOWN = /^google\/protobuf\/(any|duration|empty|struct|timestamp|wrappers|field_mask)\.proto$/;
// protobufjs carries the well-known types itself, and google/protobuf/descriptor.proto (for options) as a file.
const PROTOBUFJS = dirname(require.resolve('protobufjs/package.json'));

function load(files: string[], include: string[]): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => {
    if (WELL_KNOWN.test(target)) return null;
    return include.map((dir) => join(dir, target)).find((p) => existsSync(p)) ?? target;
  };
  root.loadSync(files, { keepCase: true });
  root.resolveAll();
  return root;
}

function protoFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return protoFiles(path);
    return name.endsWith('.proto') ? [relative(TRIMMED, path)] : [];
  });
}

const trimmedFiles = protoFiles(TRIMMED);
const trimmed = load(trimmedFiles, [TRIMMED]);
const envoy = load(trimmedFiles, [...['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => join(DEPS, d)), PROTOBUFJS]);

function all(ns: protobuf.NamespaceBase): protobuf.ReflectionObject[] {
  return ns.nestedArray.flatMap((o) => (o instanceof protobuf.Namespace ? [o, ...all(o)] : [o]));
}

const typeName = (field: protobuf.Field) => (field.resolvedType ? field.resolvedType.fullName : field.type);

describe('trimmed xDS protos against Envoy’s', () => {
  const objects = all(trimmed).filter((o) => o instanceof protobuf.Type || o instanceof protobuf.Enum);

  it('define the messages and enums spillway-xds uses', () => {
    const names = objects.map((o) => o.fullName);
    for (const name of [
      '.envoy.service.discovery.v3.DiscoveryRequest',
      '.envoy.service.discovery.v3.DiscoveryResponse',
      '.envoy.config.endpoint.v3.ClusterLoadAssignment',
      '.envoy.config.core.v3.TypedExtensionConfig',
      '.envoy.extensions.filters.http.set_metadata.v3.Config',
      '.envoy.config.listener.v3.Listener',
      '.envoy.config.route.v3.RouteConfiguration',
      '.envoy.config.cluster.v3.Cluster',
    ])
      expect(names).toContain(name);
  });

  it.each(objects.map((o) => [o.fullName.slice(1), o] as const))('%s matches Envoy field by field', (_name, object) => {
    const theirs = envoy.lookup(object.fullName);
    expect(theirs, `${object.fullName} exists in Envoy's protos`).not.toBeNull();
    if (object instanceof protobuf.Enum) {
      expect(theirs).toBeInstanceOf(protobuf.Enum);
      for (const [key, value] of Object.entries(object.values))
        expect((theirs as protobuf.Enum).values[key], `${object.fullName}.${key}`).toBe(value);
      return;
    }
    expect(theirs).toBeInstanceOf(protobuf.Type);
    const type = theirs as protobuf.Type;
    for (const field of (object as protobuf.Type).fieldsArray) {
      const other = type.fields[field.name];
      const where = `${object.fullName}.${field.name}`;
      expect(other, where).toBeDefined();
      expect(other!.id, where).toBe(field.id);
      expect(typeName(other!), where).toBe(typeName(field));
      expect(other!.repeated, where).toBe(field.repeated);
      expect(other!.map, where).toBe(field.map);
      expect(other!.partOf?.name, where).toBe(field.partOf?.name);
    }
  });
});

describe("encoded resources, decoded with Envoy's protos", () => {
  const decode = (typeUrl: string, bytes: Uint8Array): Record<string, unknown> => {
    const type = envoy.lookupType(typeUrl.slice('type.googleapis.com/'.length));
    return type.toObject(type.decode(bytes), { enums: String, longs: Number, oneofs: true, defaults: false }) as Record<string, unknown>;
  };

  it('EDS and the ECDS set_metadata config', () => {
    const [eds, ecds] = placeResources(fleetOf(THREE_ZONES).pool(POOL), { zone: 'zone-a', region: 'r1' }, CLUSTER);
    const cla = decode(eds!.typeUrl, eds!.any.value);
    expect(cla).toMatchObject({
      cluster_name: CLUSTER,
      endpoints: [
        {
          locality: { region: 'r1', zone: 'zone-a' },
          load_balancing_weight: { value: 2 },
          lb_endpoints: [
            { endpoint: { address: { socket_address: { address: '10.0.1.5', port_value: 8000 } } }, health_status: 'HEALTHY' },
            { endpoint: { address: { socket_address: { address: '10.0.1.6', port_value: 8000 } } }, health_status: 'HEALTHY' },
          ],
        },
        { locality: { zone: 'zone-b' }, priority: 1 },
        { locality: { zone: 'zone-c', region: 'r2' }, priority: 2 },
      ],
    });
    const extension = decode(ecds!.typeUrl, ecds!.any.value) as { name: string; typed_config: { type_url: string; value: Uint8Array } };
    expect(extension.name).toBe('spillway-subset-hint');
    const config = decode(extension.typed_config.type_url, extension.typed_config.value);
    const struct = envoy.lookupType('google.protobuf.Struct');
    const value = (config['metadata'] as { metadata_namespace: string; value: protobuf.Message }[])[0]!;
    expect(value.metadata_namespace).toBe('envoy.lb.subset_hint');
    expect(struct.toObject(struct.fromObject(value.value), {})).toBeDefined();
    expect(JSON.stringify(value.value)).toContain('10.0.1.5:8000');
  });

  it('LDS, RDS and CDS', () => {
    const [lds, rds, cds] = staticResources(CLUSTER);
    const listener = decode(lds!.typeUrl, lds!.any.value) as {
      name: string;
      api_listener: { api_listener: { type_url: string; value: Uint8Array } };
    };
    expect(listener.name).toBe(CLUSTER);
    const hcm = decode(listener.api_listener.api_listener.type_url, listener.api_listener.api_listener.value);
    expect(hcm).toMatchObject({ rds: { route_config_name: CLUSTER, config_source: { ads: {}, resource_api_version: 'V3' } } });
    expect(decode(rds!.typeUrl, rds!.any.value)).toMatchObject({
      name: CLUSTER,
      virtual_hosts: [{ domains: ['*'], routes: [{ match: { prefix: '' }, route: { cluster: CLUSTER } }] }],
    });
    expect(decode(cds!.typeUrl, cds!.any.value)).toMatchObject({
      name: CLUSTER,
      type: 'EDS',
      eds_cluster_config: { service_name: CLUSTER, eds_config: { ads: {} } },
    });
  });
});
