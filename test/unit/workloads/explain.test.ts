// berth explain for instances and deployments, from objects as the cluster would hold them.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Condition, ConditionStatus } from '../../../src/runtime/api/conditions.ts';
import {
  deploymentLines,
  explainQuota,
  instanceLines,
  type PodView,
} from '../../../src/workloads/explain.ts';
import { age } from '../../../src/policy/explain.ts';
import type { QuotaObject } from '../../../src/workloads/decide/quota.ts';
import type { CachedInstance } from '../../../src/workloads/decide/instances.ts';
import { isFormerPod } from '../../../src/workloads/decide/pods.ts';
import { INSTANCE_LABEL } from '../../../src/workloads/types.ts';
import { Instance } from '../../../src/workloads/crd.ts';

const NOW = new Date('2030-01-01T01:00:00Z');
const T0 = '2030-01-01T00:57:00Z';

const inst = (
  name: string,
  created: string,
  conditions: unknown[] = [],
  more: Partial<CachedInstance> = {},
) =>
  ({
    metadata: {
      name,
      namespace: 'ns',
      uid: `uid-${name}`,
      creationTimestamp: created,
      labels: { 'workloads.berth.dev/deployment': 'web' },
    },
    spec: {
      template: {
        containers: [{ name: 'main', image: 'app:1', resources: { requests: { cpu: '1', memory: '2Gi' } } }],
      },
      templateHash: 'h2',
      ordinal: Number(name.split('-')[1]),
    },
    status: { conditions },
    ...more,
  }) as CachedInstance;
const cond = (type: string, status: ConditionStatus, reason: string, message = '', at = T0): Condition => ({
  type,
  status,
  reason,
  message,
  lastTransitionTime: at,
});
const quota: QuotaObject = {
  metadata: { name: 'budget', namespace: 'ns', creationTimestamp: T0 },
  spec: { instances: 2 },
  status: {
    claims: ['web-0', 'web-1'].map((n) => ({
      cluster: 'local',
      name: n,
      uid: `uid-${n}`,
      milliCPU: 1000,
      memoryBytes: 2 ** 31,
      grantedAt: T0,
    })),
  },
};

test('ages read like kubectl', () => {
  assert.equal(age('2030-01-01T00:59:15Z', NOW), '45s');
  assert.equal(age(T0, NOW), '3m');
  assert.equal(age('2030-01-01T00:00:00Z', NOW), '60m');
  assert.equal(age('2029-12-25T00:00:00Z', NOW), '7d');
});

test('an instance waiting for quota: its place in line, what is used, what it needs, since when; its gated Pod', () => {
  const granted = cond('QuotaGranted', 'True', 'QuotaAvailable', 'counted by Quota budget');
  const instances = [
    inst('web-0', '2030-01-01T00:50:00Z', [granted]),
    inst('web-1', '2030-01-01T00:51:00Z', [granted]),
    inst('web-2', '2030-01-01T00:52:00Z', [
      cond('QuotaGranted', 'False', 'QuotaExceeded', 'needs 1 instance (1 vCPU, 2Gi); 2 of 2 instances used'),
    ]),
    inst('web-3', '2030-01-01T00:53:00Z', [
      cond('Ready', 'False', 'QuotaExceeded', 'waiting for quota'),
      cond('QuotaGranted', 'False', 'QuotaExceeded', 'needs 1 instance (1 vCPU, 2Gi); 2 of 2 instances used'),
    ]),
  ];
  const pod: PodView = {
    metadata: { name: 'web-3' },
    spec: { schedulingGates: [{ name: 'workloads.berth.dev/quota' }] },
    status: { phase: 'Pending' },
  };
  const lines = instanceLines(
    { instance: instances[3]!, pod, quotas: [quota], instances, instanceTypes: [] },
    NOW,
  );
  assert.deepEqual(lines, [
    '  WorkloadDeployment web, ordinal 3; template h2; created 2030-01-01T00:53:00Z (7m ago)',
    '  Ready: False (QuotaExceeded) since 2030-01-01T00:57:00Z (3m ago): waiting for quota',
    '  quota: waiting, 2nd in line for Quota budget (2 of 2 instances used); needs 1 instance (1 vCPU, 2Gi); waiting since 2030-01-01T00:53:00Z (7m ago)',
    '  pod web-3: Pending, gated by workloads.berth.dev/quota until the quota is granted',
  ]);
  // Granted, and no Quota at all.
  assert.match(
    instanceLines(
      { instance: instances[0]!, pod: undefined, quotas: [quota], instances, instanceTypes: [] },
      NOW,
    ).join('\n'),
    /quota: granted \(QuotaAvailable\) since .*: counted by Quota budget\n {2}pod: none yet/,
  );
  assert.match(
    instanceLines(
      { instance: inst('web-9', T0), pod: undefined, quotas: [], instances: [], instanceTypes: [] },
      NOW,
    ).join('\n'),
    /quota: no Quota in namespace ns: Berth grants it at once \(not evaluated yet: is Berth running\?\)/,
  );
  // Refused with no Quota here (a cell whose quota the management plane decides): its verdict, not a
  // grant computed from this namespace alone.
  assert.match(
    instanceLines(
      {
        instance: inst('web-9', T0, [
          cond('QuotaGranted', 'False', 'QuotaExceeded', '4 of 4 instances used'),
        ]),
        pod: undefined,
        quotas: [],
        instances: [],
        instanceTypes: [],
      },
      NOW,
    ).join('\n'),
    /quota: not granted \(QuotaExceeded\) since .*: 4 of 4 instances used; no Quota in namespace ns here: in a cell run with --quota-source=management the management plane's Quota decides/,
  );
});

test("an instance whose Pod cannot pull its image or keeps crashing: the containers' own words", () => {
  const pod: PodView = {
    metadata: { name: 'web-0' },
    spec: { nodeName: 'n1' },
    status: {
      phase: 'Running',
      conditions: [{ type: 'Ready', status: 'False', lastTransitionTime: T0 }],
      containerStatuses: [
        {
          name: 'main',
          restartCount: 4,
          state: { waiting: { reason: 'CrashLoopBackOff', message: 'back-off 40s' } },
          lastState: { terminated: { reason: 'Error', exitCode: 1 } },
        },
        {
          name: 'side',
          state: {
            waiting: {
              reason: 'ImagePullBackOff',
              message: 'Back-off pulling image "missing.kwok.invalid/x"',
            },
          },
        },
      ],
    },
  };
  const lines = instanceLines(
    {
      instance: inst('web-0', T0, [cond('QuotaGranted', 'True', 'NoQuota', 'no Quota in namespace ns')]),
      pod,
      quotas: [],
      instances: [],
      instanceTypes: [],
    },
    NOW,
  );
  assert.deepEqual(lines.slice(-5), [
    '  pod web-0: Running on node n1',
    '    Ready: False since 2030-01-01T00:57:00Z (3m ago)',
    '    container main: waiting (CrashLoopBackOff): back-off 40s, restarted 4 times',
    '      last ended: Error (exit code 1)',
    '    container side: waiting (ImagePullBackOff): Back-off pulling image "missing.kwok.invalid/x"',
  ]);
});

test('a deployment: counts, conditions since when, the instances on an older template, each instance', () => {
  const wd = {
    metadata: { name: 'web', namespace: 'ns', generation: 3 },
    spec: { replicas: 3 },
    status: {
      observedGeneration: 3,
      replicas: 3,
      readyReplicas: 2,
      availableReplicas: 2,
      updatedReplicas: 1,
      templateHash: 'h2',
      conditions: [cond('Progressing', 'True', 'NewTemplateRolling', 'replacing web-1')],
    },
  };
  const instances = [
    inst('web-2', T0, [cond('Ready', 'False', 'ImageUnavailable', 'ErrImagePull')]),
    inst('web-0', T0, [cond('Ready', 'True', 'Ready')], {
      spec: { template: { containers: [] }, templateHash: 'h1', ordinal: 0 },
    }),
    inst('web-1', T0, [], { spec: { template: { containers: [] }, templateHash: 'h1', ordinal: 1 } }),
  ];
  assert.deepEqual(deploymentLines(wd, instances, NOW), [
    '  3 desired, 3 exist, 2 ready, 2 available, 1 on template h2; OrderedReady',
    '  Progressing: True (NewTemplateRolling) since 2030-01-01T00:57:00Z (3m ago): replacing web-1',
    '  rollout: 2 instance(s) on an older template (web-0, web-1), recreated one at a time, highest ordinal first, each after the one before is Ready',
    '  instance web-0: Ready since 2030-01-01T00:57:00Z (3m ago) [older template h1]',
    '  instance web-1: not reconciled yet, created 2030-01-01T00:57:00Z (3m ago) [older template h1]',
    '  instance web-2: not Ready (ImageUnavailable) since 2030-01-01T00:57:00Z (3m ago): ErrImagePull',
  ]);
});

test('a deployment: the Pod of a deleted instance, while it goes, and never a Pod of a standing one', () => {
  const wd = { metadata: { name: 'web', namespace: 'ns' }, spec: { replicas: 1 }, status: {} };
  const standing = inst('web-0', T0, [cond('Ready', 'True', 'Ready')]);
  const pod = (name: string, uid: string, deletionTimestamp?: string) => ({
    metadata: {
      name,
      labels: { [INSTANCE_LABEL]: name },
      ...(deletionTimestamp ? { deletionTimestamp } : {}),
      ownerReferences: [
        { apiVersion: Instance.apiVersion, kind: Instance.kind, name, uid, controller: true },
      ],
    },
  });
  // As explain workloaddeployment picks them: the Pods whose Instance does not stand under their name.
  const former = [pod('web-0', 'uid-web-0'), pod('web-1', 'gone', T0)].filter((p) =>
    isFormerPod(p, (name) => (name === 'web-0' ? standing.metadata!.uid : undefined)),
  );
  const lines = deploymentLines(wd, [standing], NOW, former);
  assert.deepEqual(lines.slice(-2), [
    '  instance web-0: Ready since 2030-01-01T00:57:00Z (3m ago)',
    '  pod web-1 of a deleted instance: terminating since 2030-01-01T00:57:00Z (3m ago); the next step waits for it to go',
  ]);
});

test('berth explain quota: the instances it grants, those that wait in line and why, its usage; a younger Quota decides nothing', () => {
  const instances = ['web-0', 'web-1', 'web-2', 'web-3'].map((n, i) => inst(n, `2030-01-01T00:5${i}:00Z`));
  const said = explainQuota('budget', { quotas: [quota], instances, instanceTypes: [] }, NOW);
  assert.deepEqual(
    said.subjects!.map((s) => `${s.in ? 'in' : 'out'} ${s.name}: ${s.why.join('; ')}`),
    [
      'in ns/web-0: granted: 1 instance (1 vCPU, 2Gi)',
      'in ns/web-1: granted: 1 instance (1 vCPU, 2Gi)',
      'out ns/web-2: 1st in line: needs 1 instance (1 vCPU, 2Gi); 2 of 2 instances used',
      'out ns/web-3: 2nd in line: needs 1 instance (1 vCPU, 2Gi); 2 of 2 instances used',
    ],
  );
  assert.deepEqual(said.lines, ['  2 of 2 instances used, 2 waiting']);
  const younger = {
    ...quota,
    metadata: { ...quota.metadata, name: 'later', creationTimestamp: '2030-01-01T00:58:00Z' },
  };
  assert.deepEqual(explainQuota('later', { quotas: [quota, younger], instances, instanceTypes: [] }, NOW), {
    lines: ['  decides nothing: the older Quota budget decides this namespace'],
  });
});
