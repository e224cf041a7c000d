import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { constrainsArch, gateExemption, type ArchPod } from '../../../../src/arch/decide/pods.ts';
import { ARCH_LABEL, SKIP_ANNOTATION } from '../../../../src/arch/types.ts';
import { BERTH, ctx, pod } from './fixtures.ts';

describe('gateExemption', () => {
  const cases: [string, ArchPod, string, RegExp][] = [
    ['kube-system', pod(), 'kube-system', /cluster add-ons/],
    ['any kube-* namespace', pod(), 'kube-public', /cluster add-ons/],
    ["Berth's namespace", pod(), BERTH, /Berth's own/],
    ['a namespace serving a webhook', pod(), 'cert-manager', /admission webhook/],
    ['nodeName', pod({ nodeName: 'n1' }), 'apps', /nodeName/],
    ['mirror pod', pod({}, { annotations: { 'kubernetes.io/config.mirror': 'x' } }), 'apps', /mirror/],
    [
      'DaemonSet pod',
      pod(
        {},
        {
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'd', uid: 'u', controller: true },
          ],
        },
      ),
      'apps',
      /DaemonSet/,
    ],
    ['opted out', pod({}, { annotations: { [SKIP_ANNOTATION]: 'true' } }), 'apps', /arch.berth.dev\/skip/],
    ['nodeSelector on arch', pod({ nodeSelector: { [ARCH_LABEL]: 'arm64' } }), 'apps', /already constrains/],
    [
      'every required term on arch',
      pod({
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [
                { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
                {
                  matchExpressions: [
                    { key: 'zone', operator: 'Exists' },
                    { key: ARCH_LABEL, operator: 'NotIn', values: ['s390x'] },
                  ],
                },
              ],
            },
          },
        },
      }),
      'apps',
      /already constrains/,
    ],
  ];
  for (const [what, p, ns, reason] of cases)
    test(`never gates: ${what}`, () => assert.match(gateExemption(p, ns, ctx) ?? '', reason));

  test('gates the rest: a plain pod, an owner that is not a DaemonSet, skip=false, arch in only some terms', () => {
    assert.equal(gateExemption(pod(), 'apps', ctx), undefined);
    const rs = pod(
      {},
      {
        ownerReferences: [
          { apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'r', uid: 'u', controller: true },
        ],
      },
    );
    assert.equal(gateExemption(rs, 'apps', ctx), undefined);
    assert.equal(
      gateExemption(pod({}, { annotations: { [SKIP_ANNOTATION]: 'false' } }), 'apps', ctx),
      undefined,
    );
    const some = pod({
      affinity: {
        nodeAffinity: {
          requiredDuringSchedulingIgnoredDuringExecution: {
            nodeSelectorTerms: [
              { matchExpressions: [{ key: ARCH_LABEL, operator: 'In', values: ['amd64'] }] },
              { matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n'] }] },
            ],
          },
        },
      },
    });
    assert.equal(constrainsArch(some), false);
    assert.equal(gateExemption(some, 'apps', ctx), undefined);
    assert.equal(
      constrainsArch(
        pod({
          affinity: {
            nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: [] } },
          },
        }),
      ),
      false,
    );
  });
});
