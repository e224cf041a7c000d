// test-driver: alone
// test-driver: prometheus
// Berth's alerting rules as its users load them: the chart's PrometheusRule and the kustomize
// Component's, rendered by Helm and kubectl, pass `promtool check rules`; and a real Prometheus
// scraping `berth run --controllers gates` with the rules loaded fires BerthPolicyInvalid for a
// NodeStartupGate whose spec is invalid, and resolves it once the gate is fixed. Alone: Berth's
// gates controller would write the status of the gates of files running beside it.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, test } from 'node:test';
import { parse, parseAllDocuments } from 'yaml';
import { installCrds } from '../../src/cli/install.ts';
import { NodeStartupGate } from '../../src/gates/crd.ts';
import type { KubeObject } from '../../src/runtime/api/meta.ts';
import { ensureBinaries, ensureHelm, ensurePrometheus } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import { testSandbox, uniqueName } from '../helpers/cluster.ts';
import { startPrometheus, type PrometheusProcess } from '../helpers/prometheus.ts';
import { waitFor } from '../helpers/wait.ts';

const sandbox = testSandbox();
const client = sandbox.client();
const dir = mkdtempSync(join(tmpdir(), 'berth-monitoring-'));
const gate = uniqueName('monitoring');
const rulesFile = join(packageRoot(), 'deploy/helm/berth/files/prometheus-rules.yaml');
let berth: BerthProcess | undefined;
let prometheus: PrometheusProcess | undefined;

before(async () => {
  await installCrds(client);
});

after(async () => {
  await prometheus?.stop();
  await berth?.stop();
  await client.delete(NodeStartupGate.ref, gate).catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
  client.close();
});

/** `promtool check rules` on the groups of a PrometheusRule as rendered. */
async function checkRules(name: string, rendered: string): Promise<string> {
  const rule = parseAllDocuments(rendered)
    .map((d) => d.toJS() as KubeObject & { spec?: { groups?: unknown[] } })
    .find((o) => o?.kind === 'PrometheusRule');
  assert.ok(rule?.spec?.groups?.length, `${name}: no PrometheusRule with groups in\n${rendered}`);
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, JSON.stringify({ groups: rule.spec.groups }));
  const { promtool } = await ensurePrometheus();
  return execFileSync(promtool, ['check', 'rules', file], { encoding: 'utf8' });
}

test('promtool accepts the rules the chart and the kustomize Component render, every alert with a runbook', async () => {
  const [helm, { kubectl }] = await Promise.all([ensureHelm(), ensureBinaries()]);
  const chart = execFileSync(
    helm,
    [
      'template',
      'berth',
      join(packageRoot(), 'deploy/helm/berth'),
      '--set',
      'prometheusRule.enabled=true',
      '--show-only',
      'templates/prometheusrule.yaml',
    ],
    { encoding: 'utf8' },
  );
  const overlay = join(dir, 'overlay');
  execFileSync('mkdir', ['-p', overlay]);
  const rel = (d: string) => relative(overlay, join(packageRoot(), 'deploy/kustomize', d));
  writeFileSync(
    join(overlay, 'kustomization.yaml'),
    JSON.stringify({ resources: [rel('default')], components: [rel('monitoring')] }),
  );
  const kustomized = execFileSync(kubectl, ['kustomize', overlay], { encoding: 'utf8' });
  const source = parse(readFileSync(rulesFile, 'utf8')) as {
    groups: { rules: { alert: string; annotations: Record<string, string> }[] }[];
  };
  const alerts = source.groups.flatMap((g) => g.rules);
  for (const [name, rendered] of [
    ['chart', chart],
    ['kustomize', kustomized],
  ] as const)
    assert.match(await checkRules(name, rendered), new RegExp(`SUCCESS: ${alerts.length} rules found`), name);
  // Every runbook_url names an anchor of docs/operations/runbooks.md: a heading named after its alert.
  const runbooks = readFileSync(join(packageRoot(), 'docs/operations/runbooks.md'), 'utf8');
  for (const a of alerts) {
    assert.match(a.annotations['runbook_url'] ?? '', new RegExp(`runbooks\\.md#${a.alert.toLowerCase()}$`));
    assert.match(runbooks, new RegExp(`^## ${a.alert}$`, 'm'), `runbook of ${a.alert}`);
  }
});

test('a broken policy fires BerthPolicyInvalid in a Prometheus scraping Berth, and fixing it resolves the alert', async () => {
  berth = await startBerth(sandbox, ['--controllers=gates']);
  // Each rule's `for` is how long production waits before it trusts a condition: here the
  // expressions are what is tested, so every alert fires at its first evaluation.
  const rules = parse(readFileSync(rulesFile, 'utf8')) as { groups: { rules: Record<string, unknown>[] }[] };
  for (const r of rules.groups.flatMap((g) => g.rules)) delete r['for'];
  prometheus = await startPrometheus([`127.0.0.1:${berth.metricsPort}`], rules);
  const p = prometheus;

  // The metrics of this issue, through a scrape: what runs (the webhook thread's certificate below).
  const info = await waitFor('berth_build_info scraped', async () => (await p.query('berth_build_info'))[0]);
  assert.equal(info.metric['node_version'], process.version);

  // A gate that waits for itself passes the CRD's schema but not Berth's checks (Invalid); `after`,
  // unlike the taint, may change.
  const applyGate = (after: string[]) =>
    client.apply(
      NodeStartupGate.ref,
      {
        apiVersion: NodeStartupGate.apiVersion,
        kind: NodeStartupGate.kind,
        metadata: { name: gate },
        spec: {
          taint: { key: `monitoring.example.com/${gate}`, effect: 'NoSchedule' },
          nodeSelector: { matchLabels: { [`monitoring.example.com/${gate}`]: 'true' } },
          requirements: { pods: [{ namespace: 'default', daemonSet: 'agent' }] },
          after,
        },
      },
      { fieldManager: 'test-author', force: true },
    );
  const mine = async () =>
    (await p.alerts()).filter(
      (a) => a.labels['alertname'] === 'BerthPolicyInvalid' && a.labels['name'] === gate,
    );

  await applyGate([gate]);
  const [firing] = await waitFor(
    'BerthPolicyInvalid firing for the gate',
    async () => {
      const a = await mine();
      return a.some((x) => x.state === 'firing') && a;
    },
    { timeoutMs: 60_000, observe: () => p.alerts() },
  );
  assert.equal(firing!.labels['kind'], 'NodeStartupGate');
  assert.match(firing!.annotations['runbook_url'] ?? '', /runbooks\.md#berthpolicyinvalid$/);

  // Fixed: Invalid turns False, the expression selects nothing, and the alert is no longer active.
  await applyGate([]);
  await waitFor('BerthPolicyInvalid resolved', async () => (await mine()).length === 0, {
    timeoutMs: 60_000,
    observe: () => p.alerts(),
  });
  const now = await p.query(`berth_policy_condition{name="${gate}", type="Invalid"}`);
  assert.deepEqual(now.map((s) => `${s.metric['status']}=${s.value[1]}`).sort(), ['False=1', 'True=0']);

  // The gate, valid now, is enforced: its Node webhook started the webhook thread, which serves and
  // reports its certificate.
  const [expiry] = await waitFor('the serving certificate expiry scraped', async () => {
    const r = await p.query('berth_certificate_expiration_timestamp_seconds{server="webhook"} - time()');
    return r.length > 0 && r;
  });
  assert.ok(Number(expiry!.value[1]) > 30 * 86400, `expires in ${expiry!.value[1]} s`);
});
