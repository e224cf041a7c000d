import { counter } from '../runtime/observability/metrics.ts';

// Federation's writes: WorkloadDeployments placed in cells, and the mirrors of cells' instances kept
// on the management plane. Labels name clusters (the cells an administrator joined), never objects.
export const federationMetrics = {
  deploymentWrites: counter(
    'berth_federation_deployment_writes_total',
    'WorkloadDeployments Berth applied in (apply) or deleted from (delete) a cell, by cluster',
    ['cluster', 'write'],
  ),
  mirrorWrites: counter(
    'berth_federation_mirror_writes_total',
    'Writes of the mirrors of cells’ instances on the management plane, by write (apply, status, delete)',
    ['write'],
  ),
};
