// What a node writer still has on nodes once Berth is gone (`berth uninstall`, `berth arch clean`): the
// taints its record names come off by compare-and-swap, with the record; the labels and annotations it
// owns by server-side apply come off by applying nothing under its field manager, so that a key another
// manager also set stays theirs.
import { applyTarget, isObjectGone } from '../../runtime/client/apply.ts';
import { ownedKeys } from '../../runtime/api/fields.ts';
import type { KubeClient } from '../../runtime/client/client.ts';
import { Resources } from '../../runtime/api/meta.ts';
import { taintPatch } from './cas.ts';
import { ownedTaints } from './write.ts';

export interface ReleaseOptions {
  /** Says what changed (or, in a dry run, would change), one line a node. */
  say: (line: string) => void;
  dryRun?: boolean;
}

/** Takes what `manager` put on any node off it. */
export async function releaseNodes(client: KubeClient, manager: string, o: ReleaseOptions): Promise<void> {
  for (const node of (await client.list(Resources.nodes)).items) {
    const name = node.metadata!.name!;
    const taints = taintPatch(node, manager, []);
    const keys = [
      ...ownedKeys(node, manager, ['metadata', 'labels']).map((k) => `label ${k}`),
      ...ownedKeys(node, manager, ['metadata', 'annotations']).map((k) => `annotation ${k}`),
    ];
    try {
      if (taints.length) {
        const owned = ownedTaints(node, manager);
        if (!o.dryRun)
          await client.patch(Resources.nodes, name, taints, { type: 'json', fieldManager: manager });
        o.say(`node ${name}: removed taints ${owned.join(', ') || '(none; its record only)'}`);
      }
      if (keys.length) {
        if (!o.dryRun)
          await client.apply(Resources.nodes, applyTarget(Resources.nodes, node), { fieldManager: manager });
        o.say(`node ${name}: removed ${keys.join(', ')} (${manager})`);
      }
    } catch (e) {
      // A node that left meanwhile carries nothing any more.
      if (!isObjectGone(e)) throw e;
    }
  }
}
