// The server-side-apply node writer: one controller's share of a Node (labels, annotations,
// taints) under its own field manager. Labels and annotations go by server-side apply, read back
// from managedFields; taints, an atomic list that managedFields cannot split by owner, by the
// compare-and-swap writer's patch with a record of the taints it put on. So a controller writes
// only when its share differs, never touches keys another manager set to other values, and never
// recreates a node.
import { applyTarget, isObjectGone } from '../../runtime/client/apply.ts';
import { isConflict, type KubeClient } from '../../runtime/client/client.ts';
import { errorText } from '../../runtime/observability/log.ts';
import type { Spacing } from '../../runtime/controller/spacing.ts';
import { CasNodeWriter, taintPatch, type NodeEvents, type NodeWriterOptions } from './cas.ts';
import {
  changedKeys,
  leaveAsIs,
  nodeState,
  nodeWriteFor,
  type NodeOutputs,
  type NodeWrite,
} from './write.ts';
import { Resources, type KubeObject } from '../../runtime/api/meta.ts';

/** What a sync did: the write, whether it wrote, and whether to sync again (ApplyNodeWriter.sync). */
export type SyncResult = NodeWrite & { wrote: boolean; held?: boolean; retryAfterMs?: number };

/** What identifies a write for the write expectations, and its part that steers scheduling. */
interface WriteKey {
  write: string;
  scheduling: string;
}

/**
 * Applies one field manager's share of nodes. After each write it expects to see that write come
 * back through the node informer: until it has, a reconcile (on a cache older than the write) that
 * arrives at the same write sends nothing, while a different write is written at once. With a
 * spacing (WriteSpacing, WriteWindow), a write that changes only annotations waits as it says: the
 * changes of a busy node go out together, each at most one interval late. Every write goes
 * through the manager's WriteLoopBreaker, which may hold keys back.
 */
export class ApplyNodeWriter {
  readonly fieldManager: string;
  readonly #client: () => KubeClient;
  /** Sends the writes (the taint patch its own), through the loop breaker, and keeps the expectations. */
  readonly #cas: CasNodeWriter<WriteKey>;
  readonly #spacing: Spacing | undefined;

  constructor(
    client: () => KubeClient,
    fieldManager: string,
    nodes: NodeEvents,
    opts: NodeWriterOptions & { spacing?: Spacing },
  ) {
    this.#client = client;
    this.fieldManager = fieldManager;
    this.#spacing = opts.spacing;
    this.#cas = new CasNodeWriter(client, fieldManager, nodes, opts);
  }

  /**
   * Brings the node to `desired` if it is not there; returns the write (foreign keys included).
   * `held`: the write waits for the node's write spacing.
   * `retryAfterMs`: sync again after that long (the write spacing, or the loop breaker held keys back).
   */
  async sync(node: KubeObject, desired: NodeOutputs): Promise<SyncResult> {
    const name = node.metadata!.name!;
    const state = nodeState(node, this.fieldManager);
    let write = nodeWriteFor(state, desired);
    if (write.inSync) {
      this.#cas.forget(name);
      this.#spacing?.settled?.(name);
      return { ...write, wrote: false };
    }
    const pending = this.#cas.pending(node);
    if (pending?.write === writeKey(write).write) return { ...write, wrote: false };
    const { held, retryAfterMs } = this.#cas.hold(node, changedKeys(state, write));
    const loop = retryAfterMs === undefined ? {} : { retryAfterMs };
    if (held.length) {
      write = nodeWriteFor(state, leaveAsIs(state, desired, held));
      if (write.inSync || pending?.write === writeKey(write).write)
        return { ...write, wrote: false, ...loop };
    }
    const key = writeKey(write);
    // Only annotations change (judged against a write still on its way, if any): this may wait.
    const annotationsOnly = pending
      ? pending.scheduling === key.scheduling
      : write.changed.every((k) => k === 'annotation');
    const wait = annotationsOnly ? (this.#spacing?.wait(name) ?? 0) : 0;
    if (wait > 0)
      return { ...write, wrote: false, held: true, retryAfterMs: Math.min(wait, retryAfterMs ?? wait) };

    const keys = changedKeys(state, write);
    const taintKeys = keys.filter((k) => k.startsWith('taint '));
    let written: KubeObject | undefined;
    try {
      if (write.changed.some((k) => k !== 'taint')) {
        const body = applyTarget(Resources.nodes, node);
        body.metadata.labels = write.labels;
        body.metadata.annotations = write.annotations;
        written = await this.#cas.send(
          node,
          keys.filter((k) => !taintKeys.includes(k)),
          () => this.#client().apply(Resources.nodes, body, { fieldManager: this.fieldManager }),
        );
      }
    } catch (e) {
      // The node was deleted meanwhile: the uid precondition refused to recreate it.
      if (isObjectGone(e)) {
        this.forget(name);
        return { ...write, wrote: false };
      }
      // Any other conflict: another manager wrote one of these keys after our cache saw the node.
      // The retry (with backoff) sees that write and holds the key back.
      throw e;
    }
    if (write.changed.includes('taint')) {
      // Judged on the node as the apply left it, if there was one: the patch tests what it replaces.
      const ops = taintPatch(written ?? node, this.fieldManager, write.taints);
      if (ops.length) {
        const r = await this.#cas.patch(node, taintKeys, ops);
        if (r.status === 'gone') {
          this.forget(name);
          return { ...write, wrote: false };
        }
        // On a conflict the node's watch event brings the fresh node back here.
        if (r.status === 'written') written = r.node;
      }
    }
    if (!written) return { ...write, wrote: false, ...loop };
    this.#cas.expect(name, written, key);
    this.#spacing?.wrote(name);
    return { ...write, wrote: true, ...loop };
  }

  /**
   * sync, with a write the apiserver refuses (an admission policy, a node over its limits) as a
   * result: `refused` says why, beside the write (its foreign keys), for the caller's status before
   * it throws `refused.error` to be retried. A conflict (another manager wrote the node after the
   * cache saw it) still throws at once: the retry sees that write.
   */
  async trySync(
    node: KubeObject,
    desired: NodeOutputs,
  ): Promise<SyncResult & { refused?: { error: unknown; message: string } }> {
    try {
      return await this.sync(node, desired);
    } catch (error) {
      if (isConflict(error)) throw error;
      const write = nodeWriteFor(nodeState(node, this.fieldManager), desired);
      const message = `node ${node.metadata!.name!} could not be written: ${errorText(error)}`;
      return { ...write, wrote: false, refused: { error, message } };
    }
  }

  /** The node is gone. */
  forget(name: string): void {
    this.#cas.forget(name);
    this.#spacing?.forget(name);
  }
}

function writeKey(write: NodeWrite): WriteKey {
  const scheduling = JSON.stringify([write.labels, write.taints]);
  return { scheduling, write: JSON.stringify([scheduling, write.annotations]) };
}
