// What the page shows of derived labels: the rule behind each key `berth-labels` owns on a node,
// read from the cached NodeLabelRules (rule files are not cached: their keys show without a rule).
import type { PageHooks } from '../capability.ts';
import type { SlimNode } from '../policy/slim.ts';
import { compileRule, decide, type Output } from './decide/nodes.ts';
import { nodeView } from './match.ts';
import { FIELD_MANAGER, type Rule } from './types.ts';
import { NodeLabelRule } from './crd.ts';

const ruleText = (r: Rule): string =>
  r.source.kind === 'File' ? `file ${r.source.path}` : `NodeLabelRule ${r.source.name}`;

/** The rule behind each key the rules derive on `node`, by kind and key (undefined: none of them). */
export function ruleSource(node: SlimNode, rules: Rule[]): (kind: string, key: string) => string | undefined {
  const outputs = new Map<string, Output>(
    decide(nodeView(node), rules).outputs.map((o) => [`${o.kind} ${o.key}`, o]),
  );
  return (kind, key) => {
    const o = outputs.get(`${kind} ${key}`);
    const r = o && rules.find((x) => x.name === o.rule);
    return r ? ruleText(r) : undefined;
  };
}

export const labelsPage: PageHooks = {
  view(ctx) {
    const rules = ctx
      .informer(NodeLabelRule)
      .derive((objs) =>
        objs.flatMap(
          (o) =>
            compileRule({ ...o, apiVersion: NodeLabelRule.apiVersion, kind: NodeLabelRule.kind }).rule ?? [],
        ),
      );
    return { keySource: { fieldManager: FIELD_MANAGER, of: (node) => ruleSource(node, rules()) } };
  },
};
