// The cell controller's pure decisions: what a probe's answer or error means, the history of probes
// a cell's conditions are derived from, its status (written only when it changes), the events a
// change announces, and which kubeconfigs Berth uses from a Secret.
import type { Kubeconfig } from '../runtime/client/kubeconfig.ts';
import { sameConditions, setCondition, findCondition } from '../runtime/api/conditions.ts';
import type { Condition, ConditionStatus } from '../runtime/api/conditions.ts';
import { ApiError } from '../runtime/client/client.ts';
import { apiTime, isDnsLabel } from '../runtime/api/meta.ts';
import { errorText } from '../runtime/observability/log.ts';
import type { CellSpec, CellStatus } from './types.ts';
import { POLICY_GROUP } from '../policy/kinds.ts';

/** Why a cell is not reachable. */
const FAILURE_REASONS = [
  'Unreachable',
  'Unauthorized',
  'BadKubeconfig',
  'SecretMissing',
  'InvalidName',
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];
const isFailureReason = (r: string): r is FailureReason => (FAILURE_REASONS as readonly string[]).includes(r);

export interface Failure {
  reason: FailureReason;
  message: string;
}

/**
 * One probe of a cell: its apiserver's answer, or why there was none. `denied` lists what the
 * cell's credentials may not do of cellAccess ("list instances"), when this probe asked.
 */
export type Probe =
  | { ok: true; at: number; version: string; crdsInstalled: boolean; denied?: string[] }
  | ({ ok: false; at: number } & Failure);

/** What the probes of a cell have shown: the last contact and, while they fail, since when and why. */
export interface History {
  lastContact?: number;
  /** lastContact was read from the status at a restart (written at most once per contactRefresh). */
  contactRestored?: boolean;
  version?: string;
  crdsInstalled?: boolean;
  /** What the credentials may not do, as last asked, and when that was. */
  denied?: string[];
  accessCheckedAt?: number;
  /** Since when the cell has not answered: its last answer this process saw, else the first failure. */
  failingSince?: number;
  failure?: Failure;
  /** The last answer of the cell's refused for its size (the cells provider's), and when. */
  refused?: Refusal;
}

/** An answer of a cell's apiserver refused for its size (ResponseTooLarge), and when. */
export interface Refusal {
  at: number;
  message: string;
}

/** How long after its last refused answer a cell stays not Ready (AnswerTooLarge). */
export const REFUSED_HOLD_MS = 10 * 60_000;

export interface Timing {
  /** How long a cell must fail to answer before it is Reachable=False (Unreachable). */
  unreachableAfterMs: number;
  /** lastContactTime moves at most this often: a probe that changes nothing else writes nothing. */
  contactRefreshMs: number;
}

/** The resources of Berth's cell kinds (part 1) that a cell must serve to take workloads. */
export const CELL_RESOURCES = ['workloaddeployments', 'instances'];

/** Verbs the management plane needs on a resource of a cell (`group` '' is the core group). */
export interface CellAccess {
  group: string;
  resource: string;
  verbs: string[];
}

/**
 * What the management plane does in a cell: watches WorkloadDeployments and Instances in all
 * namespaces, applies (creates) and deletes WorkloadDeployments, watches namespaces (to remove the
 * ones it made once empty) and, where the Cell sets `createNamespaces`, reads, creates and deletes
 * them. A cell whose credentials may not is answering but cannot take workloads.
 */
export const cellAccess: readonly CellAccess[] = [
  {
    group: POLICY_GROUP,
    resource: 'workloaddeployments',
    verbs: ['list', 'watch', 'create', 'patch', 'delete'],
  },
  { group: POLICY_GROUP, resource: 'instances', verbs: ['list', 'watch'] },
  // Watched for the namespaces Berth made there. Making them (createNamespaces) is not asked: a
  // refused create is the Workload's to report, and the cell keeps serving the namespaces it has.
  { group: '', resource: 'namespaces', verbs: ['list', 'watch'] },
];

/**
 * Whether this probe should ask what the credentials may do: at first, at every probe while they
 * fall short (so a fix shows within a period), and otherwise once per refresh (a role revoked).
 */
export function accessDue(h: History | undefined, now: number, t: Pick<Timing, 'contactRefreshMs'>): boolean {
  return (
    h?.accessCheckedAt === undefined ||
    (h.denied?.length ?? 0) > 0 ||
    now - h.accessCheckedAt >= t.contactRefreshMs
  );
}

/** What a cell's name must be, for the cluster it is engaged as (`cell-<name>`). */
export const CELL_NAME_RULE = 'a DNS label of at most 58 characters';

/** The cluster name a cell is engaged under: a DNS label, which cluster keys need (no '/'). */
export function clusterNameOf(cell: string): string | undefined {
  const name = `cell-${cell}`;
  return isDnsLabel(name) ? name : undefined;
}

/** Whether a discovery document (APIResourceList of berth.dev) lists every cell resource. */
export function crdsServed(list: unknown): boolean {
  const names = new Set(
    ((list as { resources?: { name?: unknown }[] } | undefined)?.resources ?? []).map((r) => r.name),
  );
  return CELL_RESOURCES.every((r) => names.has(r));
}

/**
 * What a failed probe means. The apiserver refusing the credentials is Unauthorized; TLS material
 * that cannot be loaded is a bad kubeconfig; anything else (refused, reset, timed out, 5xx) is the
 * cell not answering, which only counts after a while.
 */
export function probeFailure(err: unknown): Failure {
  const message = oneLine(errorText(err));
  if (err instanceof ApiError && (err.status === 401 || err.status === 403))
    return { reason: 'Unauthorized', message: `the cell refused Berth's credentials: ${message}` };
  const code = (err as { code?: unknown } | undefined)?.code;
  if ((typeof code === 'string' && code.startsWith('ERR_OSSL')) || /PEM|no start line/.test(message))
    return { reason: 'BadKubeconfig', message: `the kubeconfig's TLS material cannot be used: ${message}` };
  return { reason: 'Unreachable', message: `the cell's apiserver does not answer: ${message}` };
}

/**
 * Why Berth will not use a kubeconfig from a Secret, or undefined when it can. Berth runs no
 * command and reads no file named by a Secret: credentials and certificates must be embedded.
 */
export function kubeconfigProblem(kc: Kubeconfig): string | undefined {
  if (!kc.context) return 'it has no current context';
  const cluster = kc.cluster;
  if (!cluster?.server) return `its current context names no cluster with a server`;
  let url: URL;
  try {
    url = new URL(cluster.server);
  } catch {
    return `its server "${cluster.server}" is not a URL`;
  }
  if (url.protocol !== 'https:') return `its server ${cluster.server} is not https`;
  if (cluster['certificate-authority'])
    return 'it refers to a CA file: embed it (kubectl config view --flatten --minify)';
  const user = kc.user;
  if (user?.exec || user?.['auth-provider'])
    return 'its user runs a credential plugin (exec or auth-provider), which Berth does not run: use a token or a client certificate';
  if (user?.['client-certificate'] || user?.['client-key'])
    return 'it refers to client certificate files: embed them (kubectl config view --flatten --minify)';
  if (user?.tokenFile) return 'it refers to a token file: embed the token';
  return undefined;
}

/**
 * The history a cell's status implies, before Berth's first probe of it since it started (probes
 * are kept in memory): a cell lost before the restart has been failing since Reachable went False
 * (so failover and the Warning count from then, not from the restart), and a reachable one has
 * answered at its lastContactTime (so a first failing probe is no loss yet).
 */
export function historyOf(status: CellStatus | undefined): History {
  const r = findCondition(status?.conditions, 'Reachable');
  if (r?.status === 'False' && isFailureReason(r.reason)) {
    const since = Date.parse(r.lastTransitionTime);
    if (!Number.isNaN(since))
      return { failingSince: since, failure: { reason: r.reason, message: r.message } };
  }
  const contact = status?.lastContactTime ? Date.parse(status.lastContactTime) : NaN;
  return r?.status === 'True' && !Number.isNaN(contact)
    ? { lastContact: contact, contactRestored: true }
    : {};
}

/**
 * The history after one more probe: a success clears the failure, a failure keeps its start. A cell
 * is silent since its last answer, not since the first probe that went unanswered (which ends a
 * probe timeout later): the bound on noticing it, and "unreachable since", count from the last
 * contact. A contact restored from the status may be a minute old (contactRefresh): the first
 * failure after a restart starts the count instead.
 */
export function observe(h: History | undefined, p: Probe): History {
  if (p.ok) {
    const access = p.denied
      ? { denied: p.denied, accessCheckedAt: p.at }
      : h?.accessCheckedAt !== undefined
        ? { denied: h.denied, accessCheckedAt: h.accessCheckedAt }
        : {};
    return { lastContact: p.at, version: p.version, crdsInstalled: p.crdsInstalled, ...access };
  }
  return {
    ...h,
    failingSince: h?.failure
      ? (h.failingSince ?? p.at)
      : h?.lastContact !== undefined && !h.contactRestored
        ? h.lastContact
        : p.at,
    failure: { reason: p.reason, message: p.message },
  };
}

interface Verdict {
  status: ConditionStatus;
  reason: string;
  message: string;
}

/**
 * Reachable from the history. A cell that stops answering stays as it was for unreachableAfterMs
 * (a restart or a lost packet is no partition); a problem of configuration or credentials is
 * reported at once, since waiting cannot fix it.
 */
export function reachable(h: History, now: number, t: Timing): Verdict {
  const failure = h.failure;
  if (failure && (failure.reason !== 'Unreachable' || now - (h.failingSince ?? now) >= t.unreachableAfterMs))
    return { status: 'False', reason: failure.reason, message: failure.message };
  if (h.lastContact !== undefined)
    return { status: 'True', reason: 'Reachable', message: "the cell's apiserver answers" };
  return { status: 'Unknown', reason: 'Probing', message: 'the cell has not answered yet' };
}

/** Ready's reason for a cell that is Ready in every other way but cordoned (spec.unschedulable). */
export const CORDONED = 'Unschedulable';

/**
 * The status a cell should have now: Reachable, Ready (= Reachable, Berth's cell CRDs served, not
 * unschedulable), the last contact and the last known version and CRDs (kept while it is away).
 */
export function cellStatus(
  cell: { metadata: { generation?: number }; spec: Pick<CellSpec, 'unschedulable'>; status?: CellStatus },
  h: History,
  now: number,
  t: Timing,
): CellStatus {
  const old = cell.status ?? {};
  const r = reachable(h, now, t);
  const crdsInstalled = h.crdsInstalled ?? old.crdsInstalled;
  const version = h.version ?? old.serverVersion;
  const ready: Verdict =
    r.status !== 'True'
      ? { status: r.status, reason: r.reason, message: r.message }
      : h.refused && now - h.refused.at < REFUSED_HOLD_MS
        ? {
            status: 'False',
            reason: 'AnswerTooLarge',
            message: `the cell's apiserver sent more than Berth reads, so its caches of the cell cannot follow it: ${h.refused.message}`,
          }
        : !crdsInstalled
          ? {
              status: 'False',
              reason: 'CRDsMissing',
              message:
                "the cell does not serve WorkloadDeployments and Instances: install Berth's CRDs there",
            }
          : h.denied?.length
            ? {
                status: 'False',
                reason: 'AccessDenied',
                message: `the cell's credentials may not ${h.denied.join(', ')}: grant them there (README, Cells)`,
              }
            : cell.spec.unschedulable
              ? { status: 'False', reason: CORDONED, message: 'the cell is cordoned (spec.unschedulable)' }
              : {
                  status: 'True',
                  reason: 'Ready',
                  message: "the cell answers and serves Berth's cell kinds",
                };
  const g = cell.metadata.generation;
  const generation = g !== undefined ? { observedGeneration: g } : {};
  // A lost cell is unreachable since its last contact, not since Berth noticed.
  const at = new Date(r.reason === 'Unreachable' ? (h.failingSince ?? now) : now);
  let conditions = setCondition(old.conditions, { type: 'Reachable', ...r, ...generation }, at);
  conditions = setCondition(conditions, { type: 'Ready', ...ready, ...generation }, at);
  const previous = old.lastContactTime ? Date.parse(old.lastContactTime) : undefined;
  const lastContactTime =
    h.lastContact === undefined
      ? old.lastContactTime
      : previous !== undefined && h.lastContact - previous < t.contactRefreshMs && h.lastContact >= previous
        ? old.lastContactTime
        : apiTime(h.lastContact);
  return {
    ...generation,
    ...(lastContactTime ? { lastContactTime } : {}),
    ...(version ? { serverVersion: version } : {}),
    ...(crdsInstalled !== undefined ? { crdsInstalled } : {}),
    conditions,
  };
}

/** Whether writing `next` changes anything in `current` (transition times aside). */
export function statusChanged(current: CellStatus | undefined, next: CellStatus): boolean {
  return (
    current?.observedGeneration !== next.observedGeneration ||
    current?.lastContactTime !== next.lastContactTime ||
    current?.serverVersion !== next.serverVersion ||
    current?.crdsInstalled !== next.crdsInstalled ||
    !sameConditions(current?.conditions, next.conditions)
  );
}

export interface CellEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

/** Ready's reasons, with the cell answering, that its admin must fix (a cordon is chosen, not fixed). */
export const READY_PROBLEMS = ['CRDsMissing', 'AccessDenied', 'AnswerTooLarge'];

/**
 * What a change of Reachable announces: a Warning when the cell is lost or the cause changes (not
 * when only the error's text does, which a cell that stays down varies), Normal when it is back.
 * Likewise for a cell that answers but cannot take workloads (Ready's READY_PROBLEMS).
 */
export function cellEvents(before: Condition[] | undefined, after: Condition[]): CellEvent[] {
  const events: CellEvent[] = [];
  const was = findCondition(before, 'Reachable');
  const now = findCondition(after, 'Reachable');
  if (now?.status === 'False' && (was?.status !== 'False' || was.reason !== now.reason))
    events.push({ type: 'Warning', reason: now.reason, message: now.message });
  if (was?.status === 'False' && now?.status === 'True')
    events.push({
      type: 'Normal',
      reason: 'Reachable',
      message: `the cell answers again (was ${was.reason})`,
    });
  const wasReady = findCondition(before, 'Ready');
  const ready = findCondition(after, 'Ready');
  if (ready && READY_PROBLEMS.includes(ready.reason) && wasReady?.reason !== ready.reason)
    events.push({ type: 'Warning', reason: ready.reason, message: ready.message });
  return events;
}

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim();
