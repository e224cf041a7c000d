// Generated NodeLabelRules, valid and invalid, with hostile regular expressions, templates, keys and
// values, against generated nodes. Whatever comes in: compiling and deciding never throw and stay
// fast, every output Berth would write is valid for its kind, a missing template input sets
// nothing, and no message carries a raw control character or an unbounded quote.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { compileRule, decide, type OutputKind } from '../../../src/labels/decide/nodes.ts';
import { explainNodeLabels } from '../../../src/labels/explain.ts';
import { nodeView } from '../../../src/labels/match.ts';
import type { Rule } from '../../../src/labels/types.ts';
import { controlCharacterError, outputValueError } from '../../../src/labels/values.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { withSeed } from '../../helpers/prng.ts';
import { nodeObject, ruleSpec } from '../../helpers/rulegen.ts';

const RULES = 300;
const NODES_PER_RULE = 4;

/** Fails unless `text` is free of raw control characters and line breaks, as every message must be. */
const assertPrintable = (text: string, where: string) =>
  assert.equal(controlCharacterError(text), undefined, `${where}: ${JSON.stringify(text)}`);

test(`${RULES} generated NodeLabelRules on ${NODES_PER_RULE} generated nodes each`, async (t) => {
  await withSeed('rule fuzz', (r) => {
    t.diagnostic(`seed ${r.seed} (BERTH_FUZZ_SEED replays it)`);
    let valid = 0;
    for (let i = 0; i < RULES; i++) {
      const s = ruleSpec(r);
      const where = `case ${i}: ${JSON.stringify(s).slice(0, 300)}`;
      const t0 = performance.now();
      const c = compileRule({
        apiVersion: 'berth.dev/v1alpha1',
        kind: 'NodeLabelRule',
        metadata: { name: `r${i}` },
        spec: s,
      });
      assert.ok(c.rule || c.errors.length > 0, where);
      for (const e of c.errors) {
        assertPrintable(e, `${where}: error`);
        assert.ok(e.length <= 2000, `${where}: ${e.length}-character error`);
      }
      if (!c.rule) continue;
      valid++;
      for (let n = 0; n < NODES_PER_RULE; n++) {
        const obj = nodeObject(r, `fuzz-${n}`);
        checkDecision(c.rule, obj, where);
        for (const line of explainNodeLabels(obj, [c.rule])) assertPrintable(line, `${where}: explain line`);
      }
      const ms = performance.now() - t0;
      assert.ok(ms < 2000, `${where}: compiling and deciding took ${ms.toFixed(0)} ms`);
    }
    t.diagnostic(`${valid} of ${RULES} generated rules were valid`);
    // The generator must reach both sides, or the invariants above prove little.
    assert.ok(valid > RULES / 20 && valid < RULES - RULES / 20, `${valid} of ${RULES} valid`);
  });
});

function checkDecision(rule: Rule, obj: KubeObject, where: string): void {
  const d = decide(nodeView(obj), [rule]);
  const outputs: [OutputKind, Record<string, string>, Record<string, string>][] = [
    ['label', d.labels, rule.labels],
    ['annotation', d.annotations, rule.annotations],
  ];
  for (const [kind, got, declared] of outputs) {
    for (const [k, v] of Object.entries(got)) {
      assert.ok(k in declared, `${where}: ${kind} ${k} is not an output of the rule`);
      assert.equal(
        outputValueError(kind, v),
        undefined,
        `${where}: ${kind} ${k}=${JSON.stringify(v)} is invalid`,
      );
    }
  }
  for (const m of d.missingInputs) {
    const got = m.kind === 'label' ? d.labels : d.annotations;
    assert.ok(!(m.key in got), `${where}: ${m.kind} ${m.key} set although an input is missing`);
  }
  for (const e of [...d.missingInputs, ...d.renderErrors]) assertPrintable(e.message, where);
  for (const taint of d.taints) assert.equal(outputValueError('taint', taint.value ?? ''), undefined, where);
}
