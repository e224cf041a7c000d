// `berth plan` as the integration tests run it: YAML files written for it and for kubectl, and its
// JSON plan read back (exit code 0 or 2, anything else fails the test).
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import type { Plan } from '../../src/plan.ts';
import { runBerthCli } from './berth.ts';

/** Writes `objects` as one YAML file of several documents in a directory of its own; its path. */
export function manifests(prefix: string): (name: string, objects: unknown[]) => string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return (name, objects) => {
    const path = join(dir, name);
    writeFileSync(path, objects.map((o) => stringify(o)).join('---\n'));
    return path;
  };
}

/** `berth plan ARGS -o json` against the cluster of `kubeconfig`. */
export function runPlan(kubeconfig: string, ...args: string[]): { status: number | null; plan: Plan } {
  const r = runBerthCli(['plan', '--kubeconfig', kubeconfig, '-o', 'json', ...args]);
  assert.ok(r.status === 0 || r.status === 2, `berth plan exited ${r.status}: ${r.stderr}`);
  return { status: r.status, plan: JSON.parse(r.stdout) as Plan };
}
