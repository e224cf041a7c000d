// The registry client's metrics. Labels name hosts, never repositories or images, so their number
// stays bounded by the registries a cluster uses.
import { counter, histogram } from '../runtime/observability/metrics.ts';

export const registryMetrics = {
  requests: counter(
    'berth_registry_requests_total',
    'Requests to registries (manifests and blobs, token requests excluded), by registry host, method and ' +
      'status code (`error` when no answer came)',
    ['registry', 'method', 'code'],
  ),
  tokenRequests: counter(
    'berth_registry_token_requests_total',
    'Bearer token requests to token servers, by realm host and status code (`error` when no answer came)',
    ['realm', 'code'],
  ),
  cache: counter(
    'berth_registry_cache_total',
    'Registry client cache lookups by cache (digest, tag, negative, token) and result (hit, miss)',
    ['cache', 'result'],
  ),
  inspection: histogram(
    'berth_image_inspection_seconds',
    'Time to inspect an image, by result (ok or the failure reason)',
    ['result'],
    [0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
  ),
};
