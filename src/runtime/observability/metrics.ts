// Prometheus metrics, named like controller-runtime's and client-go's so that existing dashboards
// and alerts work unchanged. One registry per process, served on /metrics.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

const exp = (start: number, factor: number, count: number) =>
  Array.from({ length: count }, (_, i) => start * factor ** i);

// Work queue (client-go's workqueue metrics provider, as registered by controller-runtime).
export const workqueueMetrics = {
  depth: new Gauge({
    name: 'workqueue_depth',
    help: 'Current depth of workqueue',
    labelNames: ['name', 'controller'],
    registers: [registry],
  }),
  adds: new Counter({
    name: 'workqueue_adds_total',
    help: 'Total number of adds handled by workqueue',
    labelNames: ['name', 'controller'],
    registers: [registry],
  }),
  latency: new Histogram({
    name: 'workqueue_queue_duration_seconds',
    help: 'How long in seconds an item stays in workqueue before being requested',
    labelNames: ['name', 'controller'],
    buckets: exp(1e-8, 10, 12),
    registers: [registry],
  }),
  workDuration: new Histogram({
    name: 'workqueue_work_duration_seconds',
    help: 'How long in seconds processing an item from workqueue takes',
    labelNames: ['name', 'controller'],
    buckets: exp(1e-8, 10, 12),
    registers: [registry],
  }),
  unfinished: new Gauge({
    name: 'workqueue_unfinished_work_seconds',
    help: 'How many seconds of work has been done that is in progress and has not been observed by work_duration',
    labelNames: ['name', 'controller'],
    registers: [registry],
  }),
  longestRunning: new Gauge({
    name: 'workqueue_longest_running_processor_seconds',
    help: 'How many seconds has the longest running processor for workqueue been running',
    labelNames: ['name', 'controller'],
    registers: [registry],
  }),
  retries: new Counter({
    name: 'workqueue_retries_total',
    help: 'Total number of retries handled by workqueue',
    labelNames: ['name', 'controller'],
    registers: [registry],
  }),
};

// Reconciles (controller-runtime's internal/controller/metrics).
export const reconcileMetrics = {
  total: new Counter({
    name: 'controller_runtime_reconcile_total',
    help: 'Total number of reconciliations per controller',
    labelNames: ['controller', 'result'],
    registers: [registry],
  }),
  errors: new Counter({
    name: 'controller_runtime_reconcile_errors_total',
    help: 'Total number of reconciliation errors per controller',
    labelNames: ['controller'],
    registers: [registry],
  }),
  time: new Histogram({
    name: 'controller_runtime_reconcile_time_seconds',
    help: 'Length of time per reconciliation per controller',
    labelNames: ['controller'],
    buckets: [
      0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.25,
      1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
    ],
    registers: [registry],
  }),
  maxConcurrent: new Gauge({
    name: 'controller_runtime_max_concurrent_reconciles',
    help: 'Maximum number of concurrent reconciles per controller',
    labelNames: ['controller'],
    registers: [registry],
  }),
  activeWorkers: new Gauge({
    name: 'controller_runtime_active_workers',
    help: 'Number of currently used workers per controller',
    labelNames: ['controller'],
    registers: [registry],
  }),
};

// Informers: client-go has no standard names here, so these are Berth's own.
export const informerMetrics = {
  restarts: new Counter({
    name: 'berth_informer_watch_restarts_total',
    help: 'Watches re-established after an error, a timeout or a server close',
    labelNames: ['cluster', 'resource'],
    registers: [registry],
  }),
  relists: new Counter({
    name: 'berth_informer_relists_total',
    help: 'Full lists, the first one included; more than one means a watch could not resume',
    labelNames: ['cluster', 'resource'],
    registers: [registry],
  }),
  objects: new Gauge({
    name: 'berth_informer_objects',
    help: 'Objects in the informer cache',
    labelNames: ['cluster', 'resource'],
    registers: [registry],
  }),
  crdMissing: new Gauge({
    name: 'berth_crd_missing',
    help: 'Whether the CRD of a resource Berth watches is missing (1): its objects are ignored until it is installed',
    labelNames: ['cluster', 'resource', 'crd', 'kind'],
    registers: [registry],
  }),
};

// Leader election (client-go's leader_election_master_status).
export const leaderMetrics = {
  status: new Gauge({
    name: 'leader_election_master_status',
    help: 'Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master',
    labelNames: ['name'],
    registers: [registry],
  }),
};

// Admission webhooks (controller-runtime's webhook metrics).
export const webhookMetrics = {
  requests: new Counter({
    name: 'controller_runtime_webhook_requests_total',
    help: 'Total number of admission requests by HTTP status code',
    labelNames: ['webhook', 'code'],
    registers: [registry],
  }),
  latency: new Histogram({
    name: 'controller_runtime_webhook_latency_seconds',
    help: 'Histogram of the latency of processing admission requests',
    labelNames: ['webhook'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  }),
  inFlight: new Gauge({
    name: 'controller_runtime_webhook_requests_in_flight',
    help: 'Current number of admission requests being served',
    labelNames: ['webhook'],
    registers: [registry],
  }),
};

// What Berth's HTTP(S) servers (webhook, metrics, health) refuse to protect themselves.
export const httpServerMetrics = {
  rejected: new Counter({
    name: 'berth_http_rejected_total',
    help:
      'Connections and requests a Berth server refused, by server and reason: connections (over the ' +
      'connection limit), in_flight (over the in-flight limit, answered 429), timeout (a slow TLS handshake, ' +
      'request headers or body)',
    labelNames: ['server', 'reason'],
    registers: [registry],
  }),
  connections: new Gauge({
    name: 'berth_http_connections',
    help: 'Open connections of a Berth server (compare with its connection limit), by server',
    labelNames: ['server'],
    registers: [registry],
  }),
};

// API requests (client-go's rest_client metrics).
export const restMetrics = {
  requests: new Counter({
    name: 'rest_client_requests_total',
    help: 'Number of HTTP requests, partitioned by status code, method, and host',
    labelNames: ['code', 'method', 'host'],
    registers: [registry],
  }),
};
