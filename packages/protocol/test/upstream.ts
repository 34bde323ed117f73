// Envoy's own ext_proc protos (as shipped by @grpc/grpc-js-xds), loaded with protobufjs and
// brought up to date with the fields that copy predates, from Envoy's published field numbers:
// ProcessingRequest.protocol_config = 11, BodySendMode.FULL_DUPLEX_STREAMED = 4,
// BodyMutation.streamed_response = 3.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import protobuf from 'protobufjs';

const require = createRequire(import.meta.url);
const deps = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');
const protobufjsDir = dirname(require.resolve('protobufjs/package.json'));
const includeDirs = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((dir) => join(deps, dir));

function resolve(_origin: string, target: string): string {
  if (target.startsWith('google/protobuf/')) {
    // protobufjs bundles most well-known types; descriptor.proto (for annotations) ships beside it.
    return target in protobuf.common ? target : join(protobufjsDir, target);
  }
  for (const dir of includeDirs) {
    const path = join(dir, target);
    if (existsSync(path)) return path;
  }
  return target;
}

const PKG = '.envoy.service.ext_proc.v3';

export function loadUpstream(): protobuf.Root {
  const root = new protobuf.Root();
  root.resolvePath = resolve;
  root.loadSync('envoy/service/ext_proc/v3/external_processor.proto', { keepCase: true });

  // ProcessingMode.BodySendMode.FULL_DUPLEX_STREAMED = 4 (and GRPC = 5).
  const bodySendMode = root.lookupEnum('envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode');
  bodySendMode.add('FULL_DUPLEX_STREAMED', 4);
  bodySendMode.add('GRPC', 5);

  const service = root.lookup('envoy.service.ext_proc.v3') as protobuf.Namespace;
  const bodyMode = '.envoy.extensions.filters.http.ext_proc.v3.ProcessingMode.BodySendMode';
  // ProcessingRequest.protocol_config = 11.
  service.add(
    new protobuf.Type('ProtocolConfiguration')
      .add(new protobuf.Field('request_body_mode', 1, bodyMode))
      .add(new protobuf.Field('response_body_mode', 2, bodyMode))
      .add(new protobuf.Field('send_body_without_waiting_for_header_response', 3, 'bool')),
  );
  root.lookupType(`${PKG}.ProcessingRequest`).add(new protobuf.Field('protocol_config', 11, `${PKG}.ProtocolConfiguration`));

  // BodyMutation.streamed_response = 3, in the `mutation` oneof.
  service.add(
    new protobuf.Type('StreamedBodyResponse')
      .add(new protobuf.Field('body', 1, 'bytes'))
      .add(new protobuf.Field('end_of_stream', 2, 'bool')),
  );
  const bodyMutation = root.lookupType(`${PKG}.BodyMutation`);
  const streamed = new protobuf.Field('streamed_response', 3, `${PKG}.StreamedBodyResponse`);
  bodyMutation.add(streamed);
  const mutation = bodyMutation.oneofs['mutation'];
  if (mutation === undefined) throw new Error('upstream BodyMutation has no mutation oneof');
  mutation.add(streamed);

  root.resolveAll();
  return root;
}
