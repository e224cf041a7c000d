// A real Prometheus (built from controlplane/prometheus) on 127.0.0.1 for a test: it scrapes the
// targets given every second and evaluates the rule files given every second, and is asked through
// its HTTP API, as Grafana and Alertmanager ask it.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { ensurePrometheus } from '../../src/sandbox/build.ts';
import { freePorts } from '../../src/sandbox/net.ts';
import { waitFor } from './wait.ts';

export interface Alert {
  labels: Record<string, string>;
  annotations: Record<string, string>;
  state: 'pending' | 'firing';
}

export interface PrometheusProcess {
  url: string;
  /** An instant query's result (vector samples: labels and value). */
  query(expr: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  /** The active alerts (pending or firing). */
  alerts(): Promise<Alert[]>;
  output(): string;
  stop(): Promise<void>;
}

async function api<T>(url: string): Promise<T> {
  const r = await fetch(url);
  const body = (await r.json()) as { status: string; data: T; error?: string };
  if (body.status !== 'success') throw new Error(`${url}: ${body.error ?? r.status}`);
  return body.data;
}

/** Starts Prometheus scraping `targets` (host:port) with `rules` (rule-file contents) loaded. */
export async function startPrometheus(targets: string[], rules: unknown): Promise<PrometheusProcess> {
  const { prometheus } = await ensurePrometheus();
  const dir = mkdtempSync(join(tmpdir(), 'berth-prometheus-'));
  writeFileSync(join(dir, 'rules.yaml'), stringify(rules));
  writeFileSync(
    join(dir, 'prometheus.yaml'),
    stringify({
      global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
      rule_files: [join(dir, 'rules.yaml')],
      scrape_configs: [{ job_name: 'berth', static_configs: [{ targets }] }],
    }),
  );
  const [port] = (await freePorts(1)) as [number];
  const child = spawn(
    prometheus,
    [
      `--config.file=${join(dir, 'prometheus.yaml')}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--storage.tsdb.retention.time=1h',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  child.stderr.on('data', (d: Buffer) => (out += d));
  const orphaned = () => child.kill('SIGTERM');
  process.once('exit', orphaned);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    process.off('exit', orphaned);
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitFor(
      'Prometheus ready',
      async () => {
        if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}\n${out}`);
        return fetch(`${url}/-/ready`).then(
          (r) => r.ok,
          () => false,
        );
      },
      { timeoutMs: 60_000 },
    );
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    url,
    query: (expr) =>
      api<{ result: { metric: Record<string, string>; value: [number, string] }[] }>(
        `${url}/api/v1/query?query=${encodeURIComponent(expr)}`,
      ).then((d) => d.result),
    alerts: () => api<{ alerts: Alert[] }>(`${url}/api/v1/alerts`).then((d) => d.alerts),
    output: () => out,
    stop,
  };
}
