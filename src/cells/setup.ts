// What `berth run` builds for cells: the cell provider and the probe controller (Capability.setup),
// loaded only when cells run.
import type { CapabilityContext, Served } from '../capability.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import { Trigger } from '../runtime/controller/trigger.ts';
import { setupCellReconciler } from './controllers/cells.ts';
import { CellProvider } from './provider.ts';
import { defaultTiming, type CellObject } from './types.ts';
import { Cell } from './crd.ts';

/** Capability.setup: the cells engaged by their kubeconfig Secrets, and probed. */
export function setup({ manager, options, berthNamespace }: CapabilityContext): Served {
  const log = manager.log.child({ capability: 'cells' });
  const cells = manager.informer<CellObject>(Cell.ref);
  const secrets = manager.informer<KubeObject & { data?: Record<string, string> }>(Resources.secrets, {
    namespace: berthNamespace,
  });
  // A cell the provider engaged, engaged again or gave up on is probed now.
  const probes = new Trigger();
  const provider = new CellProvider({
    cells,
    secrets,
    berthNamespace,
    onChange: (cell) => probes.send(cell),
    log,
  });
  setupCellReconciler(manager, {
    cells,
    provider,
    timing: {
      ...defaultTiming,
      probePeriodMs: Number(options['cellProbePeriod'] ?? defaultTiming.probePeriodMs / 1000) * 1000,
      unreachableAfterMs:
        Number(options['cellUnreachableAfter'] ?? defaultTiming.unreachableAfterMs / 1000) * 1000,
    },
    log,
    probes,
  });
  manager.addProvider(provider);
  return {};
}
