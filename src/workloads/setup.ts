// What `berth run` builds for workloads (the deployment, status, quota and instance controllers) and
// for quota across cells (Capability.setup), loaded only when they run.
import type { CapabilityContext, Served } from '../capability.ts';
import { Trigger } from '../runtime/controller/trigger.ts';
import { DeploymentState, setupDeploymentReconciler } from './controllers/deployment.ts';
import { setupDeploymentStatusReconciler } from './controllers/deployment-status.ts';
import { setupInstanceReconciler } from './controllers/instance.ts';
import { QuotaReconciler, setupQuotaReconciler } from './controllers/quota.ts';
import { OWN_INSTANCES } from './types.ts';

/** Capability.setup of workloads: its controllers in this cluster. */
export function setup({ manager, options }: CapabilityContext): Served {
  // The deployment controller and its status controller read the same caches and steps; a create
  // that fails, or succeeds again, is sent on the status controller's trigger.
  const deployments = new DeploymentState(manager);
  const status = new Trigger();
  setupDeploymentReconciler(manager, deployments, {
    workers: Number(options['workloadWorkers'] ?? 8),
    status,
  });
  setupDeploymentStatusReconciler(manager, deployments, status);
  // A cell of a management plane that grants (its `quota` capability) runs no quota controller.
  const quota = options['quotaSource'] === 'management' ? undefined : new QuotaReconciler(manager);
  if (quota) setupQuotaReconciler(manager, quota, { workers: Number(options['quotaWorkers'] ?? 4) });
  setupInstanceReconciler(manager, {
    workers: Number(options['instanceWorkers'] ?? 16),
    templateOf: (inst) => deployments.templateOf(inst),
    ...(quota ? { quota } : {}),
  });
  return {};
}

/** Capability.setup of quota: a management plane's quota controller, granting every cell's instances. */
export function setupQuota({ manager, options }: CapabilityContext): Served {
  // Two quota controllers keeping one namespace's ledger would each grant its own view of it.
  if (
    (options['controllers'] as string[] | undefined)?.includes('workloads') &&
    options['quotaSource'] !== 'management'
  )
    throw new Error(
      'controllers quota and workloads both grant quota here: run the cells with --quota-source=management, ' +
        "or leave out quota (the workloads controller grants from this cluster's Quotas)",
    );
  const quota = new QuotaReconciler(manager, {
    // A deleted Cell's cluster never answers again: its claims are released rather than kept.
    clusterExists: (cluster) => manager.clusterKnown(cluster),
    // The cells' instances as federation's mirrors cache them (whole: a mirror copies the spec).
    instances: OWN_INSTANCES,
    // A cell's instances count only in the namespaces its Cell serves.
    serves: (cluster, namespace) => manager.clusterServes(cluster, namespace),
  });
  setupQuotaReconciler(manager, quota, { workers: Number(options['quotaWorkers'] ?? 4) });
  return {};
}
