// One owner per node key. Capabilities write labels, annotations and taints to the same nodes; a key
// that carries one capability's bookkeeping (a gate's gated-at annotation and taint, a placement's
// claims and label) must never be the output of another capability's policy, or the two fight over
// it. Capabilities cannot import each other, so each declares here what it owns — static domains
// and the keys of its live policies — and the others validate their policies against it.
import type { EventHandler } from '../../runtime/cache/informer.ts';
import { NODE_WRITERS_DOMAIN, type NodeOutputKind } from './write.ts';

/**
 * A set of node keys of one kind ('any': labels, annotations and taints alike): one key, every
 * key starting with a prefix (a claim prefix: the rest of such a key holds no '/'), or every key
 * whose prefix is a subdomain of a domain (`<gate>.gates.berth.dev/...`). Taints are keyed by
 * their key, whatever the effect.
 */
export type KeyPattern = { kind: NodeOutputKind | 'any' } & (
  { key: string } | { prefix: string } | { subdomainsOf: string }
);

export interface KeyClaim {
  pattern: KeyPattern;
  /** Who owns it, for messages: "NodeStartupGate warmup". */
  owner: string;
}

/** What a capability owns on nodes whatever its policies, and where it stands among owners. */
export interface KeyDeclaration {
  /**
   * Owners of lower rank win: a policy is Invalid when it outputs a key a capability of lower
   * rank owns. A capability that declares nothing (derived labels) owns no key and yields to all.
   */
  rank: number;
  /** For messages: "startup gates". */
  title: string;
  /** Keys it owns whether or not a policy uses them yet (its reserved domains). */
  domains: KeyClaim[];
}

/** A change of what some capability owns: its policies' keys are to be checked again. */
export interface OwnershipChange {
  capability: string;
  rank: number;
}

const domainOf = (key: string) => (key.includes('/') ? key.slice(0, key.indexOf('/')) : undefined);
const inDomain = (domain: string | undefined, d: string) => domain !== undefined && domain.endsWith(`.${d}`);

/** Whether two patterns share a key (of a kind both cover). */
export function overlaps(a: KeyPattern, b: KeyPattern): boolean {
  if (a.kind !== 'any' && b.kind !== 'any' && a.kind !== b.kind) return false;
  if ('key' in a) {
    if ('key' in b) return a.key === b.key;
    if ('prefix' in b) return a.key.startsWith(b.prefix);
    return inDomain(domainOf(a.key), b.subdomainsOf);
  }
  if ('prefix' in a) {
    if ('key' in b || 'subdomainsOf' in b) return overlaps(b, a);
    return a.prefix.startsWith(b.prefix) || b.prefix.startsWith(a.prefix);
  }
  if ('subdomainsOf' in b) {
    const [x, y] = [a.subdomainsOf, b.subdomainsOf];
    return x === y || x.endsWith(`.${y}`) || y.endsWith(`.${x}`);
  }
  if ('key' in b) return overlaps(b, a);
  // A prefix without '/' makes keys without a domain part (the rest, a UID, holds no '/').
  return inDomain(domainOf(b.prefix), a.subdomainsOf);
}

const describePattern = (p: KeyPattern): string => {
  const kind = p.kind === 'any' ? 'key' : p.kind;
  if ('key' in p) return `${kind} ${p.key}`;
  if ('prefix' in p) return `${kind}s ${p.prefix}*`;
  return `${kind}s under *.${p.subdomainsOf}/`;
};

// Static claims rank after live ones: a message names the policy when there is one.
const specificity = (p: KeyPattern) => ('key' in p ? 0 : 'prefix' in p ? 1 : 2);

/**
 * The registry, one per manager. Capabilities declare their domains (`berth run` declares every
 * capability's, enabled or not) and keep their live claims current; a change is an event that
 * node and status controllers watch like an informer, so affected policies are re-checked at once.
 */
export class KeyOwnership {
  readonly #declared = new Map<string, KeyDeclaration>();
  readonly #live = new Map<string, { claims: KeyClaim[]; text: string }>();
  readonly #handlers: EventHandler<OwnershipChange>[] = [];
  readonly #syncs = new Map<string, (signal?: AbortSignal) => Promise<void>>();

  constructor() {
    // The node writers' own records (the taints each field manager put on) outrank every capability.
    const title = "Berth's node writers";
    this.declare('runtime', {
      rank: -1,
      title,
      domains: [{ pattern: { kind: 'any', subdomainsOf: NODE_WRITERS_DOMAIN }, owner: title }],
    });
  }

  /** Declares a capability's rank and domains; `synced` resolves once its live claims are known. */
  declare(capability: string, d: KeyDeclaration, synced?: (signal?: AbortSignal) => Promise<void>): void {
    this.#declared.set(capability, d);
    if (synced) this.#syncs.set(capability, synced);
  }

  /** Replaces the live claims of a capability (its current policies' keys); watchers hear of a change. */
  claim(capability: string, claims: KeyClaim[]): void {
    const text = JSON.stringify(claims);
    if (this.#live.get(capability)?.text === text) return;
    this.#live.set(capability, { claims, text });
    const change = { capability, rank: this.rank(capability) };
    for (const h of this.#handlers) h.onUpdate?.(change, change);
  }

  rank(capability: string): number {
    return this.#declared.get(capability)?.rank ?? Infinity;
  }

  /**
   * Why `capability` may not output these keys: one message per pattern that overlaps a key of a
   * capability of lower rank, naming the owner ("annotation x is owned by NodeStartupGate w (startup gates)").
   */
  violations(capability: string, outputs: KeyPattern[]): string[] {
    const rank = this.rank(capability);
    const out: string[] = [];
    for (const p of outputs) {
      let best: { claim: KeyClaim; title: string } | undefined;
      for (const [owner, d] of this.#declared) {
        if (d.rank >= rank) continue;
        for (const claim of [...(this.#live.get(owner)?.claims ?? []), ...d.domains]) {
          if (!overlaps(p, claim.pattern)) continue;
          if (!best || specificity(claim.pattern) < specificity(best.claim.pattern))
            best = { claim, title: d.title };
        }
      }
      if (best) {
        const owner = best.claim.owner === best.title ? best.title : `${best.claim.owner} (${best.title})`;
        out.push(`${describePattern(p)} ${'key' in p ? 'is' : 'are'} owned by ${owner}`);
      }
    }
    return out;
  }

  /** Ownership changes, as a Source for Controller.watch: onUpdate(change, change) on each. */
  addEventHandler(h: EventHandler<OwnershipChange>): void {
    this.#handlers.push(h);
  }

  /** Resolves once every declared capability with live policies has claimed them (its cache synced). */
  async waitForSync(signal?: AbortSignal): Promise<void> {
    await Promise.all([...this.#syncs.values()].map((s) => s(signal)));
  }
}
