import type { Logger } from 'pino';
import type { EndpointSpec } from './endpoint.js';
import { endpointSliceSchema, endpointsFromSlices, type EndpointSlice, type SliceMapping } from './kube-slices.js';

export interface KubeSourceOptions extends SliceMapping {
  namespace: string;
  labelSelector: string | undefined;
  /** Kubeconfig file; unset = in-cluster, then $KUBECONFIG, then ~/.kube/config. */
  kubeconfig: string | undefined;
  /** Delay before restarting a watch that failed. */
  restartDelayMs?: number;
}

export interface KubeSource {
  stop(): Promise<void>;
}

/**
 * Follows EndpointSlices with the client's informer (list, then watch from the list's
 * resourceVersion, re-listing on 410 Gone) and reports the whole endpoint set after every change.
 * The informer stops on errors, so it is restarted after a pause; its cache keeps the last state
 * meanwhile, so a lost API server removes nothing.
 */
export async function startKubeSource(
  options: KubeSourceOptions,
  logger: Logger,
  onEndpoints: (endpoints: EndpointSpec[]) => void,
  onError: (error: Error) => void,
): Promise<KubeSource> {
  // Loaded only when used: the client is large and most collectors read a file.
  const k8s = await import('@kubernetes/client-node');
  const kc = new k8s.KubeConfig();
  if (options.kubeconfig !== undefined) kc.loadFromFile(options.kubeconfig);
  else kc.loadFromDefault();
  const api = kc.makeApiClient(k8s.DiscoveryV1Api);
  const path = `/apis/discovery.k8s.io/v1/namespaces/${encodeURIComponent(options.namespace)}/endpointslices`;
  const informer = k8s.makeInformer(
    kc,
    path,
    () => api.listNamespacedEndpointSlice({ namespace: options.namespace, labelSelector: options.labelSelector }),
    options.labelSelector,
  );

  const reported = new Set<string>();
  let scheduled = false;
  let stopped = false;
  // Several watch events often arrive together (a rollout touches many slices): report once.
  const report = (): void => {
    if (scheduled) return;
    scheduled = true;
    queueMicrotask(() => {
      scheduled = false;
      if (stopped) return;
      const slices: EndpointSlice[] = [];
      for (const raw of informer.list()) {
        const parsed = endpointSliceSchema.safeParse(raw);
        if (parsed.success) slices.push(parsed.data);
        else problem(raw.metadata?.name ?? '(unnamed)', parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; '));
      }
      const { endpoints, problems } = endpointsFromSlices(slices, options);
      for (const p of problems) problem(p.slice, p.message);
      onEndpoints(endpoints);
    });
  };
  const problem = (slice: string, message: string): void => {
    // Once per slice and message: the whole set is recomputed on every event.
    const key = `${slice}\n${message}`;
    if (reported.has(key)) return;
    reported.add(key);
    logger.warn({ slice, problem: message }, 'EndpointSlice skipped');
  };

  let restartTimer: NodeJS.Timeout | undefined;
  informer.on('add', report);
  informer.on('update', report);
  informer.on('delete', report);
  informer.on('error', (error: unknown) => {
    if (stopped) return;
    onError(error instanceof Error ? error : new Error(String(error)));
    restartTimer = setTimeout(() => {
      if (!stopped) informer.start().catch((e: unknown) => onError(e instanceof Error ? e : new Error(String(e))));
    }, options.restartDelayMs ?? 1_000);
  });
  await informer.start();
  // An empty first list fires no add events; report it anyway so the source counts as synced.
  report();
  return {
    async stop() {
      stopped = true;
      clearTimeout(restartTimer);
      await informer.stop();
    },
  };
}
