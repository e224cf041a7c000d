import { applyJsonPatch } from '../../../helpers/jsonpatch.ts';
import { type Placement } from '../../../../src/arch/decide/images.ts';
import { type ArchPod } from '../../../../src/arch/decide/pods.ts';
import { placePatch } from '../../../../src/arch/decide/patches.ts';
import type { ArchPlacementSpec } from '../../../../src/arch/types.ts';
import { archPlacementSpec } from '../../../../src/arch/crd.ts';
import { type Inspection, type Platform } from '../../../../src/registry/types.ts';

export const BERTH = 'berth-system';

export const ctx = { berthNamespace: BERTH, servesWebhook: (ns: string) => ns === 'cert-manager' };

export function pod(spec: Partial<ArchPod['spec']> = {}, meta: ArchPod['metadata'] = {}): ArchPod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: 'p', namespace: 'apps', resourceVersion: '7', labels: { app: 'web' }, ...meta },
    spec: { containers: [{ name: 'c', image: 'web:1' }], ...spec },
  };
}

export const spec = (s: Record<string, unknown> = {}): ArchPlacementSpec => archPlacementSpec.parse(s);

const platform = (p: string): Platform => {
  const [os, architecture, variant] = p.split('/') as [string, string, string | undefined];
  return variant ? { os, architecture, variant } : { os, architecture };
};

export const inspection = (image: string, platforms: string[]): Inspection => ({
  image,
  reference: `registry.test/${image}`,
  digest: `sha256:${image.length.toString(16).padStart(64, '0')}`,
  platforms: platforms.map(platform),
  registry: 'registry.test',
  cached: false,
});

export const apply = (p: ArchPod, ops: ReturnType<typeof placePatch>) => applyJsonPatch(p, ops) as ArchPod;

export const terms = (p: ArchPod) =>
  p.spec.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;

export const placed = (architectures: string[]): Placement => ({
  kind: 'Placed',
  architectures,
  inspections: [
    inspection(
      'web:1',
      architectures.map((a) => `linux/${a}`),
    ),
  ],
});
