// What `berth run` builds for federation: its controllers (Capability.setup), loaded only when
// federation runs.
import type { CapabilityContext, Served } from '../capability.ts';
import { setupFederationReconciler } from './controllers/federation.ts';
import { setupMirrorReconciler } from './controllers/mirror.ts';

/** Capability.setup: the federation controller and the mirror controller. */
export function setup({ manager, options }: CapabilityContext): Served {
  setupFederationReconciler(manager, { workers: Number(options['federationWorkers'] ?? 16) });
  setupMirrorReconciler(manager, { workers: Number(options['mirrorWorkers'] ?? 16) });
  return {};
}
