// Prometheus metrics, named like controller-runtime's and client-go's so that existing dashboards
// and alerts work unchanged. One registry per thread; /metrics serves the main thread's with what
// other threads (the webhook thread) add to it.
import { createRequire } from 'node:module';
import { isMainThread } from 'node:worker_threads';
import type * as Prom from 'prom-client';
// prom-client's parts, each from its own file: its index also loads the Pushgateway, cluster
// support and, for exemplars of process CPU, @opentelemetry/api, which Berth never uses and which
// cost some 6 MB resident in each thread (decision 0050). Imported, not required, so that the CLI's
// bundle carries them (prom-client-parts.d.ts types them). The version is pinned by the lockfile;
// test/unit/runtime/metrics.test.ts holds the default metrics to prom-client's own list.
import Counter from 'prom-client/lib/counter.js';
import Gauge from 'prom-client/lib/gauge.js';
import Histogram from 'prom-client/lib/histogram.js';
import Registry from 'prom-client/lib/registry.js';
import eventLoopLag from 'prom-client/lib/metrics/eventLoopLag.js';
import gc from 'prom-client/lib/metrics/gc.js';
import heapSizeAndUsed from 'prom-client/lib/metrics/heapSizeAndUsed.js';
import heapSpacesSizeAndUsed from 'prom-client/lib/metrics/heapSpacesSizeAndUsed.js';
import osMemoryHeap from 'prom-client/lib/metrics/osMemoryHeap.js';
import processHandles from 'prom-client/lib/metrics/processHandles.js';
import processMaxFileDescriptors from 'prom-client/lib/metrics/processMaxFileDescriptors.js';
import processOpenFileDescriptors from 'prom-client/lib/metrics/processOpenFileDescriptors.js';
import processRequests from 'prom-client/lib/metrics/processRequests.js';
import processResources from 'prom-client/lib/metrics/processResources.js';
import processStartTime from 'prom-client/lib/metrics/processStartTime.js';
import version from 'prom-client/lib/metrics/version.js';

export const registry = new Registry();
// The process's own figures (CPU, memory, event loop) once, from the main thread.
if (isMainThread) collectProcessMetrics(registry);

/** prom-client's default metrics, but process CPU counted here, without its exemplar support. */
function collectProcessMetrics(register: Registry): void {
  const defaults = [processStartTime, osMemoryHeap, processOpenFileDescriptors]
    .concat([processMaxFileDescriptors, eventLoopLag, processResources, processHandles])
    .concat([processRequests, heapSizeAndUsed, heapSpacesSizeAndUsed, version, gc]);
  const config = { register, eventLoopMonitoringPrecision: 10 };
  for (const collect of defaults) collect(register, config);
  let last = process.cpuUsage();
  const cpu = (name: string, help: string, collect?: () => void) =>
    new Counter({ name, help, registers: [register], ...(collect ? { collect } : {}) });
  // One collect sets all three, as prom-client's does.
  const user = cpu('process_cpu_user_seconds_total', 'Total user CPU time spent in seconds.', () => {
    const now = process.cpuUsage();
    const [u, s] = [now.user - last.user, now.system - last.system];
    last = now;
    user.inc(u / 1e6);
    system.inc(s / 1e6);
    total.inc((u + s) / 1e6);
  });
  const system = cpu('process_cpu_system_seconds_total', 'Total system CPU time spent in seconds.');
  const total = cpu('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds.');
}

type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;
const sources = new Set<() => Promise<unknown[]>>();

/** Adds another thread's registry (as getMetricsAsJSON gives it) to /metrics; the remover. */
export function addMetricsSource(read: () => Promise<unknown[]>): () => void {
  sources.add(read);
  return () => sources.delete(read);
}

/** What /metrics serves: this registry, and every source's summed into it (each metric's aggregator, sum by default). */
export async function metricsText(): Promise<string> {
  if (sources.size === 0) return registry.metrics();
  const all = await Promise.all([registry.getMetricsAsJSON(), ...[...sources].map((read) => read())]);
  // Only while another thread serves (the cluster module comes with it).
  const aggregator = createRequire(import.meta.url)(
    'prom-client/lib/cluster',
  ) as typeof Prom.AggregatorRegistry;
  return aggregator.aggregate(all as MetricsJson[]).metrics();
}

// Every metric is on the one registry; these say so once.
export const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
  new Counter<L>({ name, help, labelNames, registers: [registry] });
/** A gauge; with `collect`, one whose values are read when /metrics is (from a cache, say). */
export const gauge = <L extends string>(
  name: string,
  help: string,
  labelNames: L[],
  collect?: (g: Gauge<L>) => void,
) =>
  new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    ...(collect
      ? {
          collect: function (this: Gauge<L>) {
            collect(this);
          },
        }
      : {}),
  });
export const histogram = <L extends string>(name: string, help: string, labelNames: L[], buckets: number[]) =>
  new Histogram<L>({ name, help, labelNames, buckets, registers: [registry] });

const exp = (start: number, factor: number, count: number) =>
  Array.from({ length: count }, (_, i) => start * factor ** i);

// Work queue (client-go's workqueue metrics provider, as registered by controller-runtime).
export const workqueueMetrics = {
  depth: gauge('workqueue_depth', 'Current depth of workqueue', ['name', 'controller']),
  adds: counter('workqueue_adds_total', 'Total number of adds handled by workqueue', ['name', 'controller']),
  latency: histogram(
    'workqueue_queue_duration_seconds',
    'How long in seconds an item stays in workqueue before being requested',
    ['name', 'controller'],
    exp(1e-8, 10, 12),
  ),
  workDuration: histogram(
    'workqueue_work_duration_seconds',
    'How long in seconds processing an item from workqueue takes',
    ['name', 'controller'],
    exp(1e-8, 10, 12),
  ),
  unfinished: gauge(
    'workqueue_unfinished_work_seconds',
    'How many seconds of work has been done that is in progress and has not been observed by work_duration',
    ['name', 'controller'],
  ),
  longestRunning: gauge(
    'workqueue_longest_running_processor_seconds',
    'How many seconds has the longest running processor for workqueue been running',
    ['name', 'controller'],
  ),
  retries: counter('workqueue_retries_total', 'Total number of retries handled by workqueue', [
    'name',
    'controller',
  ]),
};

// Reconciles (controller-runtime's internal/controller/metrics).
export const reconcileMetrics = {
  total: counter('controller_runtime_reconcile_total', 'Total number of reconciliations per controller', [
    'controller',
    'result',
  ]),
  errors: counter(
    'controller_runtime_reconcile_errors_total',
    'Total number of reconciliation errors per controller',
    ['controller'],
  ),
  time: histogram(
    'controller_runtime_reconcile_time_seconds',
    'Length of time per reconciliation per controller',
    ['controller'],
    [
      0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25,
      1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
    ],
  ),
  maxConcurrent: gauge(
    'controller_runtime_max_concurrent_reconciles',
    'Maximum number of concurrent reconciles per controller',
    ['controller'],
  ),
  activeWorkers: gauge(
    'controller_runtime_active_workers',
    'Number of currently used workers per controller',
    ['controller'],
  ),
};

// What runs: the value is 1, the labels say (as every Prometheus exporter's *_build_info does).
export const buildInfo = gauge(
  'berth_build_info',
  'Berth’s version, the Node.js version it runs on and its commit (BERTH_COMMIT; unknown if not set); the value is 1',
  ['version', 'node_version', 'commit'],
);

// Informers: client-go has no standard names here, so these are Berth's own.
export const informerMetrics = {
  restarts: counter(
    'berth_informer_watch_restarts_total',
    'Watches re-established after an error, a timeout or a server close',
    ['cluster', 'resource'],
  ),
  relists: counter(
    'berth_informer_relists_total',
    'Full lists, the first one included; more than one means a watch could not resume',
    ['cluster', 'resource'],
  ),
  objects: gauge('berth_informer_objects', 'Objects in the informer cache', ['cluster', 'resource']),
  crdMissing: gauge(
    'berth_crd_missing',
    'Whether the CRD of a resource Berth watches is missing (1): its objects are ignored until it is installed',
    ['cluster', 'resource', 'crd', 'kind'],
  ),
};

// Leader election (client-go's leader_election_master_status).
export const leaderMetrics = {
  status: gauge(
    'leader_election_master_status',
    'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master',
    ['name'],
  ),
};

// Admission webhooks (controller-runtime's webhook metrics).
export const webhookMetrics = {
  requests: counter(
    'controller_runtime_webhook_requests_total',
    'Total number of admission requests by HTTP status code',
    ['webhook', 'code'],
  ),
  latency: histogram(
    'controller_runtime_webhook_latency_seconds',
    'Histogram of the latency of processing admission requests',
    ['webhook'],
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  ),
  inFlight: gauge(
    'controller_runtime_webhook_requests_in_flight',
    'Current number of admission requests being served',
    ['webhook'],
  ),
};

// What Berth's HTTP(S) servers (webhook, metrics, health) refuse to protect themselves.
export const httpServerMetrics = {
  rejected: counter(
    'berth_http_rejected_total',
    'Connections and requests a Berth server refused, by server and reason: connections (over the ' +
      'connection limit), connections_per_address (over the limit of one source address), ' +
      'client_certificate (the webhook server: no client certificate its --webhook-client-ca trusts), ' +
      'in_flight (over the in-flight limit, answered 429), in_flight_bytes, timeout (a slow TLS ' +
      'handshake, request headers or body)',
    ['server', 'reason'],
  ),
  certificateExpiry: gauge(
    'berth_certificate_expiration_timestamp_seconds',
    'When the certificate a Berth TLS server serves expires (seconds since the epoch), by server (webhook)',
    ['server'],
  ),
  connections: gauge(
    'berth_http_connections',
    'Open connections of a Berth server (compare with its connection limit), by server',
    ['server'],
  ),
};

// Events the recorder did not write: how much of what happened `kubectl get events` does not show.
export const eventMetrics = {
  dropped: counter(
    'berth_events_dropped_total',
    'Events not written, by reporting controller and reason: spam (the per-object spam filter), ' +
      'queue_full (the oldest waiting Event made room for a new one), failed (the write was given up on)',
    ['controller', 'reason'],
  ),
};

// API requests (client-go's rest_client metrics).
export const restMetrics = {
  requests: counter(
    'rest_client_requests_total',
    'Number of HTTP requests, partitioned by status code, method, and host',
    ['code', 'method', 'host'],
  ),
  // Berth's own: its writes by resource, so that a benchmark counts writes per object of each kind.
  writes: counter(
    'berth_api_writes_total',
    'API writes (every method but GET) answered, by method, resource (with its subresource) and host',
    ['method', 'resource', 'host'],
  ),
  // The apiserver's Warning headers (deprecated APIs, fields it dropped or did not know): the first
  // of each text is logged, every one counted, so an upgrade's new deprecations show on a dashboard.
  warnings: counter(
    'berth_api_warnings_total',
    'Warnings the apiserver returned in Warning response headers (each text logged once), by host',
    ['host'],
  ),
  // From the request sent to its answer read whole: what a controller's pass waits on a write.
  latency: histogram(
    'rest_client_request_duration_seconds',
    'Request latency in seconds, broken down by verb and host',
    ['verb', 'host'],
    [0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60],
  ),
};
