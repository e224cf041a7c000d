// The page's data, read from the manager's informer caches only: the nodes and pods informers the
// capabilities share (same transforms, so the same informers), one per kind of policy, and one of
// Warning events. A change marks its section dirty; listeners hear of the dirty sections at once
// when the last announcement is `coalesceMs` old, else when it will be (so a burst is announced at
// most every `coalesceMs`, and a lone change without waiting), and only of the sections whose
// snapshot really changed (a node's heartbeat changes nothing the page shows).
import type { Informer } from '../runtime/cache/informer.ts';
import type { CustomResource } from '../runtime/api/crd.ts';
import { Resources, type KubeObject } from '../runtime/api/meta.ts';
import type { Manager } from '../runtime/manager/manager.ts';
import {
  interning,
  nodeInformer,
  podInformer,
  podsOn,
  slimMetadata,
  type SlimNode,
  type SlimPod,
} from '../policy/slim.ts';
import { parseGates } from '../gates/decide/parse.ts';
import { NodeStartupGate } from '../gates/types.ts';
import { compileRule } from '../labels/decide/nodes.ts';
import { NodeLabelRule, type Rule } from '../labels/types.ts';
import { FAILURE_ANNOTATION, SCHEDULING_GATE, STATE_LABEL } from '../arch/types.ts';
import { DEPLOYMENT_LABEL, Instance, QUOTA_GATE, WorkloadDeployment } from '../workloads/types.ts';
import { INSTANCE_CACHE } from '../workloads/decide/instances.ts';
import { Cell, Location } from '../cells/types.ts';
import { Workload } from '../federation/types.ts';
import {
  cityRows,
  heldPods,
  nodeRow,
  policyRow,
  queryNodes,
  warningEvents,
  workloadRow,
  type EventLike,
} from './view.ts';
import type {
  NodePage,
  NodeQuery,
  NodeRow,
  PoliciesSnapshot,
  PodsSnapshot,
  PolicyRow,
  WorkloadsSnapshot,
} from './types.ts';

export type Section = 'nodes' | 'policies' | 'pods' | 'workloads';

export interface UiStateOptions {
  /** The policy kinds to show (the enabled capabilities' CRDs). */
  kinds: CustomResource[];
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
  private readonly kinds: { cr: CustomResource; informer: Informer<KubeObject> }[];
  private readonly gates: (() => ReturnType<typeof parseGates>) | undefined;
  private readonly rules: (() => Rule[]) | undefined;
  private readonly instances: Informer<KubeObject> | undefined;
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
    // Instances as the workloads controllers cache them (slim, mirrors left out): one cache for both.
    this.kinds = opts.kinds.map((cr) => ({
      cr,
      informer: manager.informer<KubeObject>(cr.ref, cr === Instance ? INSTANCE_CACHE : {}),
    }));
    this.gates = this.informerOf(NodeStartupGate)?.derive(parseGates);
    this.rules = this.informerOf(NodeLabelRule)?.derive((objs) =>
      objs.flatMap(
        (o) =>
          compileRule({ ...o, apiVersion: NodeLabelRule.apiVersion, kind: NodeLabelRule.kind }).rule ?? [],
      ),
    );
    this.instances = this.informerOf(Instance);
    this.instances?.addIndexer('ui-deployment', (i) => {
      const d = i.metadata?.labels?.[DEPLOYMENT_LABEL];
      return d ? [`${i.metadata?.namespace}/${d}`] : [];
    });
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
    const gated = () => (this.gates?.().gates.length ?? 0) > 0;
    on(
      this.pods as unknown as Informer<KubeObject>,
      () => (gated() ? ['pods', 'workloads', 'nodes'] : ['pods', 'workloads']),
      gated,
    );
    on(this.events, () => ['policies']);
    for (const { cr, informer } of this.kinds) {
      const sections: Section[] =
        cr === WorkloadDeployment || cr === Instance
          ? ['workloads', 'policies', 'pods']
          : cr === Cell || cr === Location || cr === Workload
            ? ['workloads', 'policies']
            : ['policies', 'nodes', 'pods'];
      on(
        informer,
        () => sections,
        () => sections.includes('nodes'),
      );
    }
  }

  /** The informer of a policy kind the page shows; undefined when its capability is off. */
  private informerOf(cr: CustomResource): Informer<KubeObject> | undefined {
    return this.kinds.find((k) => k.cr.kind === cr.kind)?.informer;
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
    const gates = this.gates?.().gates.filter((g) => g.enforced || g.spec.dryRun) ?? [];
    const inputs = {
      gates,
      rules: this.rules?.() ?? [],
      poolLabels: this.poolLabels,
      podsOn: (name: string) => podsOn(this.pods, name),
      now: Date.now(),
    };
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
    for (const { cr, informer } of this.kinds) {
      if (informer.crdMissing) missing.push(cr.kind);
      if (cr === Instance) continue; // shown under their WorkloadDeployment
      for (const o of informer.list()) policies.push(policyRow(cr.kind, o));
    }
    return {
      policies,
      missing,
      events: warningEvents(this.events.list() as EventLike[], Date.now(), HOUR_MS, MAX_EVENTS),
    };
  }

  heldPods(): PodsSnapshot {
    const instance = (p: SlimPod) =>
      this.instances?.get(`${p.metadata?.namespace}/${p.metadata?.name}`) as
        { status?: { conditions?: { type: string; reason?: string; message?: string }[] } } | undefined;
    const pods = heldPods(
      this.pods.list().filter((p) => p.spec.schedulingGates?.length),
      {
        [SCHEDULING_GATE]: (p) => {
          const failure = p.metadata?.annotations?.[FAILURE_ANNOTATION];
          return `architecture-aware placement: reading its images' platforms (${p.metadata?.labels?.[STATE_LABEL] ?? 'Gated'})${failure ? `; ${failure}` : ''}`;
        },
        [QUOTA_GATE]: (p) => {
          const q = instance(p)?.status?.conditions?.find((c) => c.type === 'QuotaGranted');
          return `quota: ${q ? `${q.reason ?? ''}${q.message ? `: ${q.message}` : ''}` : 'waiting for the quota controller'}`;
        },
      },
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
    const wd = this.informerOf(WorkloadDeployment);
    const workloads = (wd?.list() ?? []).map((d) =>
      workloadRow(
        d,
        this.instances?.byIndex('ui-deployment', `${d.metadata?.namespace}/${d.metadata?.name}`) ?? [],
      ),
    );
    const list = (cr: CustomResource) => this.informerOf(cr)?.list() ?? [];
    return {
      workloads,
      cities: cityRows(list(Cell), list(Location), list(Workload)),
      // Mirrors of the cells' instances (a management plane's), which run in the cells, are not cached.
      localInstances: this.instances?.list().length ?? 0,
    };
  }
}
