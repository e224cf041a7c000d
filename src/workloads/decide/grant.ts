// Who is granted quota, decided from a namespace's budget, its ledger (the granted claims) and its
// instances: pure, so that the quota controller (controllers/quota.ts) and `berth explain` (explain.ts) give the
// same answer, and so that the rules below are tested on generated cases.
//  - A claim stays until its instance is gone; nothing granted is ever revoked.
//  - An instance whose QuotaGranted is True but that the ledger does not hold (granted with no Quota,
//    or by a ledger since deleted) is adopted into it, even past the budget (OverBudget).
//  - Waiting instances are granted oldest first (creationTimestamp, then name, then cluster) while
//    the granted total stays within every dimension of the budget. The line is strict: a younger
//    instance never overtakes an older one that does not fit (else small instances would starve a
//    big one forever); only an instance larger than the whole budget, which never fits, or one
//    without a size (ConfigurationError) steps out of the line.
import { bytes, formatBytes, formatCPU, milliCPU } from '../resources.ts';
import type { QuotaClaim } from '../types.ts';

export interface Amount {
  instances: number;
  milliCPU: number;
  memoryBytes: number;
}

/** A Quota's spec in base units; a dimension left out has no limit. */
export type Budget = Partial<Amount>;

export interface Candidate {
  cluster: string;
  name: string;
  uid: string;
  creationTimestamp: string;
  /** Its size (instanceSize), or why it has none. */
  size: { milliCPU: number; memoryBytes: number } | { error: string };
  /** Its QuotaGranted condition is True already. */
  granted: boolean;
  /** Being deleted: it keeps a claim it holds, but gets none. */
  deleting: boolean;
}

export type Verdict =
  | { granted: true; claim: QuotaClaim; adopted: boolean }
  | {
      granted: false;
      reason: 'QuotaExceeded' | 'ConfigurationError';
      message: string;
      /** Its place in the line (1 is next); none when it can never fit or has no size. */
      place?: number;
    };

export interface Decision {
  /** The ledger to write: the claims kept, adopted and granted now. */
  claims: QuotaClaim[];
  /** By instance uid; instances being deleted without a claim have none. */
  verdicts: Map<string, Verdict>;
  used: Amount;
  /** Instances not granted (size errors included). */
  waiting: number;
  /** The dimensions whose use exceeds the budget (adopted claims can do that). */
  over: (keyof Amount)[];
}

const DIMENSIONS = ['instances', 'milliCPU', 'memoryBytes'] as const;

/** A Quota's spec as a budget (the CRD admits only quantities, so a parse never fails there). */
export function budgetOf(spec: { instances?: number; cpu?: string; memory?: string }): Budget {
  const budget: Budget = {};
  if (spec.instances !== undefined) budget.instances = spec.instances;
  const cpu = spec.cpu === undefined ? undefined : milliCPU(spec.cpu);
  if (cpu !== undefined) budget.milliCPU = cpu;
  const memory = spec.memory === undefined ? undefined : bytes(spec.memory);
  if (memory !== undefined) budget.memoryBytes = memory;
  return budget;
}

const claimAmount = (c: { milliCPU: number; memoryBytes: number }): Amount => ({
  instances: 1,
  milliCPU: c.milliCPU,
  memoryBytes: c.memoryBytes,
});

const add = (a: Amount, b: Amount): Amount => ({
  instances: a.instances + b.instances,
  milliCPU: a.milliCPU + b.milliCPU,
  memoryBytes: a.memoryBytes + b.memoryBytes,
});

/** The dimensions in which `amount` exceeds `budget`. */
export const exceeds = (amount: Amount, budget: Budget): (keyof Amount)[] =>
  DIMENSIONS.filter((d) => budget[d] !== undefined && amount[d] > budget[d]);

/** The total of the claims. */
export const usedBy = (claims: readonly QuotaClaim[]): Amount =>
  claims.reduce((u, c) => add(u, claimAmount(c)), { instances: 0, milliCPU: 0, memoryBytes: 0 });

/** Oldest first: creationTimestamp (RFC 3339 in UTC compares as text), then name, then cluster. */
export const lineOrder = (a: Candidate, b: Candidate): number =>
  a.creationTimestamp < b.creationTimestamp
    ? -1
    : a.creationTimestamp > b.creationTimestamp
      ? 1
      : a.name < b.name
        ? -1
        : a.name > b.name
          ? 1
          : a.cluster < b.cluster
            ? -1
            : a.cluster > b.cluster
              ? 1
              : 0;

/** "1 vCPU, 2Gi" */
export function sizeText(size: { milliCPU: number; memoryBytes: number }): string {
  // An instance that states no size counts as one instance only: say so, not "0 vCPU, 0".
  const parts = [
    ...(size.milliCPU ? [`${formatCPU(size.milliCPU)} vCPU`] : []),
    ...(size.memoryBytes ? [formatBytes(size.memoryBytes)] : []),
  ];
  return parts.length ? `1 instance (${parts.join(', ')})` : '1 instance';
}

/** What each dimension is called in messages. */
export const dimensionNames: Record<keyof Amount, string> = {
  instances: 'instances',
  milliCPU: 'vCPU',
  memoryBytes: 'memory',
};

const units: Record<keyof Amount, [(v: number) => string, string]> = {
  instances: [String, dimensionNames.instances],
  milliCPU: [formatCPU, dimensionNames.milliCPU],
  memoryBytes: [formatBytes, dimensionNames.memoryBytes],
};

/** "4 of 4 instances, 3 of 4 vCPU, 6Gi of 8Gi memory": each budgeted dimension (or those given). */
export function usageText(
  used: Amount,
  budget: Budget,
  dims: readonly (keyof Amount)[] = DIMENSIONS,
): string {
  const parts = dims
    .filter((d) => budget[d] !== undefined)
    .map((d) => {
      const [format, unit] = units[d];
      return `${format(used[d])} of ${format(budget[d]!)} ${unit}`;
    });
  return parts.length ? parts.join(', ') : 'no limit';
}

/** "4 vCPU, 8Gi memory": the budget of the dimensions given. */
const limitText = (budget: Budget, dims: readonly (keyof Amount)[]): string =>
  dims.map((d) => `${units[d][0](budget[d]!)} ${units[d][1]}`).join(', ');

/**
 * The ledger and each instance's verdict. `gone` says whether a claim's instance no longer exists;
 * it answers false when that cannot be known (its cluster unreachable), and the claim stays.
 */
export function decideGrants(
  budget: Budget,
  ledger: readonly QuotaClaim[],
  candidates: readonly Candidate[],
  opts: { gone(claim: QuotaClaim): boolean; now: string },
): Decision {
  const claims = ledger.filter((c) => !opts.gone(c));
  const held = new Map(claims.map((c) => [c.uid, c]));
  const verdicts = new Map<string, Verdict>();
  const claimOf = (c: Candidate, size: { milliCPU: number; memoryBytes: number }): QuotaClaim => ({
    cluster: c.cluster,
    name: c.name,
    uid: c.uid,
    milliCPU: size.milliCPU,
    memoryBytes: size.memoryBytes,
    grantedAt: opts.now,
  });
  const line: Candidate[] = [];
  for (const c of candidates) {
    const claim = held.get(c.uid);
    if (claim) verdicts.set(c.uid, { granted: true, claim, adopted: false });
    else if (c.granted) {
      // Granted before this ledger knew of it: counted from now on, never revoked.
      const adopted = claimOf(c, 'error' in c.size ? { milliCPU: 0, memoryBytes: 0 } : c.size);
      claims.push(adopted);
      held.set(c.uid, adopted);
      verdicts.set(c.uid, { granted: true, claim: adopted, adopted: true });
    } else if (!c.deleting) line.push(c);
  }
  line.sort(lineOrder);

  let used = usedBy(claims);
  const none: Amount = { instances: 0, milliCPU: 0, memoryBytes: 0 };
  const waitingInLine: Candidate[] = [];
  const neverFits: [Candidate, (keyof Amount)[]][] = [];
  for (const c of line) {
    if ('error' in c.size) {
      verdicts.set(c.uid, { granted: false, reason: 'ConfigurationError', message: c.size.error });
      continue;
    }
    const need = claimAmount(c.size);
    const tooBig = exceeds(add(none, need), budget);
    if (tooBig.length) {
      neverFits.push([c, tooBig]);
      continue;
    }
    if (waitingInLine.length === 0 && exceeds(add(used, need), budget).length === 0) {
      const claim = claimOf(c, c.size);
      claims.push(claim);
      used = add(used, need);
      verdicts.set(c.uid, { granted: true, claim, adopted: false });
    } else waitingInLine.push(c);
  }
  refuse(verdicts, waitingInLine, neverFits, used, budget);
  return {
    claims,
    verdicts,
    used,
    waiting: [...verdicts.values()].filter((v) => !v.granted).length,
    over: exceeds(used, budget),
  };
}

/**
 * A namespace's grants under its Quota in force (none: every instance is granted), the ledger's
 * claims whose instances are `gone` released: the quota controller's pass and `berth plan` both.
 */
export function decideUnder(
  quota: { spec?: { instances?: number; cpu?: string; memory?: string } } | undefined,
  ledger: readonly QuotaClaim[] | undefined,
  candidates: readonly Candidate[],
  gone: ReadonlySet<string>,
  now: string,
): Decision {
  return decideGrants(quota ? budgetOf(quota.spec ?? {}) : {}, ledger ?? [], candidates, {
    gone: (c) => gone.has(c.uid),
    now,
  });
}

/**
 * The verdicts of the instances left waiting: their place in line, or that they never fit. Written
 * from the final totals, so that the messages change only when the totals do.
 */
function refuse(
  verdicts: Map<string, Verdict>,
  waitingInLine: readonly Candidate[],
  neverFits: readonly [Candidate, (keyof Amount)[]][],
  used: Amount,
  budget: Budget,
): void {
  const usage = usageText(used, budget);
  waitingInLine.forEach((c, i) => {
    const size = c.size as { milliCPU: number; memoryBytes: number };
    const fits = exceeds(add(used, claimAmount(size)), budget).length === 0;
    verdicts.set(c.uid, {
      granted: false,
      reason: 'QuotaExceeded',
      message: `needs ${sizeText(size)}; ${usage} used${fits ? '; waiting behind older instances' : ''}`,
      place: i + 1,
    });
  });
  for (const [c, dims] of neverFits) {
    const size = c.size as { milliCPU: number; memoryBytes: number };
    verdicts.set(c.uid, {
      granted: false,
      reason: 'QuotaExceeded',
      message: `needs ${sizeText(size)}, more than the whole budget (${limitText(budget, dims)})`,
    });
  }
}

/**
 * When to look again at a namespace while an instance waits, from the instance's age: a missed
 * event heals within a second at first, and ever more slowly (the seed's schedule). Anchored on the
 * creation, not on the condition's transition time, which does not move while it stays unsettled.
 */
export function requeueAfterMs(createdMs: number, nowMs: number): number {
  const age = nowMs - createdMs;
  if (age < 60_000) return 1_000;
  if (age < 5 * 60_000) return 15_000;
  if (age < 10 * 60_000) return 60_000;
  return 300_000;
}
