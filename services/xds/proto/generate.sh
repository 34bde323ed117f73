#!/bin/sh
# Regenerate services/xds/src/gen from services/xds/proto with ts-proto through the buf npm binary.
# Works offline: buf carries the google.protobuf well-known types and the plugin is local.
set -eu
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
npx --no-install buf generate services/xds/proto --template services/xds/proto/buf.gen.yaml
