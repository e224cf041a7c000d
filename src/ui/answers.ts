// What the page's explain panel and plan view show, as pure functions of the results `berth
// explain` and `berth plan` print from (src/explain.ts, src/plan.ts): the same answers, in parts
// the page renders without parsing text.
import type { Explanation } from '../explain.ts';
import { effectsByObject, planExitCode, planText, type Plan } from '../plan.ts';
import type { Subject } from '../policy/explain.ts';
import { since } from '../policy/explain.ts';
import { conditionTone } from '../policy/status.ts';
import type { ExplainView, PlanView } from './types.ts';

/** Subjects of each side the panel shows: 5,000 nodes would make a page nobody reads. */
export const PANEL_SUBJECTS = 100;

const side = (subjects: Subject[], inside: boolean) => {
  const all = subjects.filter((s) => s.in === inside);
  return { shown: all.slice(0, PANEL_SUBJECTS), total: all.length };
};

/** An explanation as the panel shows it: title, conditions with since-when, counts, subjects, lines. */
export function explainView(x: Explanation, now = new Date()): ExplainView {
  return {
    title: `${x.kind} ${x.namespace ? `${x.namespace}/` : ''}${x.name}`,
    missingCrds: x.missingCrds ?? [],
    ...(x.conditions
      ? {
          conditions: x.conditions.map((c) => ({
            type: c.type,
            status: c.status,
            reason: c.reason ?? '',
            message: c.message ?? '',
            tone: conditionTone(c.type, c.status),
            since: since(c.lastTransitionTime, now),
          })),
        }
      : {}),
    counts: x.counts ?? {},
    acts: side(x.subjects ?? [], true),
    leaves: side(x.subjects ?? [], false),
    lines: x.lines,
  };
}

/** A plan as the view shows it: effects by object, evictions, warnings, unknowns, errors, exit code. */
export function planView(p: Plan): PlanView {
  return {
    changes: p.changes,
    exitCode: planExitCode(p),
    objects: [...effectsByObject(p.effects)].map(([object, effects]) => ({
      object,
      effects: effects.map(({ op, what, by }) => ({ op, what, by })),
    })),
    ...(p.evictions ? { evictions: p.evictions } : {}),
    warnings: p.warnings,
    unknown: p.unknown,
    errors: p.errors,
    lines: planText(p),
  };
}
