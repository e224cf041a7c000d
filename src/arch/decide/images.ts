// Architecture-aware placement's pure decisions: a pod's images, the architectures every one of them
// supports, and the result text that says what Berth read. No I/O: the registry client reads.
import { parseReference, registryListed } from '../../registry/reference.ts';
import { InspectionError, type Inspection, type Platform } from '../../registry/types.ts';
import { podOs } from '../../policy/pods.ts';
import { type ArchPod } from './pods.ts';
import { type Policy } from './policies.ts';

/** One image of the pod, once however many containers name it. */
export interface PodImage {
  image: string;
  /** Some container pulls it with imagePullPolicy Always: the tag is revalidated. */
  revalidate: boolean;
}

/**
 * Distinct images Berth reads for one pod at most: each costs up to 17 registry requests (an index
 * and 16 children), and one pod of hundreds of images would hold every pod behind it (issue 47).
 */
export const MAX_POD_IMAGES = 32;

/** Why a pod's images are not read at all (a permanent Bounded failure), or undefined. */
export function tooManyImages(images: readonly PodImage[]): InspectionError | undefined {
  const n = new Set(images.map((i) => i.image)).size;
  if (n <= MAX_POD_IMAGES) return undefined;
  return new InspectionError(
    'Bounded',
    '',
    `the pod names ${n} images; Berth reads at most ${MAX_POD_IMAGES} for one pod`,
  );
}

/**
 * `namespace/name` of each pull secret a pod's images may be read with: its own, then the
 * cluster-wide one (`--arch-pull-secret`) when given. Also whose cached reads may answer for the
 * pod (registry/known.ts). `namespace`: a pod made from a template has none of its own at admission.
 */
export function pullSecretRefs(pod: ArchPod, namespace: string, clusterWide?: string): string[] {
  const refs = (pod.spec.imagePullSecrets ?? []).map((s) => `${namespace}/${s.name}`);
  if (clusterWide?.includes('/')) refs.push(clusterWide);
  return refs;
}

export function podImages(pod: ArchPod): PodImage[] {
  const out = new Map<string, PodImage>();
  for (const c of [...(pod.spec.initContainers ?? []), ...pod.spec.containers]) {
    const seen = out.get(c.image);
    const always = c.imagePullPolicy === 'Always';
    if (seen) seen.revalidate ||= always;
    else out.set(c.image, { image: c.image, revalidate: always });
  }
  return [...out.values()];
}

/**
 * The first of the pod's images whose registry its policy does not list, as the failure it is; none
 * when the policy lists no registries. An image that is no reference is left to its inspection,
 * which fails it without a request.
 */
export function unlistedRegistry(pod: ArchPod, policy: Policy): InspectionError | undefined {
  const listed = policy.spec.registries;
  if (!listed) return undefined;
  for (const { image } of podImages(pod)) {
    let domain: string;
    try {
      domain = parseReference(image).domain;
    } catch {
      continue;
    }
    if (!registryListed(listed, domain))
      return new InspectionError(
        'RegistryNotAllowed',
        image,
        `${domain} is not among the registries ArchPlacement ${policy.name} lists (spec.registries); no request was sent`,
      );
  }
  return undefined;
}

const platformText = (p: Platform) => `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}`;

/**
 * The architectures every image supports for the pod's OS (podOs), sorted. The node label has no
 * variant, so variants narrow nothing here; they stay in the result.
 */
export function intersection(pod: ArchPod, inspections: Inspection[]): string[] {
  const os = podOs(pod);
  let common: Set<string> | undefined;
  for (const i of inspections) {
    const archs = new Set(i.platforms.filter((p) => p.os === os).map((p) => p.architecture));
    common = common ? new Set([...common].filter((a) => archs.has(a))) : archs;
  }
  return [...(common ?? [])].sort();
}

/** What the controller decided for a gated pod. */
export type Placement =
  | { kind: 'Placed'; architectures: string[]; inspections: Inspection[] }
  | { kind: 'Failed'; reason: string; message: string; fallback?: string }
  | { kind: 'Released'; message: string };

/** The result annotation: what Berth read, so that `kubectl get pod -o yaml` explains the affinity. */
export function resultText(architectures: string[], inspections: Inspection[], atAdmission = false): string {
  return JSON.stringify({
    architectures,
    ...(atAdmission ? { placedAt: 'admission' } : {}),
    images: inspections.map((i) => ({
      image: i.image,
      digest: i.digest,
      platforms: i.platforms.map(platformText),
    })),
  });
}

/** Each image's architectures for the pod's OS, for messages: `a:1 (amd64), b:2 (none for linux)`. */
export const imagesText = (inspections: Inspection[], os: string): string =>
  inspections
    .map((i) => {
      const archs = new Set(i.platforms.filter((p) => p.os === os).map((p) => p.architecture));
      return `${i.image} (${[...archs].sort().join(', ') || `none for ${os}`})`;
    })
    .join(', ');
