#!/bin/sh
# Regenerate packages/protocol/src/gen from proto/ with ts-proto through the buf npm binary.
# Works offline: buf carries the google.protobuf well-known types and the plugin is local.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
npx --no-install buf generate proto --template proto/buf.gen.yaml
