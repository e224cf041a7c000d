// The federation controller: the whole reconcile loop of a Workload on the management plane. It is
// Aware of every engaged cell and watches the cell's WorkloadDeployments that carry its upstream
// labels (mapped back to their Workload), and Workloads, Cells and Locations here (by city code, so
// a Cell or Location change re-evaluates exactly the workloads that name its cities). A reconcile
// decides where each placement × city runs (decide/placement.ts), creates the namespace in the cell where its
// Cell allows it, applies each WorkloadDeployment, deletes those it made that are no longer wanted
// (and a namespace it created, once empty and no longer mapped), and writes the Workload's status
// when it changed. Its finalizer deletes the WorkloadDeployments from every cell first.
import { federationMetrics } from '../metrics.ts';
import { changed, conditionsChanged, deletionChanged, generationChanged } from '../../policy/predicates.ts';
import { finalizer } from '../../policy/finalizer.ts';
import { isDeepStrictEqual } from 'node:util';
import {
  findCondition,
  newlyHolds,
  sameConditions,
  setCondition,
  type Condition,
} from '../../runtime/api/conditions.ts';
import { Resources, type KubeObject } from '../../runtime/api/meta.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyStatus, deleteExact, isObjectGone } from '../../runtime/client/apply.ts';
import { exists, isConflict, isForbidden, isNotFound } from '../../runtime/client/client.ts';
import type { Cluster } from '../../runtime/cluster/cluster.ts';
import { localCluster } from '../../runtime/cluster/key.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import { Trigger } from '../../runtime/controller/trigger.ts';
import { WriteExpectations } from '../../runtime/controller/expectations.ts';
import { WriteSpacing } from '../../runtime/controller/spacing.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import { errorText, type Logger } from '../../runtime/observability/log.ts';
import { clusterNameOf } from '../../cells/decide.ts';
import { type CellObject, type LocationObject } from '../../cells/types.ts';
import { Cell, Location } from '../../cells/crd.ts';
import { templateHash } from '../../workloads/decide/revisions.ts';
import { BLOCKING_REASONS } from '../../workloads/types.ts';
import { WorkloadDeployment } from '../../workloads/crd.ts';
import { selectorMatches } from '../../policy/match/selector.ts';
import { slimMeta } from '../../policy/slim.ts';
import {
  deploymentManifest,
  drainOf,
  drains,
  heldBy,
  namespaceManifest,
  namespaceToDelete,
  orphaned,
  ownCopy,
  serves,
  type Drain,
  unwanted,
  type Writer,
} from '../decide/copies.ts';
import { deletionHold } from '../decide/deletion.ts';
import {
  cellView,
  type CellView,
  type DeploymentObject,
  type LabelledLocation,
  type Placed,
  placementCities,
  type Target,
  targets,
  workloadKeyOf,
} from '../decide/placement.ts';
import { type RolloutTurn, rolloutTurn } from '../decide/rollout.ts';
import { countsOnly, type Refusal, rollup, WORKLOAD_FIXABLE } from '../decide/rollup.ts';
import {
  FEDERATION_FINALIZER,
  FEDERATION_MANAGER,
  NAMESPACE_CREATED_LABEL,
  WORKLOAD_UID_LABEL,
  type WorkloadObject,
  type WorkloadStatus,
} from '../types.ts';
import { Workload } from '../crd.ts';

/** The shortest time between two writes of a Workload's status that change only its counts. */
export const STATUS_WRITE_INTERVAL_MS = 250;
/**
 * The same while its instances come up (the status last written has fewer Ready than desired):
 * nobody needs each step of a ramp, and each write is a server-side apply of the whole status that
 * the management plane's apiserver pays for (bench:federation: most of its CPU while converging).
 */
export const RAMP_WRITE_INTERVAL_MS = 1000;

/** The one key of the workloads' selector index. */
const SELECTS = 'selector';
/** The one key of the index of workloads being deleted. */
const DELETING = 'deleting';

/** A cell's WorkloadDeployments that carry federation's labels. */
interface CellDeployments {
  informer: Informer<DeploymentObject>;
  /**
   * Its WorkloadDeployments without them (made in the cell by hand or by a part-1 user), metadata
   * only: a name one holds is never written over, though an apply of fields all equal to its own
   * would raise no conflict.
   */
  others: Informer<KubeObject>;
  /** Namespaces known to exist in the cell (created or found). */
  namespaces: Set<string>;
  /** The namespaces Berth created there (NAMESPACE_CREATED_LABEL), metadata only. */
  created: Informer<KubeObject>;
}

/** One apply of a Workload: what the caches show of it, where it is wanted, and what went wrong. */
interface Pass {
  w: WorkloadObject;
  key: string;
  plane: string | undefined;
  views: Map<string, CellView>;
  /** Each Cell's cluster name. */
  cluster: Map<string, string>;
  /** Its own copies in the cells. */
  placed: Placed[];
  wanted: Target[];
  hash: string;
  turn: RolloutTurn;
  now: number;
  /** Its own copy of that name in the cell: another's of the same name is neither its status nor its to drain. */
  find: (cell: string, name: string) => DeploymentObject | undefined;
  /** Whatever holds that name in the cell: a copy (its own or another's), or one made by hand. */
  taken: (cell: string, name: string) => KubeObject | undefined;
  /**
   * A cell whose writes fail (it has not been found unreachable yet) holds back only itself: the
   * other cells are written and the status too (saying what the cell answered), and the reconcile
   * is retried.
   */
  failures: string[];
  /** Each WorkloadDeployment not written, by name, and why. */
  refused: Map<string, Refusal>;
  /** A name is taken in a cell (nameTaken). */
  held: boolean;
}

/** Index of a cell's WorkloadDeployments by namespace: a namespace Berth created goes once it has none. */
const byNamespace = (d: KubeObject) => [d.metadata?.namespace ?? ''];

/** How soon a leftover in a cell listed but unreachable is looked at again. */
const SWEEP_RETRY_MS = 10_000;
/**
 * How soon a name another's copy holds in a cell is looked at again, should its deletion's event be
 * missed (the cell's watches bring the Workloads it held back at once: heldNames).
 */
const HELD_RETRY_MS = 30_000;
/** How soon this plane's identity is read again after it could not be. */
const PLANE_REREAD_MS = 60_000;

/**
 * The federation controller: Workloads, the Cells and Locations that say where their cities run, and,
 * in each engaged cell, the WorkloadDeployments federation wrote there (engage).
 */
export function setupFederationReconciler(manager: Manager, opts: { workers?: number } = {}): Controller {
  const r = new FederationReconciler(manager);
  const controller = new Controller({
    name: 'federation',
    workers: opts.workers ?? 16,
    logger: r.log,
    reconciler: r,
  })
    .reconcileOn(r.trigger)
    .watch(r.workloads, keyOf, { update: changed(generationChanged, deletionChanged) })
    // Old and new objects both map: a cell that stops serving a city re-evaluates its workloads too.
    .watch(r.cells, (c) => [...r.byCities(c.spec.locations), ...r.deleting()], {
      update: changed<CellObject>(generationChanged, conditionsChanged),
    })
    // A Location's old and new objects both map: a selector that matched its labels before or matches them now.
    .watch(r.locations, (l) => r.byLocation(l));
  manager.add(controller);
  // Its work is in engage: each cell's WorkloadDeployments are watched while the cell is engaged.
  manager.addEngager('federation-cells', r);
  return controller;
}

export class FederationReconciler {
  /** Its own keys: the Workloads a cell's events, or a name freed there, bring back. */
  readonly trigger = new Trigger();
  readonly log: Logger;
  readonly workloads: Informer<WorkloadObject>;
  readonly cells: Informer<CellObject>;
  readonly locations: Informer<LocationObject>;
  private readonly manager: Manager;
  /** Status writes not yet seen in the Workload cache. */
  private readonly statusSent: WriteExpectations<WorkloadStatus>;
  /** When each Workload's status was last written: counts that move within the interval wait for it. */
  private readonly statusSpacing = new WriteSpacing(STATUS_WRITE_INTERVAL_MS);
  private readonly events: EventRecorder;
  /** By cluster name (`cell-<name>`), while engaged. */
  private readonly inCells = new Map<string, CellDeployments>();
  /** The Workloads a name in a cell (`cluster/namespace/name`) held back, to reconcile once it is gone. */
  private readonly heldNames = new Map<string, Set<string>>();
  /** This plane's identity (PLANE_LABEL) as last read: undefined where it could not be, and when. */
  private plane?: { uid: string | undefined; at: number };
  /** The read of it in flight, which every reconcile that needs it meanwhile waits for. */
  private planeReading?: Promise<string | undefined>;

  constructor(manager: Manager) {
    this.manager = manager;
    this.log = manager.log.child({ capability: 'federation' });
    this.events = manager.recorder('federation');
    this.workloads = manager.informer<WorkloadObject>(Workload.ref);
    this.statusSent = new WriteExpectations<WorkloadStatus>(this.workloads, keyOf);
    this.workloads.addEventHandler({ onDelete: (w) => this.statusSpacing.forget(keyOf(w)) });
    this.cells = manager.informer<CellObject>(Cell.ref);
    this.locations = manager.informer<LocationObject>(Location.ref);
    this.workloads.addIndexer('namespace', byNamespace);
    this.workloads.addIndexer('city', (w) => [
      ...new Set(w.spec.placements.flatMap((p) => p.cityCodes ?? [])),
    ]);
    // Workloads whose cities depend on Locations' labels.
    this.workloads.addIndexer('selector', (w) =>
      w.spec.placements.some((p) => p.locationSelector) ? [SELECTS] : [],
    );
    // Workloads held by their finalizer: a cell that lists, goes or changes may release them, whatever
    // cities they name now (their status may name another cell or city).
    this.workloads.addIndexer('deleting', (w) => (w.metadata.deletionTimestamp ? [DELETING] : []));
  }

  /** The keys of the Workloads being deleted. */
  deleting(): string[] {
    return this.workloads.byIndex('deleting', DELETING).map(keyOf);
  }

  /** The keys of the workloads that run (or may run) in these cities: by cityCodes, or by a selector today. */
  byCities(cities: readonly string[]): string[] {
    const labelled = this.labelled();
    return [
      ...new Set([
        ...cities.flatMap((c) => this.workloads.byIndex('city', c).map(keyOf)),
        ...this.workloads
          .byIndex('selector', SELECTS)
          .filter((w) =>
            w.spec.placements.some((p) => placementCities(p, labelled).some((c) => cities.includes(c))),
          )
          .map(keyOf),
      ]),
    ];
  }

  /** The keys of the workloads a Location's city or labels place: a selector that matches its labels. */
  byLocation(l: LocationObject): string[] {
    return [
      ...new Set([
        ...this.byCities([l.spec.cityCode]),
        ...this.workloads
          .byIndex('selector', SELECTS)
          .filter((w) =>
            w.spec.placements.some(
              (p) => p.locationSelector && selectorMatches(p.locationSelector, l.metadata.labels),
            ),
          )
          .map(keyOf),
      ]),
    ];
  }

  /** Aware: a cell's WorkloadDeployments of federation's, each mapped back to its Workload. */
  engage(cluster: Cluster, signal: AbortSignal): void {
    if (cluster.name === localCluster) return;
    const informer = cluster.informer<DeploymentObject>(WorkloadDeployment.ref, {
      labelSelector: WORKLOAD_UID_LABEL,
    });
    informer.addIndexer('workload', (d) => {
      const k = workloadKeyOf(d);
      return k ? [k] : [];
    });
    const others = cluster.informer<KubeObject>(WorkloadDeployment.ref, {
      labelSelector: `!${WORKLOAD_UID_LABEL}`,
      transform: slimMeta,
    });
    // One gone frees its name for the Workloads it held back (nameTaken).
    const release = (d: KubeObject) => {
      const at = `${cluster.name}/${keyOf(d)}`;
      const held = this.heldNames.get(at);
      this.heldNames.delete(at);
      if (held && !signal.aborted) this.trigger.send(held);
    };
    others.addEventHandler({ onDelete: release });
    informer.addIndexer('namespace', byNamespace);
    others.addIndexer('namespace', byNamespace);
    const created = cluster.informer<KubeObject>(Resources.namespaces, {
      labelSelector: NAMESPACE_CREATED_LABEL,
      transform: slimMeta,
    });
    this.inCells.set(cluster.name, { informer, others, namespaces: new Set(), created });
    const cellsOfCluster = () =>
      this.cells.list().filter((c) => clusterNameOf(c.metadata.name!) === cluster.name);
    const affected = () => [
      ...new Set([
        ...informer.list().flatMap((d) => workloadKeyOf(d) ?? []),
        ...this.byCities(cellsOfCluster().flatMap((c) => c.spec.locations)),
      ]),
    ];
    signal.addEventListener(
      'abort',
      () => {
        const keys = affected();
        this.inCells.delete(cluster.name);
        this.trigger.send(keys);
      },
      { once: true },
    );
    // Listed only once both have: a cell is not listed (cellViews) until then, and nothing else
    // brings its workloads back if the second syncs after the first.
    Promise.all([informer.waitForSync(signal), others.waitForSync(signal)]).then(
      () => {
        // Listed: its workloads may now place there (or learn what is there), even those with none yet,
        // and the workloads it held back from deletion may go.
        this.trigger.send([...affected(), ...this.deleting()]);
        informer.addEventHandler({
          onAdd: (d, initial) => this.enqueue(d, signal, initial),
          onUpdate: (a, b) => {
            this.enqueue(a, signal, a === b);
            this.enqueue(b, signal, a === b);
          },
          onDelete: (d) => {
            this.enqueue(d, signal);
            release(d);
          },
        });
      },
      () => {}, // disengaged before it listed
    );
  }

  /** A cell's initial list (its replay once listed) and resyncs are queued low: a change elsewhere goes first. */
  private enqueue(d: DeploymentObject, signal: AbortSignal, low?: boolean): void {
    const k = workloadKeyOf(d);
    if (k && !signal.aborted) this.trigger.send(k, low ? { priority: 'low' } : undefined);
  }

  /**
   * This plane's identity: the uid of its kube-system Namespace, read once. Where RBAC or the
   * cluster refuses it, copies are told apart by the Cell they were written through (and a copy
   * with a plane label not of this Workload is taken for another plane's) until a read a minute
   * later succeeds; another error is retried with the reconcile.
   */
  private planeId(): Promise<string | undefined> {
    const p = this.plane;
    if (p && (p.uid !== undefined || Date.now() - p.at < PLANE_REREAD_MS)) return Promise.resolve(p.uid);
    this.planeReading ??= this.manager
      .client()
      .get(Resources.namespaces, 'kube-system')
      .then(
        (ns) => ns.metadata?.uid,
        (e: unknown) => {
          if (!isForbidden(e) && !isNotFound(e)) throw e;
          this.log.warn(
            { err: errorText(e) },
            `cannot read Namespace kube-system, this plane's identity (berth manifests grants get on it): its copies in the cells are told apart by the Cell they were written through, read again in ${PLANE_REREAD_MS / 1000} s`,
          );
          return undefined;
        },
      )
      .then((uid) => {
        this.plane = { uid, at: Date.now() };
        return uid;
      })
      .finally(() => (this.planeReading = undefined));
    return this.planeReading;
  }

  /** Who writes through `cell`: this plane, through the Cell's uid now. */
  private writer(plane: string | undefined, cell: string): Writer {
    return { plane, cellUid: this.cells.get(cell)?.metadata.uid };
  }

  async reconcile(key: string): Promise<Result | void> {
    const plane = await this.planeId();
    const w = this.workloads.get(key);
    if (!w) return this.sweep(key, plane);
    return finalizer(
      {
        name: FEDERATION_FINALIZER,
        client: this.manager.client(),
        ref: Workload.ref,
        fieldManager: FEDERATION_MANAGER,
      },
      w,
      { apply: () => this.apply(w, plane), cleanup: () => this.cleanup(w, plane) },
    );
  }

  /** The Locations as a placement's selector sees them. */
  private labelled(): LabelledLocation[] {
    return this.locations.list().map((l) => ({ city: l.spec.cityCode, labels: l.metadata.labels ?? {} }));
  }

  /** The cells as the decisions see them (CellView), each with its cluster's WorkloadDeployments while engaged. */
  private cellViews(): { views: Map<string, CellView>; cluster: Map<string, string> } {
    const views = new Map<string, CellView>();
    const cluster = new Map<string, string>();
    for (const c of this.cells.list()) {
      const name = clusterNameOf(c.metadata.name!);
      const there = name ? this.inCells.get(name) : undefined;
      const listed = !!there && there.informer.hasSynced() && there.others.hasSynced();
      views.set(c.metadata.name!, cellView(c, listed));
      if (name) cluster.set(c.metadata.name!, name);
    }
    return { views, cluster };
  }

  /** The copy in `cell` is `w`'s own (ownCopy), not another plane's. */
  private own(d: DeploymentObject, w: WorkloadObject, plane: string | undefined, cell: string): boolean {
    return ownCopy(d, w, this.writer(plane, cell));
  }

  /** The WorkloadDeployments of `w`'s name in `cell` (of `cluster`) that are its own. */
  private copies(
    w: WorkloadObject,
    plane: string | undefined,
    cell: string,
    cluster: string,
  ): DeploymentObject[] {
    return (this.inCells.get(cluster)?.informer.byIndex('workload', keyOf(w)) ?? []).filter((d) =>
      this.own(d, w, plane, cell),
    );
  }

  /**
   * Places the workload: each wanted WorkloadDeployment applied in its cell, those no longer wanted
   * drained, namespaces Berth made and nothing maps to any more pruned, and the status rolled up.
   */
  private async apply(w: WorkloadObject, plane: string | undefined): Promise<Result | void> {
    const pass = this.passOf(w, plane);
    await this.writeDeployments(pass);
    const draining = await this.drainUnwanted(pass);
    await this.pruneNamespaces(w.metadata.namespace!, plane, pass, pass.failures);
    const written = await this.writeRollup(pass, draining);
    if (pass.failures.length) throw new Error(pass.failures.join('; '));
    // A soak that ends, a deadline or a failover time that passes changes nothing in the cells:
    // wake up for it.
    const wakeups = [
      ...(pass.turn.requeueAfterMs !== undefined ? [pass.turn.requeueAfterMs] : []),
      ...(typeof written === 'number' ? [written] : []),
      ...pass.wanted.flatMap((t) => (t.failoverAt !== undefined ? [t.failoverAt - pass.now] : [])),
      ...(pass.held ? [HELD_RETRY_MS] : []),
    ];
    if (wakeups.length) return { requeueAfterMs: Math.max(0, Math.min(...wakeups)) };
  }

  /** What the caches show of the workload in the cells, where it is wanted, and its rollout's turn. */
  private passOf(w: WorkloadObject, plane: string | undefined): Pass {
    const { views, cluster } = this.cellViews();
    const placed: Placed[] = [...cluster].flatMap(([cell, name]) =>
      this.copies(w, plane, cell, name).map((object) => ({ cell, object })),
    );
    const locations = new Set(this.locations.list().map((l) => l.spec.cityCode));
    const now = Date.now();
    const wanted = targets(w, locations, [...views.values()], placed, this.labelled(), now);
    const hash = templateHash(w.spec.template);
    const deploymentsIn = (cell: string) => this.inCells.get(cluster.get(cell) ?? '');
    const named = (cell: string, name: string) =>
      deploymentsIn(cell)?.informer.get(`${w.metadata.namespace}/${name}`);
    // Only its own copy counts: another's of the same name is neither its status nor its to drain.
    const find = (cell: string, name: string) => {
      const d = named(cell, name);
      return d && this.own(d, w, plane, cell) ? d : undefined;
    };
    const turn = rolloutTurn({
      rollout: w.spec.rollout,
      template: w.spec.template,
      hash,
      targets: wanted,
      deployment: (t) => find(t.cell!, t.name),
      previous: this.statusOf(w)?.rollout,
      now,
    });
    const taken = (cell: string, name: string) =>
      named(cell, name) ?? deploymentsIn(cell)?.others.get(`${w.metadata.namespace}/${name}`);
    const key = keyOf(w);
    return {
      w,
      key,
      plane,
      views,
      cluster,
      placed,
      wanted,
      hash,
      turn,
      now,
      find,
      taken,
      failures: [],
      refused: new Map(),
      held: false,
    };
  }

  /** Each cell's WorkloadDeployment written at once, not one cell after the other. */
  private async writeDeployments(pass: Pass): Promise<void> {
    await Promise.all(pass.wanted.map((t) => this.writeDeployment(pass, t)));
  }

  /** Applies the WorkloadDeployment of `t` in its cell, unless it says so already or the name is taken. */
  private async writeDeployment(pass: Pass, t: Target): Promise<void> {
    const { w, views, cluster } = pass;
    // An unreachable cell keeps what it has; it is written again once it answers.
    const applied = pass.turn.applied.get(t.name);
    if (!t.cell || !applied || !views.get(t.cell)!.reachable) return;
    const writer = this.writer(pass.plane, t.cell);
    const taken = pass.taken(t.cell, t.name);
    const holder = taken && heldBy(taken, w, writer);
    // Its deletion brings this Workload back (heldNames), and any Workload its labels name.
    if (holder) return this.nameTaken(pass, t.cell, t.name, holder);
    const manifest = deploymentManifest(w, t, applied, writer);
    const have = pass.find(t.cell, t.name);
    if (have && !have.metadata.deletionTimestamp && sameDeployment(have, manifest)) return;
    const name = cluster.get(t.cell)!;
    const creates = views.get(t.cell)!.createNamespaces;
    const failed = await inCell(pass.failures, t.cell, async () => {
      if (creates) await this.ensureNamespace(name, w.metadata.namespace!, writer);
      if (!(await this.applyDeployment(pass, t, name, manifest, { have, creates }))) return;
      this.log.info(
        {
          workload: pass.key,
          cell: t.cell,
          deployment: t.name,
          ...(t.failedOverFrom ? { from: t.failedOverFrom } : {}),
        },
        t.failedOverFrom
          ? 'WorkloadDeployment applied: failed over from an unreachable cell'
          : 'WorkloadDeployment applied',
      );
    });
    if (failed) pass.refused.set(t.name, { reason: 'CellRefused', message: failed });
  }

  /**
   * Applies `manifest` in `cluster`, the cell of `t`; false where a name taken meanwhile refused it
   * (nameTaken). A missing namespace or another refusal is thrown for the cell's failures.
   */
  private async applyDeployment(
    pass: Pass,
    t: Target,
    cluster: string,
    manifest: DeploymentObject,
    { have, creates }: { have: DeploymentObject | undefined; creates: boolean },
  ): Promise<boolean> {
    const namespace = pass.w.metadata.namespace!;
    try {
      await this.manager.client(cluster).apply(WorkloadDeployment.ref, manifest, {
        fieldManager: FEDERATION_MANAGER,
        // Forced over its own copy only (an edit in the cell is taken back). Where its watches
        // show nothing, an object of that name made a moment ago by someone else answers with
        // a conflict over fields that differ instead of being written over.
        force: have !== undefined,
      });
      federationMetrics.deploymentWrites.inc({ cluster, write: 'apply' });
      return true;
    } catch (e) {
      // The namespace went meanwhile: made again on the retry.
      if (isNotFound(e)) this.inCells.get(cluster)?.namespaces.delete(namespace);
      if (isNotFound(e) && !creates)
        throw new Error(
          `namespace ${namespace} does not exist in the cell, and its Cell does not let Berth create it (spec.createNamespaces): create it there`,
          { cause: e },
        );
      if (!have && isConflict(e)) {
        this.nameTaken(pass, t.cell!, t.name, `not a Workload's copy (${errorText(e)})`);
        return false;
      }
      throw e;
    }
  }

  /**
   * A name another's copy holds in a cell (heldBy), or an object made there by hand: not written
   * over, and looked at again once it goes (heldNames) or later (HELD_RETRY_MS).
   */
  private nameTaken(pass: Pass, cell: string, name: string, whose: string): void {
    const { w } = pass;
    const at = `${pass.cluster.get(cell)}/${w.metadata.namespace}/${name}`;
    this.heldNames.set(at, new Set(this.heldNames.get(at)).add(pass.key));
    pass.refused.set(name, {
      reason: 'NameTaken',
      message: `the WorkloadDeployment ${w.metadata.namespace}/${name} there is ${whose}, which Berth leaves alone: rename the Workload or its placement, or delete it`,
    });
    pass.held = true;
  }

  /**
   * Deletes the copies no longer wanted, each once the targets that replace it serve (drain after
   * ready: a city removed from a placement serves until the placement's cities do); those still
   * running, and why.
   */
  private async drainUnwanted(pass: Pass): Promise<Drain[]> {
    const { wanted, views, cluster } = pass;
    const reachableListed = new Set(
      [...views.values()].filter((v) => v.listed && v.reachable).map((v) => v.name),
    );
    const { remove, draining } = drains(wanted, unwanted(wanted, pass.placed, reachableListed), (t) =>
      serves(t.cell ? pass.find(t.cell, t.name) : undefined),
    );
    for (const d of remove) {
      if (d.object.metadata.deletionTimestamp) continue;
      const failed = await inCell(pass.failures, d.cell, async () => {
        await this.deleteDeployment(cluster.get(d.cell)!, d.object);
        this.log.info(
          { workload: pass.key, cell: d.cell, deployment: d.object.metadata.name },
          'WorkloadDeployment no longer placed there: deleted',
        );
      });
      // Still running there: the status says so, and why, until it goes.
      if (failed) draining.push(drainOf(d, failed));
    }
    return draining;
  }

  /**
   * The workload's status rolled up from its copies, written when it changed (writeStatus), with a
   * Warning event for a condition newly fixable by its owner.
   */
  private async writeRollup(pass: Pass, draining: Drain[]): Promise<boolean | number> {
    const { w, key, turn } = pass;
    const r = rollup(w, pass.wanted, pass.hash, pass.views, pass.find, BLOCKING_REASONS, {
      applied: turn.applied,
      draining,
      refused: pass.refused,
      ...(turn.progressing ? { progressing: turn.progressing } : {}),
    });
    const was = this.statusOf(w)?.conditions;
    let conditions: Condition[] = was ?? [];
    const generation = w.metadata.generation;
    for (const [type, v] of [
      ['Available', r.available],
      ['Progressing', r.progressing],
    ] as const)
      conditions = setCondition(conditions, {
        type,
        ...v,
        ...(generation !== undefined ? { observedGeneration: generation } : {}),
      });
    // The deletion hold is only for a workload being deleted.
    conditions = conditions.filter((c) => c.type !== 'Released');
    const status: WorkloadStatus = {
      ...(generation !== undefined ? { observedGeneration: generation } : {}),
      ...r.status,
      ...(turn.status ? { rollout: turn.status } : {}),
      conditions,
    };
    const written = await this.writeStatus(w, status);
    if (written !== true) return written;
    const fixable = newlyHolds(was, conditions, 'Available', 'False');
    if (fixable && WORKLOAD_FIXABLE.has(fixable.reason)) {
      this.events.event(w, 'Warning', fixable.reason, 'Place', fixable.message);
      this.log.warn({ workload: key, reason: fixable.reason }, fixable.message);
    }
    // Once per stop: its message changes as the cells' do.
    const stopped = newlyHolds(was, conditions, 'Progressing', 'False', 'RolloutStopped');
    if (stopped && findCondition(was, 'Progressing')?.reason !== 'RolloutStopped') {
      this.events.event(w, 'Warning', stopped.reason, 'Rollout', stopped.message);
      this.log.warn({ workload: key, reason: stopped.reason }, stopped.message);
    }
    return written;
  }

  /**
   * Deletes the workload's WorkloadDeployments in every cell; 'released' once none is left. A cell
   * that may hold one it cannot delete now (unreachable, or not listed) holds the workload, and a
   * Released=False condition says so (deletionHold).
   */
  private async cleanup(w: WorkloadObject, plane: string | undefined): Promise<Result | 'released'> {
    const { views, cluster } = this.cellViews();
    const there = (cell: string) => this.copies(w, plane, cell, cluster.get(cell) ?? '');
    const current = this.statusOf(w);
    const hold = deletionHold(w, current, [...views.values()], (c) => there(c).length, this.labelled());
    const failures: string[] = [];
    let left = 0;
    for (const [cell, name] of cluster) {
      const view = views.get(cell)!;
      if (!view.listed || !view.reachable) continue;
      const ds = there(cell);
      left += ds.length;
      for (const d of ds)
        if (!d.metadata.deletionTimestamp) await inCell(failures, cell, () => this.deleteDeployment(name, d));
    }
    const notReleased = (reason: string, message: string) =>
      this.writeStatus(w, {
        ...current,
        conditions: setCondition(current?.conditions ?? [], {
          type: 'Released',
          status: 'False',
          reason,
          message,
        }),
      });
    if (failures.length) {
      // A cell that refuses the deletion (RBAC, an admission policy) holds the Workload: said where
      // its owner looks, once per answer, and tried again with backoff.
      const message = `its WorkloadDeployments could not all be deleted: ${failures.join('; ')}`;
      if ((await notReleased('CellRefused', message)) === true)
        this.events.event(w, 'Warning', 'CellRefused', 'Delete', message);
      throw new Error(failures.join('; '));
    }
    if (!hold && !left) return 'released';
    if (hold) await notReleased(hold.reason, hold.message);
    // A cell's deletions, its listing and its Cell's changes all bring this workload back.
    return {};
  }

  /**
   * A Workload gone from the (synced) cache whose WorkloadDeployments a cell still holds: one not
   * listed when the finalizer ran, or a finalizer taken off by hand. A cell's listing brings every
   * key it holds here; what this plane wrote through the cell (orphaned) is deleted, once the
   * apiserver confirms the Workload is gone: a cell's watch may show a new leader a copy before
   * the management plane's watch shows it the Workload. A cell listed but not reachable is
   * looked at again later, as its Cell's change brings only the workloads that exist.
   */
  private async sweep(key: string, plane: string | undefined): Promise<Result | void> {
    const { views, cluster } = this.cellViews();
    const leftovers = [...cluster]
      .filter(([cell]) => views.get(cell)!.listed)
      .flatMap(([cell, name]) => {
        const cellObject = this.cells.get(cell);
        const there = this.inCells.get(name)?.informer.byIndex('workload', key) ?? [];
        return orphaned(there, this.writer(plane, cell)).map((d) => ({ cell, name, cellObject, d }));
      });
    // The apiserver is asked only when there is something to delete now, not on every retry of a
    // cell that does not answer.
    const now = leftovers.filter(({ cell }) => views.get(cell)!.reachable);
    if (now.length) {
      // Only the apiserver's 404 says the Workload is gone (any uid).
      const [namespace, workload] = key.split('/') as [string, string];
      if (await exists(this.manager.client(), Workload.ref, workload, namespace)) return;
      const failures: string[] = [];
      for (const { cell, name, cellObject, d } of now)
        await inCell(failures, cell, async () => {
          await this.deleteDeployment(name, d);
          const message = `WorkloadDeployment ${d.metadata.namespace}/${d.metadata.name} deleted: its Workload ${key} is gone`;
          this.log.info({ workload: key, cell, deployment: d.metadata.name }, message);
          // The Workload is gone: the Cell it was left in says so.
          if (cellObject) this.events.event(cellObject, 'Normal', 'LeftoverDeleted', 'Delete', message);
        });
      if (failures.length) throw new Error(failures.join('; '));
    }
    const failures: string[] = [];
    await this.pruneNamespaces(key.split('/')[0]!, plane, { views, cluster }, failures);
    if (failures.length) throw new Error(failures.join('; '));
    if (now.length < leftovers.length) return { requeueAfterMs: SWEEP_RETRY_MS };
  }

  /**
   * Deletes `namespace` from the cells where this plane created it and nothing maps there any more
   * (namespaceToDelete), as the cache shows them: a WorkloadDeployment's deletion there brings its
   * Workload's key back, and with it this look.
   */
  private async pruneNamespaces(
    namespace: string,
    plane: string | undefined,
    { views, cluster }: ReturnType<FederationReconciler['cellViews']>,
    failures: string[],
  ): Promise<void> {
    const workloads = () =>
      this.workloads.byIndex('namespace', namespace).filter((w) => !w.metadata.deletionTimestamp).length;
    for (const [cell, name] of cluster) {
      const view = views.get(cell)!;
      const there = this.inCells.get(name);
      const ns = there?.created.get(namespace);
      if (!ns || !view.listed || !view.reachable) continue;
      const deployments =
        there!.informer.byIndex('namespace', namespace).length +
        there!.others.byIndex('namespace', namespace).length;
      const served = view.namespaces.includes(namespace);
      const o = { deployments, served, workloads: served ? workloads() : 0 };
      if (!namespaceToDelete(ns, this.writer(plane, cell), o)) continue;
      await inCell(failures, cell, async () => {
        await deleteExact(this.manager.client(name), Resources.namespaces, ns);
        there!.namespaces.delete(namespace);
        this.log.info(
          { cluster: name, namespace },
          'namespace Berth created in the cell deleted: nothing maps there any more',
        );
      });
    }
  }

  private async deleteDeployment(cluster: string, d: DeploymentObject): Promise<void> {
    // Only the object the cache showed: one recreated meanwhile is not ours to judge yet.
    if (await deleteExact(this.manager.client(cluster), WorkloadDeployment.ref, d))
      federationMetrics.deploymentWrites.inc({ cluster, write: 'delete' });
  }

  /** Creates the namespace in the cell, marked as Berth's (its Cell allows it), unless it exists. */
  private async ensureNamespace(cluster: string, namespace: string, writer: Writer): Promise<void> {
    const known = this.inCells.get(cluster)!.namespaces;
    if (known.has(namespace)) return;
    const client = this.manager.client(cluster);
    try {
      await client.create(Resources.namespaces, namespaceManifest(namespace, writer));
      this.log.info({ cluster, namespace }, 'namespace created in the cell');
    } catch (e) {
      if (isForbidden(e)) {
        // A cell kubeconfig scoped to some namespaces may not create any (or an admission policy
        // refuses it); the namespace may be there all the same. One it may not even read is left
        // to the apply to judge.
        const exists = await client.get(Resources.namespaces, namespace).then(
          () => true,
          (g: unknown) => !isNotFound(g),
        );
        if (!exists)
          throw new Error(
            `namespace ${namespace} does not exist in the cell, and creating it was refused (${errorText(e)}): create it there`,
            { cause: e },
          );
      } else if (!isConflict(e)) throw e;
    }
    known.add(namespace);
  }

  /**
   * The status as last written: until the cache shows a write, it still holds the status before it,
   * and a reconcile comparing with that would skip a status equal to it, leaving the write in force.
   */
  private statusOf(w: WorkloadObject): WorkloadStatus | undefined {
    return this.statusSent.pending(w) ?? w.status;
  }

  /**
   * Writes the status when it changed from the last written; whether it wrote, or in how many
   * milliseconds a change of counts only may be written (its write spacing).
   */
  private async writeStatus(w: WorkloadObject, status: WorkloadStatus): Promise<boolean | number> {
    const { conditions, ...rest } = status;
    const last = this.statusOf(w);
    const { conditions: was, ...old } = last ?? {};
    if (isDeepStrictEqual(rest, old) && sameConditions(was, conditions)) return false;
    const key = keyOf(w);
    const ramping = (last?.readyReplicas ?? 0) < (last?.desiredReplicas ?? 0);
    const wait = this.statusSpacing.wait(
      key,
      Date.now(),
      ramping ? RAMP_WRITE_INTERVAL_MS : STATUS_WRITE_INTERVAL_MS,
    );
    if (wait > 0 && countsOnly(last, status)) return wait;
    try {
      const written = await applyStatus(this.manager.client(), Workload.ref, w, status, FEDERATION_MANAGER);
      this.statusSent.expect(key, written.metadata?.resourceVersion, status);
      this.statusSpacing.wrote(key);
      return true;
    } catch (e) {
      if (isObjectGone(e)) return false;
      throw e;
    }
  }
}

/**
 * Runs a write in one cell; a failure (a cell not yet found unreachable) is collected, so that the
 * other cells are still written, and the reconcile, retried, names it. The failure is returned too.
 */
async function inCell(
  failures: string[],
  cell: string,
  write: () => Promise<void>,
): Promise<string | undefined> {
  try {
    await write();
    return undefined;
  } catch (e) {
    failures.push(`cell ${cell}: ${errorText(e)}`);
    return errorText(e);
  }
}

/**
 * Whether the cell's WorkloadDeployment already says what federation would apply: every field it
 * applies, the template whole (a hand edit in the cell is taken back, not counted as rolled out).
 */
function sameDeployment(have: DeploymentObject, want: DeploymentObject): boolean {
  const labels = want.metadata!.labels!;
  return (
    Object.entries(labels).every(([k, v]) => have.metadata.labels?.[k] === v) &&
    have.spec.workloadRef?.templateHash === want.spec.workloadRef?.templateHash &&
    have.spec.workloadRef?.uid === want.spec.workloadRef?.uid &&
    have.spec.replicas === want.spec.replicas &&
    have.spec.placement === want.spec.placement &&
    have.spec.instanceManagementPolicy === want.spec.instanceManagementPolicy &&
    have.spec.progressDeadlineSeconds === want.spec.progressDeadlineSeconds &&
    isDeepStrictEqual(have.spec.template, want.spec.template)
  );
}
