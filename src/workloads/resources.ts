// How big an instance is: for its Pod and for quota, one answer. Explicit container resources take
// precedence, dimension by dimension; a dimension no container states comes from the instance type and
// is set on the Pod as a whole (pod-level resources), so the type sizes the instance, not each container.
import type { InstanceTemplate } from './types.ts';

export interface InstanceTypeSize {
  cpu: string;
  memory: string;
}

export interface Size {
  milliCPU: number;
  memoryBytes: number;
  /** Pod-level requests and limits (`spec.resources`) for what the instance type sizes. */
  pod?: { cpu?: string; memory?: string };
}

const suffixes: Record<string, number> = {
  '': 1,
  m: 1e-3,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
};

/** A quantity in its base unit (cores, bytes); undefined when it is not one the API accepts. */
export function parseQuantity(q: string): number | undefined {
  const m = /^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(q);
  if (!m) return undefined;
  return Number(m[1]) * suffixes[m[2] ?? '']!;
}

/** Millicores of a CPU quantity, rounded up as Kubernetes does. */
export const milliCPU = (q: string): number | undefined => {
  const v = parseQuantity(q);
  return v === undefined ? undefined : Math.ceil(Math.round(v * 1e6) / 1e3);
};

/** Bytes of a memory quantity, rounded up. */
export const bytes = (q: string): number | undefined => {
  const v = parseQuantity(q);
  return v === undefined ? undefined : Math.ceil(v);
};

/** "2" for whole cores, "1500m" otherwise. */
export const formatCPU = (milli: number): string => (milli % 1000 === 0 ? `${milli / 1000}` : `${milli}m`);

/** The largest binary unit that divides it exactly ("2Gi", "1536Mi"), else bytes. */
export function formatBytes(b: number): string {
  for (const [unit, size] of [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20],
    ['Ki', 2 ** 10],
  ] as const)
    if (b >= size && b % size === 0) return `${b / size}${unit}`;
  return `${b}`;
}

/** What sizes an instance: its InstanceType and its containers' resources (all an Instance's cache keeps of its template). */
export type SizedTemplate = Pick<InstanceTemplate, 'instanceType'> & {
  containers: Pick<InstanceTemplate['containers'][number], 'name' | 'resources'>[];
};

/**
 * The instance's size, or why it has none (a ConfigurationError): an instance type that does not
 * exist or says something that is not a quantity. A container's requests count, else its limits.
 */
export function instanceSize(
  template: SizedTemplate,
  instanceType: (name: string) => InstanceTypeSize | undefined,
): Size | { error: string } {
  const explicit = (dim: 'cpu' | 'memory') =>
    template.containers
      .map((c) => c.resources?.requests?.[dim] ?? c.resources?.limits?.[dim])
      .filter((q): q is string => q !== undefined);
  const type = template.instanceType ? instanceType(template.instanceType) : undefined;
  if (template.instanceType && !type)
    return { error: `InstanceType ${template.instanceType} does not exist` };
  const size: Size = { milliCPU: 0, memoryBytes: 0 };
  const pod: NonNullable<Size['pod']> = {};
  for (const [dim, parse, field] of [
    ['cpu', milliCPU, 'milliCPU'],
    ['memory', bytes, 'memoryBytes'],
  ] as const) {
    const stated = explicit(dim);
    if (stated.length) {
      for (const q of stated) size[field] += parse(q) ?? 0;
    } else if (type) {
      const v = parse(type[dim]);
      if (v === undefined)
        return { error: `InstanceType ${template.instanceType}: ${dim} "${type[dim]}" is not a quantity` };
      size[field] = v;
      pod[dim] = type[dim];
    }
  }
  if (pod.cpu !== undefined || pod.memory !== undefined) size.pod = pod;
  return size;
}

/**
 * Why the Pod the apiserver made is not the one sent: it dropped the pod-level resources the
 * instance type sizes, as an apiserver does with a field of a feature turned off (PodLevelResources,
 * on by default since Kubernetes 1.34). Undefined when it kept them, or none were sent.
 */
export function droppedPodResources(
  sent: Size,
  made: { spec?: { resources?: unknown } },
): string | undefined {
  if (!sent.pod || made.spec?.resources) return undefined;
  return (
    "the apiserver dropped the Pod's pod-level resources (spec.resources), which the instance type " +
    "sizes: the cluster's PodLevelResources feature is off. Turn it on, or give the template's " +
    'containers their own cpu and memory'
  );
}
