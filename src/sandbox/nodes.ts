// Simulated nodes: Node objects that kwok manages (it keeps them Ready and runs their pods).
// Used by `berth sandbox up --nodes`, the test helpers and the benchmarks alike.
import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import * as z from '../runtime/platform/zod.ts';
import { isConflict, type KubeClient } from '../runtime/client/client.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';

export const KWOK_ANNOTATION = 'kwok.x-k8s.io/node';

const taintSchema = z.object({
  key: z.string().min(1),
  value: z.string().optional(),
  effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']),
});
export type Taint = z.infer<typeof taintSchema>;

export const nodeGroupSchema = z
  .object({
    /** Node names are `<prefix>-<index>`. */
    prefix: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/)
      .default('kwok-node'),
    count: z.number().int().min(0).default(1),
    /** Index of the first node, so that several groups can share a prefix. */
    start: z.number().int().min(0).default(0),
    arch: z.string().default('amd64'),
    labels: z.record(z.string(), z.string()).default({}),
    annotations: z.record(z.string(), z.string()).default({}),
    taints: z.array(taintSchema).default([]),
  })
  .strict();
export type NodeGroup = z.infer<typeof nodeGroupSchema>;
export type NodeGroupInput = z.input<typeof nodeGroupSchema>;

const nodeFileSchema = z.object({ nodes: z.array(nodeGroupSchema) }).strict();

/** Reads a YAML node file: `nodes: [{prefix, count, arch, labels, annotations, taints}]`. */
export function readNodeFile(path: string): NodeGroup[] {
  const parsed = nodeFileSchema.safeParse(parseYaml(readFileSync(path, 'utf8')));
  if (!parsed.success) throw new Error(`${path}: ${z.prettifyError(parsed.error)}`);
  return parsed.data.nodes;
}

/** Parses `key=value:Effect` (or `key:Effect`), as kubectl taint does. */
export function parseTaint(s: string): Taint {
  const m = s.match(/^([^=:]+)(?:=([^:]*))?:(NoSchedule|PreferNoSchedule|NoExecute)$/);
  if (!m) throw new Error(`taint "${s}" is not key[=value]:NoSchedule|PreferNoSchedule|NoExecute`);
  return { key: m[1]!, ...(m[2] === undefined ? {} : { value: m[2] }), effect: m[3] as Taint['effect'] };
}

/** Parses `k=v,k2=v2`. */
export function parseLabels(s: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of s.split(',').filter(Boolean)) {
    const i = part.indexOf('=');
    if (i <= 0) throw new Error(`label "${part}" is not key=value`);
    out[part.slice(0, i)] = part.slice(i + 1);
  }
  return out;
}

export function nodeNames(group: NodeGroupInput): string[] {
  const g = nodeGroupSchema.parse(group);
  return Array.from({ length: g.count }, (_, i) => `${g.prefix}-${g.start + i}`);
}

export function nodeManifests(group: NodeGroupInput): KubeObject[] {
  const g = nodeGroupSchema.parse(group);
  return nodeNames(g).map((name) => ({
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      annotations: { [KWOK_ANNOTATION]: 'fake', ...g.annotations },
      labels: {
        'kubernetes.io/arch': g.arch,
        'kubernetes.io/os': 'linux',
        'kubernetes.io/hostname': name,
        type: 'kwok',
        ...g.labels,
      },
    },
    spec: { taints: g.taints },
    // kwok's node-initialize stage keeps an architecture that is already in status.
    status: { nodeInfo: { architecture: g.arch, operatingSystem: 'linux' } },
  }));
}

/** Creates the nodes that do not exist yet, `concurrency` requests at a time; returns how many it created. */
export async function createNodes(
  client: KubeClient,
  groups: NodeGroupInput[],
  concurrency = 32,
): Promise<number> {
  const todo = groups.flatMap(nodeManifests);
  let created = 0;
  let next = 0;
  const worker = async () => {
    while (next < todo.length) {
      const node = todo[next++]!;
      try {
        await client.create(Resources.nodes, node);
        created++;
      } catch (e) {
        if (!isConflict(e)) throw e;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, todo.length) }, worker));
  return created;
}
