import { type WorkloadPod } from '../../../../src/workloads/decide/pods.ts';
import { type InstanceState, type StepInput } from '../../../../src/workloads/decide/step.ts';

export const inst = (ordinal: number, hash = 'new', more: Partial<InstanceState> = {}): InstanceState => ({
  name: `web-${ordinal}`,
  ordinal,
  hash,
  ready: true,
  available: true,
  programmed: true,
  deleting: false,
  notReadySince: 0,
  ...more,
});

export const input = (
  replicas: number,
  instances: InstanceState[],
  policy: StepInput['policy'] = 'OrderedReady',
) => ({
  replicas,
  policy,
  hash: 'new',
  instances,
});

export const pod = (
  status: WorkloadPod['status'],
  spec: WorkloadPod['spec'] = { nodeName: 'n1' },
): WorkloadPod => ({
  apiVersion: 'v1',
  kind: 'Pod',
  metadata: { name: 'web-0', namespace: 'ns' },
  spec,
  status,
});

export const waiting = (reason: string, restartCount = 0, message?: string) => ({
  name: 'app',
  restartCount,
  state: { waiting: { reason, ...(message ? { message } : {}) } },
});
