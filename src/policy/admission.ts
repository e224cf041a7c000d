// What a capability's webhook is sent, from its live policies (decision 0043): each policy that
// needs the webhook is a term (the namespaces and objects it selects), and the terms become the
// webhook's selectors where one selector says them all, else one CEL matchCondition over the
// object's labels and the request's namespace. The configuration only narrows: the handler still
// decides. A policy's status waits until a configuration that covers it is in effect
// (`covers`), so that no object it selects is admitted without the webhook once it says Ready.
import { isDeepStrictEqual } from 'node:util';
import type { KubeObject } from '../runtime/api/meta.ts';
import type { EventHandler } from '../runtime/cache/informer.ts';
import type { Logger } from '../runtime/observability/log.ts';
import type { WebhookScope, WebhookSelection } from '../runtime/webhook/registration.ts';
import { namespaceNameCel, selectorCel } from './match/cel.ts';
import { selectorRequirements, type LabelSelector } from './match/selector.ts';
import { NAMESPACE_NAME_LABEL } from './namespace.ts';
import { deletionChanged, generationChanged, onChanges, or } from './predicates.ts';

/** What one policy selects of the objects the webhook's rules match. */
export interface ScopeTerm {
  /** Namespaced kinds only; none: every namespace. */
  namespaceSelector?: LabelSelector | undefined;
  /** None: every object. */
  objectSelector?: LabelSelector | undefined;
}

/**
 * Past these the terms are not spelled out, and the webhook is sent everything (with a log line):
 * one condition of a few hundred characters per term stays far inside the apiserver's CEL cost
 * budget, and a webhook's 64 conditions are never in question (Berth adds one).
 */
export const MAX_SCOPE_TERMS = 32;
export const MAX_SCOPE_CEL_CHARS = 8192;

export const SCOPE_CONDITION = 'berth-policies-select';

const selectsAll = (s: LabelSelector | undefined): boolean => selectorRequirements(s).length === 0;

// A selector by what it requires, whatever the order it was written in.
const canonical = (s: LabelSelector | undefined): string =>
  JSON.stringify(
    selectorRequirements(s)
      .map((r) => [r.key, r.operator, [...(r.values ?? [])].sort()])
      .sort((a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1)),
  );

const given = <K extends string>(key: K, s: LabelSelector | undefined) =>
  (selectsAll(s) ? {} : { [key]: s }) as Partial<Record<K, LabelSelector>>;

/** Namespace selectors that each require one key to be In some values, the same key: one In of them all. */
function oneKeyUnion(selectors: (LabelSelector | undefined)[]): LabelSelector | undefined {
  const reqs = selectors.map((s) => selectorRequirements(s));
  const key = reqs[0]?.[0]?.key;
  if (!reqs.every((r) => r.length === 1 && r[0]!.key === key && r[0]!.operator === 'In')) return undefined;
  const values = [...new Set(reqs.flatMap((r) => r[0]!.values ?? []))].sort();
  return { matchExpressions: [{ key: key!, operator: 'In', values }] };
}

/** The selection of `terms`, and why it is broader than they say when it is (logged by the caller). */
export function admissionSelection(terms: ScopeTerm[]): { selection: WebhookSelection; broad?: string } {
  if (terms.length === 0) return { selection: { send: 'none' } };
  const all = { selection: { send: 'all' } } as const;
  if (terms.some((t) => selectsAll(t.namespaceSelector) && selectsAll(t.objectSelector))) return all;
  const byKey = new Map<string, ScopeTerm>();
  for (const t of terms) {
    const key = canonical(t.namespaceSelector) + canonical(t.objectSelector);
    if (!byKey.has(key)) byKey.set(key, t);
  }
  const distinct = [...byKey.values()];
  const namespaces = new Set(distinct.map((t) => canonical(t.namespaceSelector)));
  const objects = new Set(distinct.map((t) => canonical(t.objectSelector)));
  const first = distinct[0]!;
  if (namespaces.size === 1 && objects.size === 1) {
    const some = {
      ...given('namespaceSelector', first.namespaceSelector),
      ...given('objectSelector', first.objectSelector),
    };
    return { selection: { send: 'some', ...some } };
  }
  if (objects.size === 1) {
    const union = oneKeyUnion(distinct.map((t) => t.namespaceSelector));
    if (union)
      return {
        selection: {
          send: 'some',
          namespaceSelector: union,
          ...given('objectSelector', first.objectSelector),
        },
      };
  }
  if (distinct.length > MAX_SCOPE_TERMS) {
    return { ...all, broad: `${distinct.length} policies select differently, more than ${MAX_SCOPE_TERMS}` };
  }
  const shared = namespaces.size === 1 ? first.namespaceSelector : undefined;
  const exprs: string[] = [];
  for (const t of distinct) {
    const object = selectorCel(t.objectSelector);
    if (object === undefined) return { ...all, broad: 'a selector CEL cannot say' };
    const namespace = shared ? 'true' : namespaceNameCel(t.namespaceSelector, NAMESPACE_NAME_LABEL);
    const both = [object, namespace].filter((e) => e !== 'true');
    if (both.length === 0)
      return { ...all, broad: 'a policy selects namespaces by labels the request does not carry' };
    exprs.push(both.map((e) => `(${e})`).join(' && '));
  }
  const expression = exprs.map((e) => `(${e})`).join(' || ');
  if (expression.length > MAX_SCOPE_CEL_CHARS) {
    return {
      ...all,
      broad: `the policies' selectors take ${expression.length} characters of CEL, more than ${MAX_SCOPE_CEL_CHARS}`,
    };
  }
  return {
    selection: {
      send: 'some',
      ...given('namespaceSelector', shared),
      matchConditions: [{ name: SCOPE_CONDITION, expression }],
    },
  };
}

/** What a status writer asks of a scope: whether a policy's current generation is in effect at admission. */
export interface AdmissionCoverage {
  covers(obj: KubeObject): boolean;
  /** Calls `fn` with the policies newly covered. */
  onCovered(fn: (names: string[]) => void): void;
}

export interface AdmissionScopeOptions<O extends KubeObject> {
  /** The webhook's name, for the log. */
  webhook: string;
  /** The policy objects: the generations a selection was computed from say what it covers. */
  objects: { list(): O[]; addEventHandler(h: EventHandler<O>): void };
  /** The terms of the live policies that need the webhook: from the same cache, read at the same moment. */
  terms(): ScopeTerm[];
  /** Anything else the terms turn on. */
  watch?(changed: () => void): void;
  log: Logger;
}

/** A webhook's scope from a kind of policy, and what its configuration covers of them. */
export class AdmissionScope<O extends KubeObject> implements WebhookScope, AdmissionCoverage {
  private readonly opts: AdmissionScopeOptions<O>;
  /** Registrars applying this scope now. */
  private engaged = 0;
  /** uid → the generation in effect at admission, and the policy's name. */
  private readonly inEffect = new Map<string, { name: string; generation: number }>();
  private readonly listeners: ((names: string[]) => void)[] = [];
  private broad: string | undefined;
  private last: WebhookSelection | undefined;

  constructor(opts: AdmissionScopeOptions<O>) {
    this.opts = opts;
  }

  selection(): { selection: WebhookSelection; token: Map<string, { name: string; generation: number }> } {
    const token = new Map(
      this.opts.objects
        .list()
        .map((o) => [
          o.metadata?.uid ?? o.metadata!.name!,
          { name: o.metadata!.name!, generation: o.metadata?.generation ?? 0 },
        ]),
    );
    const { selection, broad } = admissionSelection(this.opts.terms());
    if (broad && broad !== this.broad) {
      this.opts.log.info(
        { webhook: this.opts.webhook, reason: broad },
        'webhook sent everything its rules match',
      );
    }
    this.broad = broad;
    if (!isDeepStrictEqual(selection, this.last)) {
      this.opts.log.debug({ webhook: this.opts.webhook, selection }, 'webhook scope changed');
    }
    this.last = selection;
    return { selection, token };
  }

  watch(changed: () => void): void {
    this.opts.objects.addEventHandler(onChanges(or(generationChanged, deletionChanged), changed));
    this.opts.watch?.(changed);
  }

  applied(token: unknown): void {
    const seen = token as Map<string, { name: string; generation: number }>;
    const names: string[] = [];
    for (const [uid, p] of seen) {
      if ((this.inEffect.get(uid)?.generation ?? -1) < p.generation) names.push(p.name);
      this.inEffect.set(uid, p);
    }
    for (const uid of this.inEffect.keys()) if (!seen.has(uid)) this.inEffect.delete(uid);
    if (names.length) for (const fn of this.listeners) fn(names);
  }

  engage(): () => void {
    this.engaged++;
    let released = false;
    return () => {
      if (!released) this.engaged--;
      released = true;
    };
  }

  covers(obj: KubeObject): boolean {
    if (this.engaged === 0) return true;
    const p = this.inEffect.get(obj.metadata?.uid ?? obj.metadata!.name!);
    return p !== undefined && p.generation >= (obj.metadata?.generation ?? 0);
  }

  onCovered(fn: (names: string[]) => void): void {
    this.listeners.push(fn);
  }
}
