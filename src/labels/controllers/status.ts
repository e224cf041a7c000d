// labels-rule-status: counts and conditions per NodeLabelRule, from its standings on the nodes.
import { PolicyStatusWriter, type StatusReport } from '../../policy/status.ts';
import { ruleNameOf } from '../decide/nodes.ts';
import type { Labels, RuleObject } from '../setup.ts';
import { FIELD_MANAGER } from '../types.ts';

/** What the node controller last found for a NodeLabelRule on a node, for its status. */
export interface RuleStanding {
  matched: boolean;
  /** All of its outputs on this node are in place. */
  applied: boolean;
  /** It is involved in a conflict on this node: a description. */
  conflict: string | undefined;
  /** An output's rendered value is invalid on this node: a description. */
  invalid: string | undefined;
  /** An output is not set on this node because it reads an input the node lacks. */
  missing: boolean;
  /** The node's write failed (an admission policy, annotations over the apiserver's limit): why. */
  failed: string | undefined;
}

type RuleCount = 'matchedNodes' | 'appliedNodes';

/** A NodeLabelRule's status from its standings. */
export class StatusWriter extends PolicyStatusWriter<RuleObject, RuleStanding, RuleCount> {
  private readonly l: Labels;

  constructor(l: Labels) {
    super(l, l.ruleObjects, {
      name: 'labels-rule-status',
      fieldManager: FIELD_MANAGER,
      // Things a user can fix: a rule that is invalid, conflicts, or renders invalid values.
      warnings: [
        { type: 'Invalid', status: 'True', event: 'InvalidRule' },
        { type: 'Conflicting', status: 'True', event: 'Conflict' },
        { type: 'Ready', status: 'False', reason: 'InvalidOutput' },
      ],
    });
    this.l = l;
  }

  protected report(obj: RuleObject, standings: RuleStanding[]): StatusReport<RuleCount> {
    const crName = obj.metadata!.name!;
    const ruleName = ruleNameOf(crName);
    let matchedNodes = 0;
    let appliedNodes = 0;
    let missingNodes = 0;
    const conflicts: string[] = [];
    const invalid: string[] = [];
    const failed: string[] = [];
    for (const s of standings) {
      if (s.matched) matchedNodes++;
      if (s.applied) appliedNodes++;
      if (s.missing) missingNodes++;
      if (s.conflict && !conflicts.includes(s.conflict)) conflicts.push(s.conflict);
      if (s.invalid) invalid.push(s.invalid);
      if (s.failed) failed.push(s.failed);
    }
    const errors = this.l.ruleErrors(crName, ruleName);
    const ready =
      errors.length === 0 &&
      conflicts.length === 0 &&
      invalid.length === 0 &&
      failed.length === 0 &&
      appliedNodes === matchedNodes;
    const reason = errors.length
      ? 'Invalid'
      : conflicts.length
        ? 'Conflicting'
        : invalid.length
          ? 'InvalidOutput'
          : failed.length
            ? 'WriteFailed'
            : ready
              ? 'Applied'
              : 'Progressing';
    // A skipped output is part of the truth about the rule, Ready or not.
    const skipped = missingNodes
      ? `; on ${missingNodes} of them an output reads an input the node lacks and is not set (berth explain node NAME)`
      : '';
    const message = ready
      ? `applied to ${appliedNodes} of ${matchedNodes} matching nodes${skipped}`
      : invalid.length
        ? `${invalid.length} of ${matchedNodes} matching nodes skip an output whose rendered value is invalid: ${invalid.slice(0, 3).join(' | ')}`
        : failed.length
          ? `${failed.length} of ${matchedNodes} matching nodes could not be written (retried): ${failed.slice(0, 3).join(' | ')}`
          : `${appliedNodes} of ${matchedNodes} matching nodes carry the rule's outputs${skipped}`;
    return {
      counts: {
        matchedNodes: errors.length ? 0 : matchedNodes,
        appliedNodes: errors.length ? 0 : appliedNodes,
      },
      conditions: [
        {
          type: 'Invalid',
          status: errors.length > 0,
          reason: errors.length ? 'InvalidSpec' : 'Valid',
          message: errors.join('; ').slice(0, 2000),
        },
        {
          type: 'Conflicting',
          status: conflicts.length > 0,
          reason: conflicts.length ? 'OutputConflict' : 'NoConflict',
          message: conflicts.length
            ? `${conflicts.slice(0, 3).join(' | ')}${conflicts.length > 3 ? ` (+${conflicts.length - 3} more)` : ''}`
            : '',
        },
        { type: 'Ready', status: ready, reason, message: message.slice(0, 2000) },
      ],
    };
  }
}

/** The labels-rule-status controller: its status writer, and the key ownership a rule may break. */
export function setupStatusWriter(l: Labels): StatusWriter {
  const status = new StatusWriter(l);
  status.controller.watch(l.keys, () => l.ruleObjects.keys());
  return status;
}
