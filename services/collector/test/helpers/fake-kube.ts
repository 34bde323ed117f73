import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: unknown;
}

/**
 * Replays the Kubernetes API's EndpointSlice list and watch shapes: `GET .../endpointslices`
 * answers an EndpointSliceList with `metadata.resourceVersion`; `?watch=true` holds a chunked
 * response open and writes one JSON watch event per line as the test sends them.
 */
export interface FakeKube {
  readonly url: string;
  readonly kubeconfig: string;
  /** Every request's path and query, in order. */
  readonly requests: URL[];
  items: unknown[];
  resourceVersion: string;
  /** Answer this many of the next list requests with 500, as an overloaded API server does. */
  failLists: number;
  send(event: WatchEvent): void;
  sendRaw(line: string): void;
  /** Ends the open watch responses, as the API server does when a watch times out. */
  closeWatches(): void;
  watchers(): number;
  close(): Promise<void>;
}

export async function startFakeKube(namespace: string): Promise<FakeKube> {
  const watches = new Set<ServerResponse>();
  const requests: URL[] = [];
  const state = { items: [] as unknown[], resourceVersion: '100', failLists: 0 };
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://kube');
    requests.push(url);
    if (url.pathname !== `/apis/discovery.k8s.io/v1/namespaces/${namespace}/endpointslices`) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 }));
      return;
    }
    if (url.searchParams.get('watch') === 'true') {
      res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
      res.flushHeaders();
      watches.add(res);
      res.on('close', () => watches.delete(res));
      return;
    }
    if (state.failLists > 0) {
      state.failLists--;
      res.writeHead(500, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'InternalError', code: 500 }));
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        kind: 'EndpointSliceList',
        apiVersion: 'discovery.k8s.io/v1',
        metadata: { resourceVersion: state.resourceVersion },
        items: state.items,
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const kubeconfig = join(mkdtempSync(join(tmpdir(), 'spillway-kube-')), 'kubeconfig.yaml');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      // The client refuses plain http unless TLS verification is off.
      `- name: fake\n  cluster:\n    server: ${url}\n    insecure-skip-tls-verify: true`,
      'users:',
      '- name: tester\n  user:\n    token: test-token',
      'contexts:',
      `- name: fake\n  context:\n    cluster: fake\n    user: tester\n    namespace: ${namespace}`,
      'current-context: fake',
      '',
    ].join('\n'),
  );
  return Object.assign(state, {
    url,
    kubeconfig,
    requests,
    send(event: WatchEvent) {
      for (const res of watches) res.write(`${JSON.stringify(event)}\n`);
    },
    sendRaw(line: string) {
      for (const res of watches) res.write(`${line}\n`);
    },
    closeWatches() {
      for (const res of watches) res.end();
    },
    watchers: () => watches.size,
    async close() {
      for (const res of watches) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

interface SliceEndpoint {
  ip: string;
  pod?: string;
  zone?: string;
  ready?: boolean;
  serving?: boolean;
  terminating?: boolean;
}

/** An EndpointSlice as the API serves it (`discovery.k8s.io/v1`). */
export function endpointSlice(
  name: string,
  resourceVersion: string,
  endpoints: SliceEndpoint[],
  ports = [{ name: 'http', port: 8000, protocol: 'TCP' }],
  addressType = 'IPv4',
): unknown {
  return {
    kind: 'EndpointSlice',
    apiVersion: 'discovery.k8s.io/v1',
    metadata: {
      name,
      namespace: 'llm',
      uid: `uid-${name}`,
      resourceVersion,
      generation: 1,
      creationTimestamp: '2025-11-29T10:00:00Z',
      labels: { 'kubernetes.io/service-name': 'llama', 'endpointslice.kubernetes.io/managed-by': 'endpointslice-controller.k8s.io' },
      ownerReferences: [{ apiVersion: 'v1', kind: 'Service', name: 'llama', uid: 'svc-uid', controller: true, blockOwnerDeletion: true }],
    },
    addressType,
    endpoints: endpoints.map((e) => ({
      addresses: [e.ip],
      conditions: { ready: e.ready ?? true, serving: e.serving ?? e.ready ?? true, terminating: e.terminating ?? false },
      ...(e.pod ? { targetRef: { kind: 'Pod', namespace: 'llm', name: e.pod, uid: `uid-${e.pod}` } } : {}),
      nodeName: 'node-1',
      ...(e.zone ? { zone: e.zone } : {}),
    })),
    ports,
  };
}
