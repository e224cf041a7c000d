// Loading rules for the read-only commands (explain, dry run): NodeLabelRules from the API, rule
// files from a directory, or rules from local files given on the command line.
import { readFile, stat } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { yaml } from '../runtime/platform/yaml.ts';
import type { KubeClient } from '../runtime/client/client.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { compileRule } from './decide/nodes.ts';
import { formatFileError, holdsOf, parseRuleFile, scanRuleDir, type Hold } from './files.ts';
import { type Rule } from './types.ts';
import { NodeLabelRule } from './crd.ts';

export interface LoadedRules {
  rules: Rule[];
  /** Rules that could not be compiled, with why. */
  errors: string[];
  /** Rule files or directories Berth cannot use, whose labels it keeps where it set them. */
  holds?: Hold[];
}

/** The rules Berth would run with: every NodeLabelRule in the cluster, plus the rule directory if given. */
export async function clusterRules(client: KubeClient, labelDir?: string): Promise<LoadedRules> {
  const list = await client.list(NodeLabelRule.ref);
  const out: LoadedRules = { rules: [], errors: [] };
  for (const obj of list.items) {
    const c = compileRule({ ...obj, apiVersion: NodeLabelRule.apiVersion, kind: NodeLabelRule.kind });
    if (c.rule) out.rules.push(c.rule);
    else out.errors.push(`NodeLabelRule ${obj.metadata?.name}: ${c.errors.join('; ')}`);
  }
  if (labelDir) {
    const scanned = await scanRuleDir(labelDir);
    out.rules.push(...scanned.rules);
    out.errors.push(...scanned.errors.map(formatFileError));
    out.holds = holdsOf(scanned);
  }
  return out;
}

/**
 * Rules from a local path: a directory of rule files, a YAML file of NodeLabelRules, or a single
 * k8s-auto-labeller rule file (its namespace and label come from its path).
 */
export async function localRules(path: string): Promise<LoadedRules> {
  if ((await stat(path)).isDirectory()) {
    const scanned = await scanRuleDir(path);
    return { rules: scanned.rules, errors: scanned.errors.map(formatFileError) };
  }
  const content = await readFile(path);
  const docs = /\.ya?ml$/.test(path) ? yaml().parseAllDocuments(content.toString('utf8')) : [];
  if (docs.length > 0) {
    const out: LoadedRules = { rules: [], errors: [] };
    for (const doc of docs) {
      if (doc.errors.length) {
        out.errors.push(`${path}: ${doc.errors.map((e) => e.message).join('; ')}`);
        continue;
      }
      const obj = doc.toJS() as KubeObject | null;
      if (!obj) continue;
      const c = compileRule(obj);
      if (c.rule) out.rules.push(c.rule);
      else out.errors.push(`${path}: ${c.errors.join('; ')}`);
    }
    return out;
  }
  const parsed = parseRuleFile(path, basename(dirname(path)), basename(path), content);
  return { rules: parsed.rule ? [parsed.rule] : [], errors: parsed.errors.map(formatFileError) };
}
