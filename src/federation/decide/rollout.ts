// Progressive rollout across cells: which template each target's WorkloadDeployment runs now.
import { findCondition } from '../../runtime/api/conditions.ts';
import type { InstanceTemplate } from '../../workloads/types.ts';
import type { Rollout, RolloutCell, RolloutStatus } from '../types.ts';
import type { DeploymentObject, Target } from './placement.ts';
import { serves } from './copies.ts';
import type { Verdict } from './rollup.ts';

/** What a target's WorkloadDeployment runs: the Workload's template, or the old one it keeps until its turn in a rollout. */
export interface Applied {
  hash: string;
  template: InstanceTemplate;
}

/** How a target is named in a rollout's status: <placement>/<city>. */
export const rolloutName = (t: Pick<Target, 'placement' | 'city'>): string => `${t.placement}/${t.city}`;

export interface RolloutTurn {
  /** What each target's WorkloadDeployment runs, by target name (only targets with a cell, listed). */
  applied: Map<string, Applied>;
  /** Where a progressive rollout stands (absent for All). */
  status?: RolloutStatus;
  /** Progressing while a progressive rollout runs or stopped; otherwise the cells' rollup says. */
  progressing?: Verdict;
  /** When a soak ends or a deadline passes. */
  requeueAfterMs?: number;
}

/**
 * The rollout of the Workload's template across its targets. All: every target gets it. Progressive:
 * a target with no WorkloadDeployment yet gets it at once; one that runs another template keeps it
 * until its turn (placement order, then city order), when fewer than maxConcurrency started targets
 * are updating or soaking; none starts once more than maxFailures have failed. Derived from the
 * cells' WorkloadDeployments (their applied hash and conditions); what they cannot say (when a cell
 * started, when it became Available) comes from the previous status of the same template.
 */
export function rolloutTurn(p: RolloutInput): RolloutTurn {
  const current: Applied = { hash: p.hash, template: p.template };
  const placeable = p.targets.filter((t) => t.cell);
  if (p.rollout?.type !== 'Progressive') return { applied: new Map(placeable.map((t) => [t.name, current])) };
  return rolloutOutcome(p, p.rollout, takeTurns(p, p.rollout, placeable, current));
}

interface RolloutInput {
  rollout: Rollout | undefined;
  template: InstanceTemplate;
  hash: string;
  targets: readonly Target[];
  deployment: (t: Target) => DeploymentObject | undefined;
  previous: RolloutStatus | undefined;
  now: number;
}

/** Where each target of a progressive rollout stands (rolloutTurn), and who waits for a turn. */
interface Turns {
  applied: Map<string, Applied>;
  records: Map<string, RolloutCell>;
  failed: RolloutCell[];
  stopped: boolean;
  waiting: Target[];
  wakeups: number[];
  total: number;
}

/** Each target's turn: judged when started, started while turns are free, else waiting. */
function takeTurns(p: RolloutInput, cfg: Rollout, placeable: readonly Target[], current: Applied): Turns {
  const applied = new Map<string, Applied>();
  const nowIso = new Date(p.now).toISOString();
  const before = new Map(
    p.previous?.templateHash === p.hash ? (p.previous.cells ?? []).map((c) => [c.name, c]) : [],
  );
  const records = new Map<string, RolloutCell>();
  const pending: Target[] = [];
  const wakeups: number[] = [];
  for (const t of placeable) {
    const d = p.deployment(t);
    const old = d?.spec.workloadRef?.templateHash;
    if (d && old && old !== p.hash) {
      pending.push(t);
      applied.set(t.name, { hash: old, template: d.spec.template });
      continue;
    }
    applied.set(t.name, current);
    const cell = judge(t, d, before.get(rolloutName(t)), p.hash, cfg, p.now, nowIso);
    records.set(cell.name, cell);
    if (cell.state === 'Soaking') wakeups.push(Date.parse(cell.since) + cfg.minSuccessTime * 1000);
    if (cell.state === 'Updating' && cfg.progressDeadline !== undefined)
      wakeups.push(Date.parse(cell.since) + cfg.progressDeadline * 1000);
  }
  // A target whose cell is not known now (not listed yet after a restart or a new kubeconfig,
  // unreachable) keeps what it last was: a failure must not lift, nor a running turn free its
  // place, because the cell cannot say so for a moment.
  const unknown = p.targets.filter((t) => !t.cell && before.has(rolloutName(t)));
  for (const t of unknown) records.set(rolloutName(t), before.get(rolloutName(t))!);
  const all = [...records.values()];
  const failed = all.filter((c) => c.state === 'Failed');
  const stopped = failed.length > cfg.maxFailures;
  let active = all.filter((c) => c.state === 'Updating' || c.state === 'Soaking').length;
  const waiting: Target[] = [];
  for (const t of pending) {
    if (stopped || active >= cfg.maxConcurrency) {
      waiting.push(t);
      continue;
    }
    applied.set(t.name, current);
    // Started before, its cell not showing it yet: it keeps its start.
    const since = startedAt(before.get(rolloutName(t)), nowIso);
    records.set(rolloutName(t), { name: rolloutName(t), state: 'Updating', since });
    if (cfg.progressDeadline !== undefined) wakeups.push(Date.parse(since) + cfg.progressDeadline * 1000);
    active++;
  }
  return { applied, records, failed, stopped, waiting, wakeups, total: placeable.length + unknown.length };
}

/** The rollout's status, when to look again, and its Progressing verdict while it runs or stopped. */
function rolloutOutcome(p: RolloutInput, cfg: Rollout, turns: Turns): RolloutTurn {
  const { applied, records, failed, stopped, waiting, wakeups, total } = turns;
  const cells = p.targets.flatMap((t) => records.get(rolloutName(t)) ?? []);
  const updated = cells.filter((c) => c.state === 'Updated').length;
  const soaking = cells.filter((c) => c.state === 'Soaking');
  const soakingUntil = soaking.length
    ? new Date(Math.max(...soaking.map((c) => Date.parse(c.since) + cfg.minSuccessTime * 1000))).toISOString()
    : undefined;
  const status: RolloutStatus = {
    templateHash: p.hash,
    cells,
    updatedCells: updated,
    totalCells: total,
    ...(soakingUntil ? { soakingUntil } : {}),
  };
  const later = wakeups.filter((at) => at > p.now);
  const requeue = later.length ? { requeueAfterMs: Math.min(...later) - p.now } : {};
  const head = `${updated} of ${total} cells updated to template ${p.hash}`;
  if (stopped)
    return {
      applied,
      status,
      ...requeue,
      progressing: {
        status: 'False',
        reason: 'RolloutStopped',
        message:
          `${head}; stopped after ${failed.length} failed (maxFailures ${cfg.maxFailures}): ` +
          failed.map((c) => `${c.name} ${c.reason}: ${c.message}`).join('; ') +
          (waiting.length ? `; ${waiting.map(rolloutName).join(', ')} keep the old template` : ''),
      },
    };
  const busy = cells.filter((c) => c.state === 'Updating' || c.state === 'Soaking');
  if (!busy.length && !waiting.length) return { applied, status, ...requeue };
  const why = busy.map((c) =>
    c.state === 'Soaking'
      ? `${c.name} to soak until ${new Date(Date.parse(c.since) + cfg.minSuccessTime * 1000).toISOString()}`
      : `${c.name} to become Available`,
  );
  return {
    applied,
    status,
    ...requeue,
    progressing: {
      status: 'True',
      reason: 'RollingOut',
      message:
        `${head}, waiting for ${why.join(', ')}` +
        (waiting.length ? `; next: ${waiting.map(rolloutName).join(', ')}` : ''),
    },
  };
}

const startedAt = (before: RolloutCell | undefined, nowIso: string): string =>
  before && (before.state === 'Updating' || before.state === 'Failed') ? before.since : nowIso;

/** A started target's turn: failed, Available on the new template (soaking, then updated), or updating. */
function judge(
  t: Target,
  d: DeploymentObject | undefined,
  before: RolloutCell | undefined,
  hash: string,
  cfg: Rollout,
  now: number,
  nowIso: string,
): RolloutCell {
  const name = rolloutName(t);
  const started = startedAt(before, nowIso);
  const fresh =
    d !== undefined &&
    d.spec.workloadRef?.templateHash === hash &&
    d.spec.replicas === t.replicas &&
    d.status?.observedGeneration === d.metadata.generation;
  const progressing = fresh ? findCondition(d.status?.conditions, 'Progressing') : undefined;
  // Failed stays failed until the cell has seen what it is now asked (a scale, say) and says otherwise.
  if (!fresh && before?.state === 'Failed') return before;
  if (progressing?.status === 'False')
    return {
      name,
      state: 'Failed',
      since: started,
      reason: progressing.reason,
      message: progressing.message,
    };
  if (fresh && serves(d) && d.status?.updatedReplicas === t.replicas) {
    const at = before && (before.state === 'Soaking' || before.state === 'Updated') ? before.since : nowIso;
    return {
      name,
      state: Date.parse(at) + cfg.minSuccessTime * 1000 <= now ? 'Updated' : 'Soaking',
      since: at,
    };
  }
  if (cfg.progressDeadline !== undefined && Date.parse(started) + cfg.progressDeadline * 1000 <= now)
    return {
      name,
      state: 'Failed',
      since: started,
      reason: 'ProgressDeadlineExceeded',
      message: `not Available on the new template within ${cfg.progressDeadline}s`,
    };
  return { name, state: 'Updating', since: started };
}
