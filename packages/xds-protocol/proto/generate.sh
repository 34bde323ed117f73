#!/bin/sh
# Regenerate packages/xds-protocol/src/gen from packages/xds-protocol/proto with ts-proto through the buf npm binary.
# Works offline: buf carries the google.protobuf well-known types and the plugin is local.
set -eu
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
npx --no-install buf generate packages/xds-protocol/proto --template packages/xds-protocol/proto/buf.gen.yaml
