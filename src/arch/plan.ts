// `berth plan` of ArchPlacements: for the running workloads whose new pods the change gives to
// another policy (or to none), what those pods would get, decided as the webhook and the
// controller decide (exemption, choosePolicy, unlistedRegistry, tooManyImages, intersection, the
// policy's onFailure) from the platforms of their images. The platforms come first from Berth's
// own records on pods of the same namespace (its result annotation), then from the registry,
// through the registry client Berth runs (its allow-list of private addresses, CAs, bounds), and
// never from a registry the policy does not list. An image read neither way is unknown, with why.
import { isDeepStrictEqual } from 'node:util';
import { emptyPart, type PlanContext, type PlanPart } from '../policy/plan.ts';
import { formatTaint } from '../policy/nodes/write.ts';
import { RegistryClient } from '../registry/index.ts';
import { InspectionError, type ImageInspector, type Inspection, type Platform } from '../registry/types.ts';
import { Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import { rootLogger } from '../runtime/observability/log.ts';
import { registryOptions } from './cli.ts';
import { clusterCidrs } from './cluster-ranges.ts';
import { choosePolicy, type Policy } from './decide/policies.ts';
import { parsePolicies } from './decide/parse.ts';
import {
  gateExemption,
  webhookServiceNamespaces,
  type ArchPod,
  type ExemptionContext,
} from './decide/pods.ts';
import { gated, nodeArchTaint, nodesTainted, podRecords } from './decide/patches.ts';
import { intersection, podImages, tooManyImages, unlistedRegistry } from './decide/images.ts';
import { nodeArchitectures } from './decide/status.ts';
import { refusedByRegistry } from './decide/retries.ts';
import { ArchPlacement } from './crd.ts';

const apps = (resource: string, kind: string): ResourceRef => ({
  group: 'apps',
  version: 'v1',
  resource,
  kind,
  namespaced: true,
});
const batch = (resource: string, kind: string): ResourceRef => ({
  group: 'batch',
  version: 'v1',
  resource,
  kind,
  namespaced: true,
});
/** The owners of pods whose new pods a policy places; DaemonSets' are never gated. */
const OWNERS: { ref: ResourceRef; template: (o: Templated) => Template | undefined }[] = [
  { ref: Resources.deployments, template: (o) => o.spec?.template },
  { ref: apps('statefulsets', 'StatefulSet'), template: (o) => o.spec?.template },
  // A ReplicaSet or a Job another object controls is that object's: planned as it.
  { ref: Resources.replicaSets, template: (o) => (controlled(o) ? undefined : o.spec?.template) },
  {
    ref: batch('jobs', 'Job'),
    template: (o) => (controlled(o) || finished(o) ? undefined : o.spec?.template),
  },
  { ref: batch('cronjobs', 'CronJob'), template: (o) => o.spec?.jobTemplate?.spec?.template },
];

/** Distinct images a plan reads from registries at most: more are unknown, not read. */
export const MAX_PLAN_READS = 64;

interface Template {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: ArchPod['spec'];
}
type Templated = KubeObject & {
  spec?: { template?: Template; jobTemplate?: { spec?: { template?: Template } } };
  status?: { conditions?: { type: string; status: string }[] };
};
const controlled = (o: KubeObject) => (o.metadata?.ownerReferences ?? []).some((r) => r.controller);
const finished = (o: Templated) =>
  (o.status?.conditions ?? []).some(
    (c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True',
  );

/** A running workload, and a new pod of it as its template makes it. */
export interface Workload {
  /** `Deployment NAMESPACE/NAME`. */
  id: string;
  pod: ArchPod;
}

/** The workloads of the listed owners, each with the pod its template makes. */
export function workloadsOf(listed: { kind: string; items: Templated[] }[]): Workload[] {
  const out: Workload[] = [];
  for (const { kind, items } of listed) {
    const owner = OWNERS.find((o) => o.ref.kind === kind)!;
    for (const o of items) {
      const t = owner.template(o);
      if (!t?.spec?.containers) continue;
      const namespace = o.metadata!.namespace!;
      out.push({
        id: `${kind} ${namespace}/${o.metadata!.name}`,
        pod: {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: {
            namespace,
            labels: t.metadata?.labels ?? {},
            annotations: t.metadata?.annotations ?? {},
          },
          spec: t.spec,
        },
      });
    }
  }
  return out;
}

/** An image's platforms as known to the plan, or why they are not. */
export type Read = Inspection | InspectionError;

/** What reading a workload's images gave: every inspection, or the first failure. */
export type Reads = (image: string, namespace: string) => Read | undefined;

/** The world a plan of ArchPlacements decides in, as listed. */
export interface ArchWorld {
  /** The ArchPlacements as they are. */
  current: KubeObject[];
  workloads: Workload[];
  /** Every pod: Berth's records on them, the gated ones a deletion releases. */
  pods: ArchPod[];
  nodes: KubeObject[];
  namespaces: Map<string, Record<string, string>>;
  exempt: ExemptionContext;
}

/** The policies before and after the change, and those of the change that would be refused. */
function policiesAround(w: ArchWorld, change: KubeObject[], deleting: boolean) {
  const named = new Set(change.map((o) => o.metadata!.name!));
  const kept = w.current.filter((o) => !named.has(o.metadata!.name!));
  const after = parsePolicies(deleting ? kept : [...kept, ...change]);
  return { named, before: parsePolicies(w.current).policies, after };
}

/**
 * What a new pod of the workload would get from `policy`, as the controller ends it: placed on
 * the architectures every image supports, or what onFailure does; undefined with the reason when
 * an image is not known.
 */
export function outcome(
  pod: ArchPod,
  policy: Policy,
  reads: Reads,
): { architectures?: string[]; text: string } | { unknown: string } {
  const ns = pod.metadata!.namespace!;
  const images = podImages(pod);
  const failure =
    unlistedRegistry(pod, policy) ??
    tooManyImages(images) ??
    images.map((i) => reads(i.image, ns)).find((r) => r instanceof InspectionError);
  const got = images.map((i) => reads(i.image, ns));
  if (!failure && got.some((r) => r === undefined))
    return {
      unknown: `${images.find((_, i) => !got[i])!.image} not read (more than ${MAX_PLAN_READS} images)`,
    };
  if (failure) {
    // Berth reads with the pod's pull secrets and transient failures are retried: the plan cannot know.
    if (failure.transient || refusedByRegistry(failure))
      return { unknown: `${failure.image}: ${failure.reason}: ${failure.message}` };
    const f = policy.spec.onFailure;
    const what = `${failure.reason}: ${failure.message}`;
    return f.action === 'Fallback'
      ? {
          architectures: [f.fallbackArchitecture!],
          text: `placed on the fallback ${f.fallbackArchitecture} (${what})`,
        }
      : { text: `gated, then released unplaced (${what})` };
  }
  const architectures = intersection(pod, got as Inspection[]);
  const how = policy.spec.mode === 'Taints' ? 'tolerations of their arch taints' : 'node affinity';
  return {
    architectures,
    text: architectures.length
      ? `placed on ${architectures.join(', ')} (${how})`
      : 'placed on no architecture: its images share none, it cannot be scheduled',
  };
}

/** The plan of a change of ArchPlacements, from what was listed and the images' platforms. */
export function planArch(w: ArchWorld, change: KubeObject[], deleting: boolean, reads: Reads): PlanPart {
  const part = emptyPart();
  const { named, before, after } = policiesAround(w, change, deleting);
  for (const [name, error] of after.errors)
    if (named.has(name))
      part.errors.push(`ArchPlacement ${name} would be Invalid and apply nothing: ${error}`);
  const archs = nodeArchitectures(w.nodes as Parameters<typeof nodeArchitectures>[0]);
  let selectable = 0;
  let selected = 0;
  for (const { id, pod } of w.workloads) {
    const ns = pod.metadata!.namespace!;
    if (gateExemption(pod, ns, w.exempt)) continue;
    selectable++;
    const was = choosePolicy(before, pod, ns, w.namespaces.get(ns), w.exempt.berthNamespace);
    const will = choosePolicy(after.policies, pod, ns, w.namespaces.get(ns), w.exempt.berthNamespace);
    if (will && named.has(will.name)) selected++;
    if (was?.name === will?.name && isDeepStrictEqual(was?.spec, will?.spec)) continue;
    const [kind, name] = id.split(' ') as [string, string];
    if (!will) {
      part.effects.push({
        kind,
        name,
        op: '-',
        what: 'new pods: no longer gated or placed',
        by: `ArchPlacement ${was!.name}`,
      });
      continue;
    }
    const o = outcome(pod, will, reads);
    if ('unknown' in o) {
      part.unknown.push(
        `${id}: new pods selected by ArchPlacement ${will.name}, their images unknown: ${o.unknown}`,
      );
      continue;
    }
    part.effects.push({
      kind,
      name,
      op: was ? '~' : '+',
      what: `new pods: ${o.text}`,
      by: `ArchPlacement ${will.name}`,
    });
    if (o.architectures?.length && !o.architectures.some((a) => archs.has(a)))
      part.warnings.push(
        `${id}: no node has an architecture its images support (${o.architectures.join(', ')}): its new pods would stay Pending`,
      );
  }
  for (const n of named)
    if (selectable > 0 && selected === selectable && after.policies.some((p) => p.name === n))
      part.warnings.push(
        `ArchPlacement ${n} would gate the new pods of every workload it may (${selectable}) until their images are read`,
      );
  part.effects.push(...releases(w.pods, named, deleting), ...taints(w.nodes, before, after.policies));
  return part;
}

/** Deleting a policy releases the pods it holds gated, unplaced. */
function releases(pods: ArchPod[], named: Set<string>, deleting: boolean): PlanPart['effects'] {
  if (!deleting) return [];
  return pods
    .filter((p) => gated(p) && named.has(podRecords(p).policy ?? ''))
    .map((p) => ({
      kind: 'Pod',
      name: `${p.metadata!.namespace}/${p.metadata!.name}`,
      op: '-' as const,
      what: 'gate removed: released unplaced',
      by: `ArchPlacement ${podRecords(p).policy}`,
    }));
}

/** Taints mode: every node gains its architecture's taint while a Taints policy lives, and loses it after. */
function taints(nodes: KubeObject[], before: Policy[], after: Policy[]): PlanPart['effects'] {
  const [was, will] = [nodesTainted(before), nodesTainted(after)];
  if (was === will) return [];
  const by = (will ? after : before).find((p) => p.spec.mode === 'Taints' && !p.deleting)!.name;
  return nodes.flatMap((n) =>
    nodeArchTaint(n).map((t) => ({
      kind: 'Node',
      name: n.metadata!.name!,
      op: will ? ('+' as const) : ('-' as const),
      what: `taint ${formatTaint(t)}`,
      by: `ArchPlacement ${by}`,
    })),
  );
}

const platformOf = (text: string): Platform => {
  const [os = '', architecture = '', variant] = text.split('/');
  return { os, architecture, ...(variant ? { variant } : {}) };
};

/**
 * The platforms Berth recorded on pods it placed (their result annotation), by namespace and
 * image. A record answers only for its own namespace: whoever may edit a pod may write it.
 */
export function recordedImages(pods: ArchPod[]): Map<string, Inspection> {
  const out = new Map<string, Inspection>();
  for (const p of pods) {
    const { result } = podRecords(p);
    if (!result) continue;
    try {
      const r = JSON.parse(result) as {
        images?: { image?: unknown; digest?: unknown; platforms?: unknown }[];
      };
      for (const i of Array.isArray(r.images) ? r.images : [])
        if (typeof i.image === 'string' && Array.isArray(i.platforms))
          out.set(`${p.metadata?.namespace}/${i.image}`, {
            image: i.image,
            reference: i.image,
            digest: String(i.digest ?? ''),
            platforms: i.platforms.filter((x): x is string => typeof x === 'string').map(platformOf),
            registry: 'recorded on a pod',
            cached: true,
          });
    } catch {
      // A record someone rewrote answers nothing.
    }
  }
  return out;
}

/** The images the plan needs and the records do not hold, read (at most MAX_PLAN_READS) from registries. */
async function readImages(
  inspector: ImageInspector | undefined,
  images: string[],
): Promise<Map<string, Read>> {
  const out = new Map<string, Read>();
  const toRead = [...new Set(images)].slice(0, MAX_PLAN_READS);
  await Promise.all(
    toRead.map(async (image) => {
      if (!inspector) {
        out.set(
          image,
          new InspectionError('Unreachable', image, 'not recorded by Berth, and --arch-cache-only', true),
        );
        return;
      }
      out.set(
        image,
        await inspector
          .inspect(image)
          .catch((e: unknown) =>
            e instanceof InspectionError ? e : new InspectionError('Unreachable', image, String(e), true),
          ),
      );
    }),
  );
  return out;
}

/** The world as the cluster has it now. */
async function listWorld(ctx: PlanContext): Promise<ArchWorld> {
  const { client } = ctx;
  const items = (ref: ResourceRef) => client.list(ref).then((l) => l.items);
  const [current, pods, nodes, namespaces, mutating, validating, ...owned] = await Promise.all([
    items(ArchPlacement.ref),
    items(Resources.pods),
    items(Resources.nodes),
    items(Resources.namespaces),
    items(Resources.mutatingWebhookConfigurations),
    items(Resources.validatingWebhookConfigurations),
    ...OWNERS.map((o) => items(o.ref)),
  ]);
  const webhookNamespaces = new Set([...mutating, ...validating].flatMap(webhookServiceNamespaces));
  return {
    current,
    pods: pods as ArchPod[],
    nodes,
    namespaces: new Map(namespaces.map((n) => [n.metadata!.name!, n.metadata?.labels ?? {}])),
    workloads: workloadsOf(OWNERS.map((o, i) => ({ kind: o.ref.kind, items: owned[i] as Templated[] }))),
    exempt: { berthNamespace: ctx.berthNamespace, servesWebhook: (n) => webhookNamespaces.has(n) },
  };
}

export async function planArchObjects(ctx: PlanContext, inspector?: ImageInspector): Promise<PlanPart> {
  const world = await listWorld(ctx);
  const recorded = recordedImages(world.pods);
  const known = (image: string, ns: string) => recorded.get(`${ns}/${image}`);
  // A first pass finds the images of the workloads the change gives to a policy: only they are read.
  const wanted = new Set<string>();
  planArch(world, ctx.objects, ctx.deleting, (image, ns) => {
    if (!known(image, ns)) wanted.add(image);
    return known(image, ns) ?? new InspectionError('Unreachable', image, 'not read yet', true);
  });
  const client =
    inspector ??
    (ctx.options['archCacheOnly'] || !wanted.size
      ? undefined
      : new RegistryClient({
          ...registryOptions({
            registries: ctx.options['archRegistries'],
            registryCa: ctx.options['archRegistryCa'],
          }),
          clusterCidrs: await clusterCidrs(ctx.client, rootLogger),
        }));
  try {
    const read = await readImages(client, [...wanted]);
    return planArch(world, ctx.objects, ctx.deleting, (image, ns) => known(image, ns) ?? read.get(image));
  } finally {
    if (client !== inspector) (client as RegistryClient | undefined)?.close();
  }
}
