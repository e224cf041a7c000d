// The registry client's metrics. Labels name hosts, never repositories or images, and only the hosts
// of a fixed set: any namespace user names registries at will in a pod's images (issue 47).
import { counter, histogram } from '../runtime/observability/metrics.ts';
import type { RegistriesConfig } from './hosts.ts';
import { apiHost, normaliseDomain } from './reference.ts';

/** The public registries and token servers most images come from, named whatever the configuration. */
const WELL_KNOWN = new Set([
  'registry-1.docker.io',
  'auth.docker.io',
  'quay.io',
  'ghcr.io',
  'gcr.io',
  'registry.k8s.io',
  'mcr.microsoft.com',
  'public.ecr.aws',
  'nvcr.io',
]);

/** The hosts the registries configuration names (registries, their servers and mirrors): named in metrics too. */
export function configuredHosts(hosts: RegistriesConfig | undefined): Set<string> {
  const out = new Set<string>();
  for (const [domain, reg] of Object.entries(hosts?.registries ?? {})) {
    out.add(apiHost(normaliseDomain(domain)));
    for (const url of [reg.server, ...reg.mirrors.map((m) => m.url)]) if (url) out.add(new URL(url).host);
  }
  return out;
}

/** A host as a metric's label: itself when well known or configured, `other` for any other. */
export const hostLabel = (host: string, configured: ReadonlySet<string>): string =>
  WELL_KNOWN.has(host) || configured.has(host) ? host : 'other';

export const registryMetrics = {
  requests: counter(
    'berth_registry_requests_total',
    'Requests to registries (manifests and blobs, token requests excluded), by registry host (well-known ' +
      'or configured ones; `other` for the rest), method and status code (`error` when no answer came)',
    ['registry', 'method', 'code'],
  ),
  tokenRequests: counter(
    'berth_registry_token_requests_total',
    'Bearer token requests to token servers, by realm host (well-known or configured ones; `other` for the ' +
      'rest) and status code (`error` when no answer came)',
    ['realm', 'code'],
  ),
  waits: counter(
    'berth_registry_waits_total',
    "Registry requests (budget requests) and bodies (budget bytes) that waited for Berth's bounds across " +
      "all registries, by what held them: their namespace's share (namespace) or every seat (all). " +
      'No label names the namespace: namespaces are as many as the cluster makes',
    ['budget', 'bound'],
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
