// The page's data, read from the manager's informer caches only: the nodes and pods informers the
// capabilities share (same transforms, so the same informers), one per kind of policy, and one of
// Warning events. A change marks its section dirty; listeners hear of the dirty sections at once
// when the last announcement is `coalesceMs` old, else when it will be (so a burst is announced at
// most every `coalesceMs`, and a lone change without waiting), and only of the sections whose
// snapshot really changed (a node's heartbeat changes nothing the page shows).
import type { Capability, PageHooks, PageKind, PageSection, PageView } from '../capability.ts';
import type { Informer } from '../runtime/cache/informer.ts';
import { Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import { interning } from '../policy/intern.ts';
import {
  nodeInformer,
  podInformer,
  podsOn,
  slimMetadata,
  type SlimNode,
  type SlimPod,
} from '../policy/slim.ts';
import { policyRow } from '../policy/view.ts';
import { heldPods, nodeRow, queryNodes, warningEvents, type EventLike } from './view.ts';
import type {
  CellWorkload,
  NodePage,
  NodeQuery,
  NodeRow,
  PoliciesSnapshot,
  PodsSnapshot,
  PolicyRow,
  WorkloadsSnapshot,
} from './types.ts';

export type Section = PageSection;

export interface UiStateOptions {
  /** The capabilities whose policies and views the page shows (the enabled ones). */
  capabilities: Capability[];
  /** Their page hooks, loaded (capabilityPages), by capability name. */
  pages: Map<string, PageHooks>;
  poolLabels: string[];
  /** How long changes gather before listeners hear of them. */
  coalesceMs?: number;
}

/** An event with only what the page shows. */
const slimEvent = (o: KubeObject): KubeObject => {
  const e = o as EventLike;
  return {
    apiVersion: e.apiVersion,
    kind: e.kind,
    metadata: { ...slimMetadata(e.metadata), creationTimestamp: e.metadata?.creationTimestamp },
    eventTime: e.eventTime,
    deprecatedLastTimestamp: e.deprecatedLastTimestamp,
    series: e.series,
    reason: e.reason,
    note: e.note,
    type: e.type,
    reportingController: e.reportingController,
    regarding: e.regarding && {
      kind: e.regarding.kind,
      namespace: e.regarding.namespace,
      name: e.regarding.name,
    },
  } as EventLike;
};

const HOUR_MS = 3_600_000;
const MAX_EVENTS = 200;

export class UiState {
  private readonly nodes: Informer<SlimNode>;
  private readonly pods: Informer<SlimPod>;
  private readonly events: Informer<KubeObject>;
  private readonly kinds: { ref: ResourceRef; page: PageKind; informer: Informer<KubeObject> }[];
  /** The capabilities' views, in the capabilities' order. */
  private readonly views: PageView[];
  private readonly poolLabels: string[];
  private readonly coalesceMs: number;
  private readonly listeners = new Set<(sections: Section[]) => void>();
  private readonly dirty = new Set<Section>();
  /** The JSON each section was last announced with: a section is announced only when it changes. */
  private readonly announced = new Map<Section, string>();
  private timer: NodeJS.Timeout | undefined;
  /** When listeners were last told (0: never). */
  private flushedAt = 0;
  /** The node rows, until a change that may alter one. */
  private rows: NodeRow[] | undefined;
  /** Bumped by a change that may alter every row (a gate, a rule, a pod while gates exist). */
  private epoch = 0;
  /**
   * Each node object's row, computed once per epoch: an update replaces the cached object, so
   * only the nodes that changed are computed again, not 5,000 rows for one node's heartbeat.
   */
  private readonly rowOf = new WeakMap<SlimNode, { epoch: number; row: NodeRow; json: string }>();
  /** Each node's row as last computed, to tell whether the rows really changed. */
  private readonly rowJson = new Map<string, string>();
  private nodesChanged = false;

  constructor(manager: Manager, opts: UiStateOptions) {
    this.poolLabels = opts.poolLabels;
    this.coalesceMs = opts.coalesceMs ?? 100;
    this.nodes = nodeInformer(manager);
    this.pods = podInformer(manager);
    this.events = manager.informer(Resources.events, {
      fieldSelector: 'type=Warning',
      transform: interning('ui-event', slimEvent),
    });
    // A kind is cached as its capability says (Instances as the workloads controllers cache them:
    // one cache for both), else as the API gives it.
    this.kinds = opts.capabilities.flatMap((c) =>
      c.kinds.map((ref) => {
        const page = opts.pages.get(c.name)?.kinds?.[ref.kind] ?? {};
        return { ref, page, informer: manager.informer<KubeObject>(ref, page.cache ?? {}) };
      }),
    );
    const informerOf = (of: { kind: string }) => this.kinds.find((k) => k.ref.kind === of.kind)!.informer;
    const pods = this.pods;
    this.views = opts.capabilities.flatMap(
      (c) =>
        opts.pages.get(c.name)?.view({ informer: informerOf, podsOn: (node) => podsOn(pods, node) }) ?? [],
    );
    const on = (inf: Informer<KubeObject>, sections: () => Section[], everyRow = () => false) => {
      const mark = () => {
        if (everyRow()) this.epoch++;
        this.mark(sections());
      };
      inf.addEventHandler({ onAdd: mark, onUpdate: (a, b) => a !== b && mark(), onDelete: mark });
    };
    on(this.nodes as unknown as Informer<KubeObject>, () => ['nodes', 'pods']);
    // A node's row reads its pods only for the startup gates' requirements: without a gate, a pod's
    // change (the most frequent kind) leaves every row as it is.
    const gated = () => this.views.some((v) => v.readsPods?.());
    on(
      this.pods as unknown as Informer<KubeObject>,
      () => (gated() ? ['pods', 'workloads', 'nodes'] : ['pods', 'workloads']),
      gated,
    );
    on(this.events, () => ['policies']);
    for (const { page, informer } of this.kinds) {
      // A policy acts on nodes and pods: its change may alter every row.
      const sections = page.sections ?? ['policies', 'nodes', 'pods'];
      on(
        informer,
        () => sections,
        () => sections.includes('nodes'),
      );
    }
  }

  /** Every informer the page reads has listed once. */
  hasSynced(): boolean {
    return [this.nodes, this.pods, this.events, ...this.kinds.map((k) => k.informer)].every(
      (i) => i.hasSynced() || i.crdMissing,
    );
  }

  /** Calls `fn` with the sections that changed; returns the unsubscribe. */
  subscribe(fn: (sections: Section[]) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.listeners.clear();
  }

  private mark(sections: Section[]): void {
    for (const s of sections) this.dirty.add(s);
    if (sections.includes('nodes')) this.rows = undefined;
    // A timer of 0 still gathers the changes of this turn of the event loop into one announcement.
    this.timer ??= setTimeout(() => this.flush(), Math.max(0, this.flushedAt + this.coalesceMs - Date.now()));
  }

  private flush(): void {
    this.timer = undefined;
    this.flushedAt = Date.now();
    const changed: Section[] = [];
    for (const s of this.dirty) {
      if (s === 'nodes') {
        this.nodeRows();
        if (this.nodesChanged) changed.push(s);
        this.nodesChanged = false;
        continue;
      }
      const json = JSON.stringify(this.snapshot(s));
      if (this.announced.get(s) !== json) changed.push(s);
      this.announced.set(s, json);
    }
    this.dirty.clear();
    if (changed.length) for (const fn of this.listeners) fn(changed);
  }

  snapshot(s: Section): unknown {
    switch (s) {
      case 'nodes':
        return this.nodeRows();
      case 'policies':
        return this.policies();
      case 'pods':
        return this.heldPods();
      case 'workloads':
        return this.workloads();
    }
  }

  /** Every node's row, sorted by name; a row is computed again only when its node or the epoch changed. */
  nodeRows(): NodeRow[] {
    if (this.rows) return this.rows;
    const inputs = { views: this.views, poolLabels: this.poolLabels, now: Date.now() };
    const nodes = this.nodes.list();
    const rows = nodes.map((n) => {
      const cached = this.rowOf.get(n);
      if (cached?.epoch === this.epoch) return cached.row;
      const row = nodeRow(n, inputs);
      const json = JSON.stringify(row);
      this.rowOf.set(n, { epoch: this.epoch, row, json });
      if (this.rowJson.get(row.name) !== json) this.nodesChanged = true;
      this.rowJson.set(row.name, json);
      return row;
    });
    if (this.rowJson.size > rows.length) {
      const names = new Set(rows.map((r) => r.name));
      for (const name of this.rowJson.keys()) if (!names.has(name)) this.rowJson.delete(name);
      this.nodesChanged = true;
    }
    this.rows = rows.sort((a, b) => (a.name < b.name ? -1 : 1));
    return this.rows;
  }

  queryNodes(q: NodeQuery): NodePage {
    return queryNodes(this.nodeRows(), q);
  }

  policies(): PoliciesSnapshot {
    const policies: PolicyRow[] = [];
    const missing: string[] = [];
    for (const { ref, page, informer } of this.kinds) {
      if (informer.crdMissing) missing.push(ref.kind);
      if (page.unlisted) continue; // shown elsewhere on the page
      for (const o of informer.list()) policies.push(policyRow(ref.kind, o));
    }
    return {
      policies,
      missing,
      events: warningEvents(this.events.list() as EventLike[], Date.now(), HOUR_MS, MAX_EVENTS),
    };
  }

  heldPods(): PodsSnapshot {
    const reasons = Object.assign({}, ...this.views.map((v) => v.heldPods ?? {})) as Record<
      string,
      (p: SlimPod) => string
    >;
    const pods = heldPods(
      this.pods.list().filter((p) => p.spec.schedulingGates?.length),
      reasons,
    );
    const heldNodes = this.nodeRows()
      .filter((r) => r.held)
      .map((r) => ({
        name: r.name,
        // A held node without unmet requirements waits for something else (a gate before it, its
        // minimum hold): the decision's reason says what.
        waiting: r.gates
          .filter((g) => g.state === 'Held' || g.state === 'HeldTimedOut')
          .flatMap((g) => (g.waiting.length ? g.waiting : [g.why])),
      }));
    return { pods, heldNodes };
  }

  workloads(): WorkloadsSnapshot {
    const shares = new Map<string, CellWorkload[]>();
    for (const v of this.views)
      for (const [cell, s] of v.cellShares?.() ?? []) shares.set(cell, [...(shares.get(cell) ?? []), ...s]);
    return {
      workloads: this.views.flatMap((v) => v.workloads?.() ?? []),
      cities: this.views.flatMap((v) => v.cities?.(shares) ?? []),
      localInstances: this.views.reduce((n, v) => n + (v.localInstances?.() ?? 0), 0),
    };
  }
}
