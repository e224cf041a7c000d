// The cell controller: probes each cell on a period (GET /version, Berth's discovery document and,
// now and then, what its credentials may do; within a bounded timeout) through the cluster the provider engaged it as, derives its Reachable
// and Ready conditions from the history of probes (decide.ts), writes its status only when it
// changes, and announces a lost cell or one that cannot take workloads (Warning) and a recovered one
// (Normal) with an event and a log line.
import { escapeControl, QUOTE_MAX } from '../../policy/text.ts';
import { changed, deletionChanged, generationChanged } from '../../policy/predicates.ts';
import { keyOf, type Informer } from '../../runtime/cache/informer.ts';
import { applyStatus, isObjectGone } from '../../runtime/client/apply.ts';
import { isNotFound, type KubeClient, type RequestOptions } from '../../runtime/client/client.ts';
import { deniedVerbs } from '../../runtime/client/restmapper.ts';
import { Controller, type Result } from '../../runtime/controller/controller.ts';
import type { Trigger } from '../../runtime/controller/trigger.ts';
import type { EventRecorder } from '../../runtime/events/recorder.ts';
import type { Manager } from '../../runtime/manager/manager.ts';
import type { Logger } from '../../runtime/observability/log.ts';
import { POLICY_GROUP } from '../../policy/kinds.ts';
import {
  accessDue,
  cellAccess,
  cellEvents,
  cellStatus,
  crdsServed,
  historyOf,
  observe,
  probeFailure,
  READY_PROBLEMS,
  statusChanged,
  type CellAccess,
  type History,
  type Probe,
} from '../decide.ts';
import type { CellProvider } from '../provider.ts';
import { cellMetrics, forgetCell } from '../metrics.ts';
import { CELLS_MANAGER, type CellObject, type CellTiming } from '../types.ts';
import { Cell } from '../crd.ts';

/**
 * One probe of a cell's apiserver: its version, whether it serves Berth's cell kinds and, given
 * `access` (cellAccess) where it does, what of it its credentials may not do (SelfSubjectAccessReviews).
 */
export async function probeCell(
  client: KubeClient,
  timeoutMs: number,
  access?: readonly CellAccess[],
): Promise<Probe> {
  const signal = AbortSignal.timeout(timeoutMs);
  const opts = { signal, idleTimeoutMs: timeoutMs };
  try {
    const version = await client.request<{ gitVersion?: string }>('GET', '/version', opts);
    const discovery = await client
      .request('GET', `/apis/${POLICY_GROUP}/v1alpha1`, opts)
      .catch((e: unknown) => (isNotFound(e) ? undefined : Promise.reject(e)));
    const crdsInstalled = crdsServed(discovery);
    const denied = access && crdsInstalled ? await deniedAccess(client, access, opts) : undefined;
    return {
      ok: true,
      at: Date.now(),
      // The cell's own words, kept in the Cell's status and printed by `berth cells`: bounded, escaped.
      version:
        typeof version.gitVersion === 'string' ? escapeControl(version.gitVersion, QUOTE_MAX) : 'unknown',
      crdsInstalled,
      ...(denied ? { denied } : {}),
    };
  } catch (e) {
    return {
      ok: false,
      at: Date.now(),
      ...probeFailure(signal.aborted ? new Error(`no answer within ${timeoutMs} ms`) : e),
    };
  }
}

/**
 * What of `access` the client's user may not do, as "verb resource"; undefined when the cell
 * does not say (the reviews refused, failed or late): unknown is not denied, and a cell that has
 * just answered the probe is no less reachable for it.
 */
async function deniedAccess(
  client: KubeClient,
  access: readonly CellAccess[],
  opts: RequestOptions,
): Promise<string[] | undefined> {
  try {
    const denied = await Promise.all(
      access.map(async ({ group, resource, verbs }) =>
        (await deniedVerbs(client, { group, resource }, verbs, undefined, opts)).map(
          (verb) => `${verb} ${resource}`,
        ),
      ),
    );
    return denied.flat();
  } catch {
    return undefined;
  }
}

/**
 * The cells controller: builds the reconciler, watches the Cells and `probes` (the cells the
 * provider engaged, engaged again or gave up on: probed now), and runs it on the manager.
 */
export function setupCellReconciler(
  manager: Manager,
  o: {
    cells: Informer<CellObject>;
    provider: CellProvider;
    timing: CellTiming;
    log: Logger;
    probes: Trigger;
  },
): Controller {
  const controller = new Controller({
    name: 'cells',
    workers: 4,
    logger: o.log,
    reconciler: new CellReconciler(manager, o),
  })
    .watch(o.cells, keyOf, { update: changed(generationChanged, deletionChanged) })
    .reconcileOn(o.probes);
  manager.add(controller);
  return controller;
}

export class CellReconciler {
  private readonly manager: Manager;
  private readonly cells: Informer<CellObject>;
  private readonly provider: CellProvider;
  private readonly timing: CellTiming;
  private readonly events: EventRecorder;
  private readonly log: Logger;
  private readonly history = new Map<string, History>();

  constructor(
    manager: Manager,
    o: { cells: Informer<CellObject>; provider: CellProvider; timing: CellTiming; log: Logger },
  ) {
    this.manager = manager;
    this.cells = o.cells;
    this.provider = o.provider;
    this.timing = o.timing;
    this.log = o.log;
    this.events = manager.recorder('cells');
    this.cells.addEventHandler({
      onDelete: (c) => {
        this.history.delete(c.metadata.name!);
        forgetCell(c.metadata.name!);
      },
    });
  }

  async reconcile(name: string): Promise<Result | void> {
    const cell = this.cells.get(name);
    if (!cell || cell.metadata.deletionTimestamp) return;
    const access = this.provider.access(name);
    // Not looked at yet: the provider asks for this cell once it has.
    if (!access) return;
    const before = this.history.get(name) ?? historyOf(cell.status);
    let probe: Probe;
    if ('failure' in access) probe = { ok: false, at: Date.now(), ...access.failure };
    else {
      // Disengaged since access() answered: the provider asks for this cell again.
      if (!this.manager.clusterNames.includes(access.cluster)) return;
      const needed = accessDue(before, Date.now(), this.timing) ? cellAccess : undefined;
      const took = cellMetrics.probe.startTimer({ cell: name });
      probe = await probeCell(this.manager.client(access.cluster), this.timing.probeTimeoutMs, needed);
      took();
    }
    const history = observe(before, probe);
    this.history.set(name, history);
    const now = Date.now();
    const refused = this.provider.refused(name);
    const next = cellStatus(cell, refused ? { ...history, refused } : history, now, this.timing);
    const reachable = next.conditions?.find((c) => c.type === 'Reachable')?.status === 'True';
    cellMetrics.reachable.set({ cell: name }, reachable ? 1 : 0);
    if (statusChanged(cell.status, next)) {
      try {
        await applyStatus(this.manager.client(), Cell.ref, cell, next, CELLS_MANAGER);
      } catch (e) {
        if (isObjectGone(e)) return;
        throw e;
      }
      for (const ev of cellEvents(cell.status?.conditions, next.conditions ?? [])) {
        this.events.event(cell, ev.type, ev.reason, 'Probe', ev.message);
        const line = { cell: name, reason: ev.reason, problem: ev.message };
        if (ev.type === 'Normal') this.log.info(line, 'cell reachable again');
        else
          this.log.warn(
            line,
            READY_PROBLEMS.includes(ev.reason) ? 'cell cannot take workloads' : 'cell not reachable',
          );
      }
    }
    return { requeueAfterMs: this.timing.probePeriodMs };
  }
}
