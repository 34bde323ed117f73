# syntax=docker/dockerfile:1
# One image with every Spillway binary; the container's command picks one (they are on PATH):
#   docker build -t spillway/spillway:0.1.0 .
#   docker run --init --read-only spillway/spillway:0.1.0 spillway-epp --pool llama --zone zone-a ...
# Binaries: spillway-epp, spillway-xds, spillway-collector, spillway-sim, spillway-gateway, spillway-fleet,
# spillway-provision. Kubernetes manifests set `command:` (infra/k8s). test/deploy checks this file's
# structure, and test/deploy/production-install.test.ts runs the same steps (npm ci, npm prune
# --omit=dev, start) on a copy of the repository.

ARG NODE_IMAGE=node:20-bookworm-slim

# --- build: install everything, compile (npm ci runs `prepare`, i.e. `tsc -b`), drop dev deps.
FROM ${NODE_IMAGE} AS build
WORKDIR /src
ENV npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
COPY . .
RUN npm ci
RUN npm prune --omit=dev
# Gather what runs: the root manifest and node_modules (workspace links included), and per
# workspace its package.json, compiled dist/, bin/ launchers and unhoisted node_modules.
# Sources, tests, type declarations' maps and build info stay behind.
RUN mkdir -p /out \
 && cp -a package.json node_modules /out/ \
 && for ws in packages/* services/*; do \
      mkdir -p "/out/$ws" && cp -a "$ws/package.json" "$ws/dist" "/out/$ws/" \
      && if [ -d "$ws/bin" ]; then cp -a "$ws/bin" "/out/$ws/"; fi \
      && if [ -d "$ws/node_modules" ]; then cp -a "$ws/node_modules" "/out/$ws/"; fi; \
    done \
 && find /out/packages /out/services -path '*/dist/*' \( -name '*.map' -o -name '*.tsbuildinfo' \) -delete

# --- runtime: Node.js and the gathered files, nothing else.
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production
ENV PATH=/app/node_modules/.bin:$PATH
WORKDIR /app
COPY --from=build --chown=0:0 /out/ /app/
# The image's `node` user, by number so the kubelet can verify runAsNonRoot. It owns nothing in
# /app and nothing needs to be written: the root filesystem may be read-only.
USER 1000:1000
# Exposed for documentation: EPP ext_proc, health, metrics; collector metrics; simulator.
EXPOSE 9002 9003 9090 9091 8000
ENTRYPOINT []
CMD ["spillway-epp", "--help"]
