// The mirror controller: the whole reconcile loop of mirrored Instances on the management plane. For
// every engaged cell it watches the Instances there and the WorkloadDeployments of federation's (an
// Instance names its WorkloadDeployment by label, which names its Workload), and keeps one read-only
// copy of each such Instance here, in the Workload's namespace, named `<cell>-<instance>` and owned
// by the Workload: one hop, watch-driven, written only when something changed (decide/mirror.ts).
// Part 1's controllers never see a mirror (its MIRROR_LABEL). A mirror whose Instance is gone is
// deleted, but only once its cell's caches have listed and while the cell answers: a cell that does
// not answer keeps its mirrors, with their last status and Mirrored=False CellUnreachable since when.
// A Cell is gone only when the apiserver says so: the Cells' watch is not the mirrors', and a mirror
// made just after its Cell can be cached first.
import { federationMetrics } from '../metrics.ts';
import { changed, conditionsChanged, deletionChanged, labelsChanged } from '../../policy/predicates.ts';
import { findCondition } from '../../runtime/api/conditions.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyStatus, deleteExact, isObjectGone } from '../../runtime/client/apply.ts';
import { exists, isConflict, isNotFound } from '../../runtime/client/client.ts';
import type { Cluster } from '../../runtime/cluster/cluster.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { Trigger } from '../../runtime/controller/trigger.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import { WriteSpacing } from '../../runtime/controller/spacing.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import { clusterNameOf } from '../../cells/decide.ts';
import { type CellObject } from '../../cells/types.ts';
import { Cell } from '../../cells/crd.ts';
import type { InstanceObject } from '../../workloads/decide/instances.ts';
import {
  DEPLOYMENT_LABEL,
  type InstanceStatus,
  MIRROR_CELL_LABEL,
  MIRROR_LABEL,
  OWN_INSTANCES,
} from '../../workloads/types.ts';
import { Instance, WorkloadDeployment } from '../../workloads/crd.ts';
import { type DeploymentObject, workloadKeyOf } from '../decide/placement.ts';
import {
  MIRROR_MANAGER,
  mirrorKey,
  mirrorName,
  mirrorOf,
  sameMirror,
  sameStatus,
  sourceKeyOf,
  splitMirrorKey,
  staleStatus,
} from '../decide/mirror.ts';
import {
  WORKLOAD_NAME_LABEL,
  WORKLOAD_NAMESPACE_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
} from '../types.ts';
import { Workload } from '../crd.ts';

/** A cell's Instances and federation's WorkloadDeployments there, while it is engaged. */
interface InCell {
  instances: Informer<InstanceObject>;
  deployments: Informer<DeploymentObject>;
}

/** How often an instance whose mirror's name an Instance that is not a mirror holds tries again. */
export const NAME_HELD_RETRY_MS = 10_000;

/** The shortest time between two writes of one mirror, after the first of a burst. */
export const MIRROR_WRITE_INTERVAL_MS = 250;

const deploymentKeyOf = (i: InstanceObject): string[] => {
  const d = i.metadata.labels?.[DEPLOYMENT_LABEL];
  return d ? [`${i.metadata.namespace}/${d}`] : [];
};

/** The mirror controller: its watches here, and each engaged cell's Instances and WorkloadDeployments. */
export function setupMirrorReconciler(manager: Manager, opts: { workers?: number } = {}): Controller {
  const r = new MirrorReconciler(manager);
  const controller = new Controller({
    name: 'federation-mirror',
    workers: opts.workers ?? 16,
    logger: r.log,
    reconciler: r,
  })
    .reconcileOn(r.trigger)
    // A mirror changed or deleted by someone else is put back; one with no instance is pruned.
    .watch(r.mirrors, (m) => sourceKeyOf(m))
    // A cell that stops (or starts again) answering marks its mirrors stale (or current); a Cell
    // deleted takes its mirrors with it.
    .watch(r.cells, (c) => r.keysOfCell(c.metadata.name!), { update: changed(conditionsChanged) })
    // A Workload that appears, is recreated or is being deleted: its instances' mirrors follow.
    .watch(r.workloads, (w) => r.keysOfWorkload(keyOf(w)), {
      update: changed<WorkloadObject>(deletionChanged, (a, b) => a.metadata.uid !== b.metadata.uid),
    });
  manager.add(controller);
  // Each cell's caches are made while it is engaged, on every replica (warm failover).
  manager.addEngager('federation-mirror-cells', r);
  return controller;
}

export class MirrorReconciler {
  /** Its own keys: the cell instances a cell's events, or a mirror name freed here, bring back. */
  readonly trigger = new Trigger();
  readonly mirrors: Informer<InstanceObject>;
  readonly workloads: Informer<WorkloadObject>;
  readonly cells: Informer<CellObject>;
  readonly log: Logger;
  private readonly manager: Manager;
  /** By cell name, while engaged. */
  private readonly inCells = new Map<string, InCell>();
  /** The mirror last written, until the mirror cache shows it (a second pass must not send it again). */
  private readonly sent: WriteExpectations<InstanceObject>;
  /** When each mirror was last written, for the write interval. */
  private readonly spacing = new WriteSpacing(MIRROR_WRITE_INTERVAL_MS);
  /** By mirror (`<namespace>/<name>`): the keys of the cell instances whose mirror name it holds. */
  private readonly waiting = new Map<string, Set<string>>();
  private readonly events: EventRecorder;

  constructor(manager: Manager) {
    this.manager = manager;
    this.log = manager.log.child({ capability: 'federation', controller: 'mirror' });
    this.mirrors = manager.informer<InstanceObject>(Instance.ref, { labelSelector: MIRROR_LABEL });
    this.mirrors.addIndexer('cell', (m) => {
      const c = m.metadata.labels?.[MIRROR_CELL_LABEL];
      return c ? [c] : [];
    });
    this.mirrors.addIndexer('workload', (m) => {
      const ns = m.metadata.labels?.[WORKLOAD_NAMESPACE_LABEL];
      const name = m.metadata.labels?.[WORKLOAD_NAME_LABEL];
      return ns && name ? [`${ns}/${name}`] : [];
    });
    this.sent = new WriteExpectations<InstanceObject>(this.mirrors, keyOf);
    this.events = manager.recorder('federation-mirror');
    this.mirrors.addEventHandler({
      onDelete: (m) => {
        const key = sourceKeyOf(m);
        if (key) this.spacing.forget(key);
        // The name is free: the instances that wanted it try again (the first to write it holds it).
        for (const next of this.waiting.get(keyOf(m)) ?? []) this.trigger.send(next);
        this.waiting.delete(keyOf(m));
      },
    });
    // The same informers as the federation controller's (same requests): one cache each.
    this.workloads = manager.informer<WorkloadObject>(Workload.ref);
    this.cells = manager.informer<CellObject>(Cell.ref);
  }

  /** The keys of a cell's mirrors and of its instances. */
  keysOfCell(cell: string): string[] {
    const instances = this.inCells.get(cell)?.instances.list() ?? [];
    return [
      ...new Set([
        ...this.mirrors.byIndex('cell', cell).flatMap((m) => sourceKeyOf(m) ?? []),
        ...instances.map((i) => mirrorKey(cell, i.metadata.namespace!, i.metadata.name!)),
      ]),
    ];
  }

  /** The keys of a workload's mirrors and of its instances in every engaged cell. */
  keysOfWorkload(workload: string): string[] {
    const keys = new Set(this.mirrors.byIndex('workload', workload).flatMap((m) => sourceKeyOf(m) ?? []));
    for (const [cell, c] of this.inCells)
      for (const d of c.deployments.byIndex('workload', workload))
        for (const i of c.instances.byIndex('deployment', keyOf(d)))
          keys.add(mirrorKey(cell, i.metadata.namespace!, i.metadata.name!));
    return [...keys];
  }

  engage(cluster: Cluster, signal: AbortSignal): void {
    const cell = cluster.name.replace(/^cell-/, '');
    if (clusterNameOf(cell) !== cluster.name) return; // the local cluster, or a cluster of no Cell
    const instances = cluster.informer<InstanceObject>(Instance.ref, OWN_INSTANCES);
    instances.addIndexer('deployment', deploymentKeyOf);
    const deployments = cluster.informer<DeploymentObject>(WorkloadDeployment.ref, {
      labelSelector: WORKLOAD_UID_LABEL,
    });
    deployments.addIndexer('workload', (d) => {
      const k = workloadKeyOf(d);
      return k ? [k] : [];
    });
    const here: InCell = { instances, deployments };
    this.inCells.set(cell, here);
    // A cell's initial list (its replay once listed) is queued low: a change elsewhere goes first.
    const add = (keys: string[], initial?: boolean) => {
      if (!signal.aborted) this.trigger.send(keys, initial ? { priority: 'low' } : undefined);
    };
    const ofInstance = (i: InstanceObject) => [mirrorKey(cell, i.metadata.namespace!, i.metadata.name!)];
    const ofDeployment = (d: DeploymentObject) =>
      instances.byIndex('deployment', keyOf(d)).flatMap((i) => ofInstance(i));
    signal.addEventListener(
      'abort',
      () => {
        if (this.inCells.get(cell) === here) this.inCells.delete(cell);
      },
      { once: true },
    );
    Promise.all([instances.waitForSync(signal), deployments.waitForSync(signal)]).then(
      () => {
        // Listed: every mirror of the cell is looked at once (those with no instance left are pruned).
        add(this.mirrors.byIndex('cell', cell).flatMap((m) => sourceKeyOf(m) ?? []));
        instances.addEventHandler({
          onAdd: (i, initial) => add(ofInstance(i), initial),
          // A resync (the same object) changes nothing.
          onUpdate: (a, b) => a !== b && add(ofInstance(b)),
          onDelete: (i) => add(ofInstance(i)),
        });
        deployments.addEventHandler({
          onAdd: (d, initial) => add(ofDeployment(d), initial),
          // A mirror reads only a WorkloadDeployment's labels (its workload, placement and city); its
          // status changes with each of its instances', which bring their own mirrors' keys.
          onUpdate: (a, b) => a !== b && labelsChanged(a, b) && add(ofDeployment(b)),
          onDelete: (d) => add(ofDeployment(d)),
        });
      },
      () => {}, // disengaged before it listed
    );
  }

  async reconcile(key: string): Promise<Result | void> {
    const { cell, namespace, name } = splitMirrorKey(key);
    const mname = mirrorName(cell, name);
    if (!mname) return;
    const cached = this.mirrors.get(`${namespace}/${mname}`);
    // The mirror as last written: a create the cache has not shown yet counts too, or the instance's
    // next change, come before the echo, would create it again (bench:federation: 5 in 100).
    const mirror = cached
      ? (this.sent.pending(cached) ?? cached)
      : this.sent.pendingKey(`${namespace}/${mname}`);
    // Two cells' instances can have one mirror name (cell `a`, instance `b-c`; cell `a-b`, instance
    // `c`): the mirror is the first one's, never overwritten or pruned for the other, which waits.
    const holder = mirror && sourceKeyOf(mirror);
    if (mirror && holder !== key && (await this.holds(holder, mname)))
      return this.nameTaken(mirror, holder!, key);
    // A new instance passes through several statuses within a second (quota granted, programmed,
    // Ready, Available): its mirror is written with spacing, so that a thousand new instances do not
    // send the management plane four thousand writes.
    const wait = this.spacing.wait(key);
    if (mirror && wait > 0) return { requeueAfterMs: wait };
    const cellObject = this.cells.get(cell);
    if (!cellObject) {
      if (!mirror) return;
      // Not cached yet, but there: its add event, or this retry, brings the key back.
      if (await this.cellExists(cell)) return { requeue: true };
      // A Cell deleted has left the federation: its mirrors go too.
      return this.remove(mirror, `cell ${cell} is gone`);
    }
    const reachable = findCondition(cellObject.status?.conditions, 'Reachable');
    if (reachable?.status === 'False') {
      // A partition is not a deletion: the last status stays, marked stale since the cell went silent.
      if (mirror)
        await this.writeStatus(mirror, staleStatus(mirror, cell, reachable.lastTransitionTime), key);
      return;
    }
    const here = this.inCells.get(cell);
    // Never judged on a view not listed yet: the cell's sync brings every key of it back.
    if (!here?.instances.hasSynced() || !here.deployments.hasSynced()) return;
    const { instance, deployment, workload } = this.sourceOf(here, namespace, name);
    if (
      !instance ||
      !deployment ||
      !workload ||
      workload.metadata.deletionTimestamp ||
      workload.metadata.uid !== deployment.metadata.labels?.[WORKLOAD_UID_LABEL]
    )
      return this.remove(
        mirror,
        `instance ${namespace}/${name} of cell ${cell} is gone or no longer federation's`,
      );
    const want = mirrorOf({ cell, instance, deployment, workload }, mirror);
    if (!want) return;
    let current = mirror;
    if (!current || !sameMirror(current, want.object)) {
      const written = await this.applyMirror(want.object, mirror !== undefined);
      if (!written) return this.nameHeld(namespace, mname, key);
      current = written;
      federationMetrics.mirrorWrites.inc({ write: 'apply' });
      this.sent.expect(keyOf(current), current.metadata.resourceVersion, current);
      this.spacing.wrote(key);
      if (!mirror) this.log.info({ mirror: keyOf(current), cell }, 'instance mirrored');
    }
    // An instance with no status yet (its first comes with its Pod Ready, mostly): its new mirror
    // waits for it too, so that a mirror is two writes, its create and the status it then copies.
    if (!instance.status?.conditions?.length && !current.status?.conditions?.length) return;
    await this.writeStatus(current, want.status, key);
  }

  /**
   * A mirror this process has seen is forced back to what it should be (someone edited it). One it
   * has not is applied without force: an Instance of that name not cached yet (another cell's mirror,
   * a tenant's own) answers Conflict (undefined here) instead of being taken over.
   */
  private async applyMirror(object: InstanceObject, seen: boolean): Promise<InstanceObject | undefined> {
    try {
      return await this.manager.client().apply<InstanceObject>(Instance.ref, object, {
        fieldManager: MIRROR_MANAGER,
        force: seen,
      });
    } catch (e) {
      if (isConflict(e)) return undefined;
      throw e;
    }
  }

  /** Someone else's Instance holds the name of a mirror not cached yet: judged on it as it is now. */
  private async nameHeld(namespace: string, name: string, key: string): Promise<Result | void> {
    const held = await this.manager
      .client()
      .get<InstanceObject>(Instance.ref, name, namespace)
      .catch((e: unknown) => {
        if (isNotFound(e)) return undefined;
        throw e;
      });
    if (!held) return { requeue: true }; // gone meanwhile: the name is free
    const holder = sourceKeyOf(held);
    if (held.metadata.labels?.[MIRROR_LABEL] !== undefined) {
      if (holder !== key && (await this.holds(holder, name))) return this.nameTaken(held, holder!, key);
      return { requeue: true }; // this instance's own, edited: forced back once the cache shows it
    }
    // Not a mirror, so no watch of Berth's sees it go: looked at again now and then.
    this.warnUnmirrored(
      key,
      `an Instance named ${name} that is not a mirror holds its name (rename or delete it)`,
    );
    return { requeueAfterMs: NAME_HELD_RETRY_MS };
  }

  /** A cell's instance, its WorkloadDeployment there and that one's Workload here, as cached. */
  private sourceOf(
    here: InCell,
    namespace: string,
    name: string,
  ): { instance?: InstanceObject; deployment?: DeploymentObject; workload?: WorkloadObject } {
    const instance = here.instances.get(`${namespace}/${name}`);
    const deployment = instance && here.deployments.get(deploymentKeyOf(instance)[0] ?? '');
    const wkey = deployment && workloadKeyOf(deployment);
    return { instance, deployment, workload: wkey ? this.workloads.get(wkey) : undefined };
  }

  /**
   * Whether the instance a mirror names (`holder`, from its label and annotation) holds the mirror's
   * name: it maps to that name, in a cell that exists. A mirror whose marks someone edited, or whose
   * cell is gone, holds nothing: its rightful instance writes it back.
   */
  private async holds(holder: string | undefined, name: string): Promise<boolean> {
    if (!holder) return false;
    const { cell, name: instance } = splitMirrorKey(holder);
    return mirrorName(cell, instance) === name && (await this.cellExists(cell));
  }

  /**
   * Whether a Cell exists: cached, or else as the apiserver says (only its 404 says gone), asked only
   * of a Cell not cached. Taken for gone, a Cell made a moment ago would lose its mirrors, cached
   * before it, to a delete or an overwrite, and the instance waiting for the name never its Warning.
   */
  private async cellExists(name: string): Promise<boolean> {
    return this.cells.get(name) !== undefined || exists(this.manager.client(), Cell.ref, name);
  }

  /** A cell instance not mirrored because its mirror's name is another's: said on its Workload. */
  private nameTaken(mirror: InstanceObject, holder: string, key: string): void {
    const waiting = this.waiting.get(keyOf(mirror)) ?? new Set<string>();
    this.waiting.set(keyOf(mirror), waiting.add(key));
    const held = splitMirrorKey(holder);
    this.warnUnmirrored(
      key,
      `its mirror's name ${mirror.metadata.name} is that of instance ${held.name} of cell ${held.cell} ` +
        '(rename one of the cells)',
    );
  }

  /** Why a cell's instance is not mirrored: a log line, and a Warning on its Workload. */
  private warnUnmirrored(key: string, why: string): void {
    const { cell, namespace, name } = splitMirrorKey(key);
    const here = this.inCells.get(cell);
    const { workload } = here ? this.sourceOf(here, namespace, name) : {};
    const message = `instance ${name} of cell ${cell} is not mirrored: ${why}`;
    this.log.warn({ instance: key }, message);
    if (workload) this.events.event(workload, 'Warning', 'MirrorNameTaken', 'Mirror', message);
  }

  private async writeStatus(mirror: InstanceObject, status: InstanceStatus, key: string): Promise<void> {
    if (sameStatus(mirror.status, status)) return;
    this.spacing.wrote(key);
    try {
      const written = await applyStatus<InstanceObject>(
        this.manager.client(),
        Instance.ref,
        mirror,
        status,
        MIRROR_MANAGER,
      );
      federationMetrics.mirrorWrites.inc({ write: 'status' });
      this.sent.expect(keyOf(written), written.metadata.resourceVersion, written);
    } catch (e) {
      if (!isObjectGone(e)) throw e;
    }
  }

  private async remove(mirror: InstanceObject | undefined, why: string): Promise<void> {
    if (!mirror || mirror.metadata.deletionTimestamp) return;
    if (await deleteExact(this.manager.client(), Instance.ref, mirror)) {
      federationMetrics.mirrorWrites.inc({ write: 'delete' });
      this.log.info({ mirror: keyOf(mirror) }, `mirror deleted: ${why}`);
    }
  }
}
