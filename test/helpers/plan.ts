// `berth plan -o json` as a user runs it against a sandbox: its exit code (0 no change, 2 changes)
// and the plan it printed; any other exit fails the test with what it said.
import assert from 'node:assert/strict';
import type { Plan } from '../../src/plan.ts';
import type { Sandbox } from '../../src/sandbox/sandbox.ts';
import { runBerthCli } from './berth.ts';

export function runPlan(sandbox: Sandbox, args: string[]): { status: number | null; plan: Plan } {
  const r = runBerthCli(['plan', '--kubeconfig', sandbox.kubeconfigPath, '-o', 'json', ...args]);
  assert.ok(r.status === 0 || r.status === 2, `berth plan exited ${r.status}: ${r.stderr}${r.stdout}`);
  return { status: r.status, plan: JSON.parse(r.stdout) as Plan };
}
