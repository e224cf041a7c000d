// agents-status: counts per AgentPlacement what the nodes carry (controllers/node.ts), and says why
// a placement is not Ready.
import { PolicyStatusWriter, type StatusReport, type Warning } from '../../policy/status.ts';
import type { Result } from '../../runtime/controller/controller.ts';
import type { Agents, PlacementObject } from '../setup.ts';
import { FIELD_MANAGER } from '../types.ts';
import { outranked } from './node.ts';
import { ownerKindId, type OwnerKind } from './owner-finalizer.ts';

type PlacementCount = 'labelledNodes' | 'claims' | 'owners';

/**
 * What the node controller last found for a placement on a node, for its status: only what the
 * node carries counts, so a claim that was decided but not (yet) written is pending, never counted.
 */
export interface PlacementStanding {
  /** Owner UIDs whose claims the node carries. */
  claims: Set<string>;
  /** The node carries its label. */
  labelled: boolean;
  /** Claims and label decided but not on the node yet (a write on its way, or waiting for the node's write spacing). */
  pending: number;
  /** Its label or a claim key is held with another value by another placement or field manager. */
  blocked: string | undefined;
  /** Owners that cannot have a claim (their UID makes no valid key), and why. */
  rejected: string[];
  /** The node's write failed (an admission policy, a node too large): why, until one succeeds. */
  failed: string | undefined;
}

/** Things a user can fix: a placement that is unusable, conflicts, or rejects claims. */
const WARNINGS: Warning[] = [
  { type: 'Invalid', status: 'True' },
  { type: 'OwnerKindResolved', status: 'False' },
  { type: 'Conflicting', status: 'True' },
  { type: 'Ready', status: 'False', reason: 'ClaimsRejected' },
];

/** A placement's status from its standings and its owner kind as agents-finalizer last checked it. */
export class StatusWriter extends PolicyStatusWriter<PlacementObject, PlacementStanding, PlacementCount> {
  private readonly a: Agents;

  constructor(a: Agents) {
    super(a, a.placementObjects, {
      name: 'agents-status',
      fieldManager: FIELD_MANAGER,
      warnings: WARNINGS,
      admission: [a.admission],
    });
    this.a = a;
  }

  protected report(
    obj: PlacementObject,
    standings: PlacementStanding[],
  ): StatusReport<PlacementCount> | Result {
    const name = obj.metadata!.name!;
    const placement = this.a.parsed().find((p) => p.name === name);
    const invalid = (
      placement ? placement.problems : [this.a.parsedPlacements().errors.get(name) ?? 'does not parse']
    )
      .join('; ')
      .slice(0, 2000);
    let ownerKind: OwnerKind | undefined;
    if (placement?.spec.finalizer && !invalid) {
      ownerKind = this.a.ownerKinds.get(name);
      // Until the finalizer controller has checked the owner kind, Ready would be a guess.
      if (ownerKind?.id !== ownerKindId(placement)) return { requeueAfterMs: 250 };
    }
    let labelledNodes = 0;
    let claims = 0;
    let pending = 0;
    const owners = new Set<string>();
    const blocked: string[] = [];
    const rejected: string[] = [];
    const failed: string[] = [];
    for (const s of standings) {
      claims += s.claims.size;
      for (const uid of s.claims) owners.add(uid);
      if (s.labelled) labelledNodes++;
      pending += s.pending;
      if (s.blocked) blocked.push(s.blocked);
      if (s.failed) failed.push(s.failed);
      rejected.push(...s.rejected);
    }
    const problem = ownerKind?.problem;
    const more = (list: string[]) => (list.length > 1 ? ` (+${list.length - 1} more)` : '');
    const placed = `${claims} claims on ${labelledNodes} nodes from ${owners.size} owners`;
    const [reason, message] = invalid
      ? ['Invalid', invalid]
      : problem
        ? [problem.reason, `${problem.message}; ${placed}`]
        : failed.length
          ? ['WriteFailed', `${failed[0]}${more(failed)}; ${placed}`]
          : blocked.length
            ? ['Conflicting', placed]
            : rejected.length
              ? ['ClaimsRejected', `${rejected[0]}${more(rejected)}`]
              : pending
                ? ['Progressing', `${placed}; ${pending} claims and labels not written yet`]
                : ['Placed', placed];
    return {
      counts: { labelledNodes, claims, owners: owners.size },
      conditions: [
        { type: 'Invalid', status: !!invalid, reason: invalid ? 'InvalidSpec' : 'Valid', message: invalid },
        {
          type: 'OwnerKindResolved',
          status: !problem,
          reason: problem?.reason ?? (placement?.spec.finalizer && !invalid ? 'Resolved' : 'NoFinalizer'),
          message: problem?.message ?? '',
        },
        {
          type: 'Conflicting',
          status: blocked.length > 0,
          reason: blocked.length ? 'OutputConflict' : 'NoConflict',
          message: blocked.slice(0, 3).join(' | '),
        },
        { type: 'Ready', status: reason === 'Placed', reason, message },
      ],
    };
  }
}

/** The agents-status controller: its status writer, and a key a gate takes (every placement). */
export function setupStatusWriter(a: Agents): StatusWriter {
  const status = new StatusWriter(a);
  status.controller.watch(a.keys, (c) => (outranked(c) ? a.placementObjects.keys() : []));
  return status;
}
