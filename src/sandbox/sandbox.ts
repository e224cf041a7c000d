// The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
// as plain processes bound to 127.0.0.1 on free ports, one state folder per named sandbox; on
// request also an OCI registry and its token service.
import { spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer, connect } from 'node:net';
import https from 'node:https';
import { http } from '../runtime/platform/http.ts';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { KubeClient, resourcePath, type ClientOptions } from '../runtime/client/client.ts';
import { DNS1123_LABEL, Resources, type KubeObject, type ResourceRef } from '../runtime/api/meta.ts';
import type { PolicyRule } from '../runtime/api/rbac.ts';
import {
  createCertificateAuthority,
  createSigningKeyPair,
  loadCertificateAuthority,
  type CertificateAuthority,
} from '../runtime/webhook/certificates.ts';
import { ensureBinaries, ensureRegistry, type Binaries } from './build.ts';
import { hasCondition } from '../runtime/api/conditions.ts';
import { errorText } from '../runtime/observability/log.ts';
import { createNodes, KWOK_ANNOTATION, nodeNames, type NodeGroupInput } from './nodes.ts';
import { sandboxDir, stateDir } from './paths.ts';
import { stagesYaml } from './stages.ts';
import { registryInfo, writeRegistryFiles, type RegistryPorts, type SandboxRegistry } from './registry.ts';
import { berthRunArgs, type BerthPorts } from './berth.ts';

export const PROCESSES = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
] as const;
/** The registry's processes, started only when asked for (`up({ registry: true })`), token service first. */
export const REGISTRY_PROCESSES = ['registry-token', 'registry'] as const;
/** Berth itself, started only when asked for (`startBerth`, a federation's cells); stopped first. */
export const BERTH_PROCESS = 'berth' as const;
export type ProcessName =
  (typeof PROCESSES)[number] | (typeof REGISTRY_PROCESSES)[number] | typeof BERTH_PROCESS;

/** The token service runs on the Node running the sandbox, from the file beside this one (.ts or .js). */
const TOKEN_SERVER = fileURLToPath(
  new URL(`./token-server${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kwok: number;
}

interface State {
  name: string;
  kubernetesVersion: string;
  ports: Ports;
  pids: Partial<Record<ProcessName, number>>;
  binaries: Binaries;
  startedAt: string;
  registry?: { ports: RegistryPorts; binary: string; node: string };
  /** kube-apiserver writes an audit log (`up({ audit: true })`). */
  audit?: boolean;
  /** The Berth this sandbox runs (`startBerth`): node, its identity's kubeconfig, ports, its own flags. */
  berth?: { node: string; kubeconfig: string; ports: BerthPorts; args: string[] };
  /** The sandboxes this one is the management plane of, by city (a federation, federation.ts). */
  cells?: CellSandbox[];
  /**
   * The CA of the client certificate kube-apiserver presents to webhooks: set when it was started
   * presenting one (a sandbox started before it did presents none until it starts again).
   */
  webhookClientCa?: string;
}

/** A cell of a federation: the city it serves and the sandbox that runs it. */
export interface CellSandbox {
  city: string;
  sandbox: string;
}

export interface ProcessStatus {
  name: ProcessName;
  pid?: number;
  running: boolean;
  port: number;
}

export interface UpOptions {
  nodes?: NodeGroupInput[];
  fresh?: boolean;
  log?: (s: string) => void;
  /** How long the control plane and the nodes may take to come up, in ms; a build does not count. */
  timeoutMs?: number;
  /** Stops the build or the start-up; whatever this `up` started is stopped again. */
  signal?: AbortSignal;
  /** Provides the binaries (default: build what is missing); tests inject a slow or broken one. */
  build?: (log: (s: string) => void, signal?: AbortSignal) => Promise<Binaries>;
  /** Also run the OCI registry and its token service (building the registry the first time). */
  registry?: boolean;
  /** Provides the registry binary (default: build it if missing). */
  buildRegistry?: (log: (s: string) => void, signal?: AbortSignal) => Promise<string>;
  /**
   * kube-apiserver writes an audit log of every service account's requests (Metadata level: who,
   * verb, resource, response code) to `auditLogPath`. Taken into account when the control plane starts.
   */
  audit?: boolean;
}

/** The audit policy of `up({ audit: true })`: service accounts' requests at Metadata level, nothing else. */
const AUDIT_POLICY = {
  apiVersion: 'audit.k8s.io/v1',
  kind: 'Policy',
  omitStages: ['RequestReceived'],
  rules: [{ level: 'Metadata', userGroups: ['system:serviceaccounts'] }, { level: 'None' }],
};

/** Where each RBAC kind lives, for mintServiceAccount. */
const RBAC_REFS: Record<string, ResourceRef> = {
  ClusterRole: Resources.clusterRoles,
  ClusterRoleBinding: Resources.clusterRoleBindings,
  Role: Resources.roles,
  RoleBinding: Resources.roleBindings,
};

const SERVICE_CIDR = '10.96.0.0/16';
const SERVICE_IP = '10.96.0.1';

export class Sandbox {
  readonly name: string;
  readonly dir: string;
  private state: State | undefined;

  constructor(name = 'default') {
    if (!DNS1123_LABEL.test(name)) throw new Error(`sandbox name "${name}" must be a DNS label`);
    this.name = name;
    this.dir = sandboxDir(name);
    const statePath = join(this.dir, 'state.json');
    if (existsSync(statePath)) this.state = JSON.parse(readFileSync(statePath, 'utf8')) as State;
  }

  static list(): string[] {
    const root = join(stateDir(), 'sandboxes');
    if (!existsSync(root)) return [];
    return readdirSync(root).filter((n) => existsSync(join(root, n, 'state.json')));
  }

  get kubeconfigPath(): string {
    return join(this.dir, 'kubeconfig');
  }

  /** The audit log kube-apiserver writes when the sandbox was started with `audit`. */
  get auditLogPath(): string {
    return join(this.dir, 'logs', 'audit.log');
  }

  get exists(): boolean {
    return this.state !== undefined;
  }

  /**
   * The CA file of the client certificate the apiserver presents to webhooks, for `berth run
   * --webhook-client-ca`: its own CA, which signs nothing else (the sandbox CA signs every user's
   * certificate, and a tenant's must not pass). Undefined while the apiserver presents none.
   */
  get webhookClientCa(): string | undefined {
    return this.state?.webhookClientCa;
  }

  /** The apiserver's webhook client certificate, for a test that calls a webhook as the apiserver does. */
  get webhookClientCertificate(): { cert: string; key: string } | undefined {
    if (!this.state?.webhookClientCa) return undefined;
    const read = (f: string) => readFileSync(this.path('pki', f), 'utf8');
    return { cert: read('webhook-client.crt'), key: read('webhook-client.key') };
  }

  get ports(): Ports {
    if (!this.state) throw new Error(`sandbox ${this.name} has not been started`);
    return this.state.ports;
  }

  get server(): string {
    return `https://127.0.0.1:${this.ports.apiserver}`;
  }

  /** The registry's address, CA and push credentials; undefined when this sandbox runs no registry. */
  get registry(): SandboxRegistry | undefined {
    const r = this.state?.registry;
    return r && registryInfo(this.path('registry'), this.path('pki'), r.ports);
  }

  private path(...p: string[]): string {
    return join(this.dir, ...p);
  }

  private saveState(): void {
    writeFileSync(this.path('state.json'), JSON.stringify(this.state, null, 2));
  }

  client(opts?: ClientOptions): KubeClient {
    return KubeClient.fromFile(this.kubeconfigPath, opts);
  }

  /** Starts the sandbox, reusing a running one (or restarting a stopped one on its data) unless fresh. */
  async up(opts: UpOptions = {}): Promise<void> {
    const log = opts.log ?? (() => {});
    const { signal } = opts;
    if (opts.fresh) await this.destroy();
    const binaries = await (opts.build ?? ensureBinaries)(log, signal);
    // A registry this sandbox ran runs again after `down`, asked for or not, as its Berth does.
    const registry =
      opts.registry || this.state?.registry
        ? await (opts.buildRegistry ?? ensureRegistry)(log, signal)
        : undefined;
    signal?.throwIfAborted();
    // The start-up budget begins only now: a cold build, however long, never eats into it.
    const deadline = Date.now() + (opts.timeoutMs ?? 180_000);
    const status = this.status();
    const controlPlane = status.filter((p) => (PROCESSES as readonly string[]).includes(p.name));
    let started = false;
    let startedRegistry = false;
    try {
      if (this.state && controlPlane.every((p) => p.running) && (await this.apiserverReady())) {
        log(`sandbox ${this.name} is already running`);
      } else {
        if (status.some((p) => p.running)) await this.down();
        started = true;
        await this.start(binaries, log, deadline, signal, opts.audit ?? false);
      }
      if (registry !== undefined && !(await this.registryRunning())) {
        startedRegistry = true;
        await this.startRegistry(registry, log, deadline, signal);
      }
      if (opts.nodes?.length) await this.ensureNodes(opts.nodes, log, deadline, signal);
      // The Berth this sandbox ran (a cell's) runs again, as it ran: `down` stopped it with the rest.
      const berth = this.state?.berth;
      if (berth && !this.status().find((p) => p.name === BERTH_PROCESS)?.running)
        await this.restartBerth(berth, log, deadline, signal);
    } catch (e) {
      // A failed or interrupted start leaves nothing running; a sandbox that was already up stays up.
      if (started) {
        log(`stopping the processes of sandbox ${this.name} that this start-up launched`);
        await this.down().catch((err: unknown) => log(`could not stop sandbox ${this.name}: ${String(err)}`));
      } else if (startedRegistry) {
        log(`stopping the registry of sandbox ${this.name}, which this start-up launched`);
        await this.stopRegistry().catch((err: unknown) =>
          log(`could not stop the registry of sandbox ${this.name}: ${String(err)}`),
        );
      }
      throw e;
    }
  }

  private async registryRunning(): Promise<boolean> {
    const procs = this.status().filter((p) => (REGISTRY_PROCESSES as readonly string[]).includes(p.name));
    return procs.length > 0 && procs.every((p) => p.running) && (await this.healthy('registry'));
  }

  /**
   * Starts again the Berth this sandbox ran, with its flags: its kubeconfig names the apiserver's
   * address now (it moves when its old port was taken), its ports are the ones it had where free.
   * The cluster is up whatever its Berth does: one that does not start is said and stopped, not fatal.
   */
  private async restartBerth(
    berth: NonNullable<State['berth']>,
    log: (s: string) => void,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<void> {
    const logFile = this.path('logs', 'berth.log');
    try {
      const kubeconfig = parseYaml(readFileSync(berth.kubeconfig, 'utf8')) as {
        clusters: { cluster: { server: string } }[];
      };
      for (const c of kubeconfig.clusters) c.cluster.server = this.server;
      writeFileAtomic(berth.kubeconfig, toYaml(kubeconfig));
      const [metrics, health] = (await freePorts(2, [berth.ports.metrics, berth.ports.health])) as [
        number,
        number,
      ];
      this.requireState().berth = { ...berth, ports: { metrics, health } };
      this.saveState();
      this.startProcess(BERTH_PROCESS);
      await this.waitHealthy(BERTH_PROCESS, deadline, signal);
      log(`berth is running again (${berth.args.join(' ')}), log ${logFile}`);
    } catch (e) {
      signal?.throwIfAborted();
      await this.stopProcess(BERTH_PROCESS).catch(() => {});
      log(`berth did not start again (${errorText(e)}): see ${logFile}`);
    }
  }

  /** Starts the registry and its token service beside a running control plane (restarting a broken pair). */
  private async startRegistry(
    binary: string,
    log: (s: string) => void,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<void> {
    await this.stopRegistry();
    const st = this.requireState();
    const was = st.registry?.ports;
    const [registry, token] = (await freePorts(2, was ? [was.registry, was.token] : [])) as [number, number];
    const ports = { registry, token };
    await writeRegistryFiles(this.path('registry'), this.path('pki'), () => this.ca(), ports, this.name);
    st.registry = { ports, binary, node: realpathSync(process.execPath) };
    this.saveState();
    const started = Date.now();
    for (const p of REGISTRY_PROCESSES) {
      this.startProcess(p);
      await this.waitHealthy(p, deadline, signal);
      log(`${p} is up (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    }
  }

  /**
   * Runs `berth run` with `args` as a process of this sandbox (its log `logs/berth.log`, stopped
   * first by `down`), as a user installs it: under a ServiceAccount bound exactly to `rbac` (the
   * roles `berth manifests` prints). Waits until it is ready; a Berth already running with the same
   * flags is kept.
   */
  async startBerth(
    rbac: KubeObject[],
    args: string[],
    deadline = Date.now() + 120_000,
    signal?: AbortSignal,
  ): Promise<void> {
    const st = this.requireState();
    const running = this.status().find((p) => p.name === BERTH_PROCESS)?.running;
    if (!running || JSON.stringify(st.berth?.args) !== JSON.stringify(args)) {
      await this.stopProcess(BERTH_PROCESS);
      // A sandbox's Berth may run for weeks: its token must outlive a day.
      const kubeconfig = await this.mintServiceAccount(rbac, 90 * 24 * 3600);
      const was = st.berth?.ports;
      const [metrics, health] = (await freePorts(2, was ? [was.metrics, was.health] : [])) as [
        number,
        number,
      ];
      st.berth = { node: realpathSync(process.execPath), kubeconfig, ports: { metrics, health }, args };
      this.saveState();
      this.startProcess(BERTH_PROCESS);
    }
    await this.waitHealthy(BERTH_PROCESS, deadline, signal);
  }

  /** The cells this sandbox is the management plane of (a federation, federation.ts). */
  get cells(): CellSandbox[] {
    return this.state?.cells ?? [];
  }

  /** Records a cell of this management plane (once per sandbox), so that status and down find it. */
  addCell(cell: CellSandbox): void {
    const st = this.requireState();
    st.cells = [...(st.cells ?? []).filter((c) => c.sandbox !== cell.sandbox), cell];
    this.saveState();
  }

  /** Stops the registry and its token service; the control plane keeps running. */
  async stopRegistry(): Promise<void> {
    for (const p of [...REGISTRY_PROCESSES].reverse()) await this.stopProcess(p);
  }

  private async start(
    binaries: Binaries,
    log: (s: string) => void,
    deadline: number,
    signal: AbortSignal | undefined,
    audit: boolean,
  ): Promise<void> {
    mkdirSync(this.path('logs'), { recursive: true });
    const started = Date.now();
    const was = this.state?.ports;
    const [etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok] = await freePorts(
      6,
      was
        ? [was.etcdClient, was.etcdPeer, was.apiserver, was.controllerManager, was.scheduler, was.kwok]
        : [],
    );
    // A restarted management plane still knows its cells, so that `down` takes them along; a
    // restarted sandbox, the registry and the Berth it ran (up starts them again, on their ports).
    const { cells, registry, berth } = this.state ?? {};
    this.state = {
      name: this.name,
      kubernetesVersion: binaries.kubernetesVersion,
      ports: { etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kwok } as Ports,
      pids: {},
      binaries,
      startedAt: new Date().toISOString(),
      ...(audit ? { audit } : {}),
      ...(cells ? { cells } : {}),
      ...(registry ? { registry } : {}),
      ...(berth ? { berth } : {}),
    };
    await this.ensurePki();
    await this.ensureWebhookClientPki();
    this.writeAdmissionConfiguration();
    this.state.webhookClientCa = this.path('pki', 'webhook-client-ca.crt');
    this.writeKubeconfigs();
    this.writeSchedulerConfig();
    writeFileSync(this.path('kwok-stages.yaml'), stagesYaml());
    if (audit) writeFileSync(this.path('audit-policy.yaml'), toYaml(AUDIT_POLICY));
    this.saveState();
    for (const p of PROCESSES) {
      this.startProcess(p);
      await this.waitHealthy(p, deadline, signal);
      log(`${p} is up (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    }
    await this.waitFor('the default service account', deadline, signal, async () => {
      // A process that answered its health check and then exited (its port taken meanwhile, say)
      // would leave this wait to time out: named at once instead, with the end of its log.
      for (const p of PROCESSES) if (!this.running(p)) throw new Error(`${p} exited${this.lastLines(p)}`);
      try {
        await this.client().get(Resources.serviceAccounts, 'default', 'default');
        return true;
      } catch {
        return false;
      }
    });
  }

  /** Starts one process of a sandbox whose state exists (tests restart kube-apiserver this way). */
  startProcess(p: ProcessName): void {
    const st = this.requireState();
    const out = openSync(this.path('logs', `${p}.log`), 'a');
    const child = spawn(this.binaryOf(p), this.argsOf(p), {
      detached: true,
      stdio: ['ignore', out, out],
      // The registry reads every REGISTRY_* variable as a configuration key, and without
      // OTEL_TRACES_EXPORTER=none it exports traces to localhost:4318; the token service must not
      // inherit a test runner's NODE_* variables: both get a clean environment.
      ...(p === 'registry' ? { env: { OTEL_TRACES_EXPORTER: 'none' } } : {}),
      ...(p === 'registry-token' ? { env: {} } : {}),
    });
    closeSync(out);
    child.unref();
    if (!child.pid) throw new Error(`could not start ${p}`);
    st.pids[p] = child.pid;
    this.saveState();
  }

  /** Signals one process and waits until it has exited. */
  async stopProcess(p: ProcessName, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 15_000): Promise<void> {
    const st = this.requireState();
    const pid = st.pids[p];
    if (pid === undefined || !this.isOurs(p, pid)) return;
    try {
      process.kill(-pid, signal);
    } catch {
      // already gone
    }
    const until = Date.now() + timeoutMs;
    // /proc/PID/exe disappears early in an exit, before the process has closed its sockets: wait
    // until it is a zombie or gone, and its port is free, so that a restart can bind it again.
    while (!isZombie(pid)) {
      if (Date.now() > until) process.kill(-pid, 'SIGKILL');
      await sleep(50);
    }
    const port = this.status().find((s) => s.name === p)!.port;
    while ((await isListening(port)) && Date.now() < until + 5000) await sleep(50);
    delete st.pids[p];
    this.saveState();
  }

  async waitHealthy(p: ProcessName, deadline = Date.now() + 60_000, signal?: AbortSignal): Promise<void> {
    try {
      await this.waitFor(`${p} to be healthy`, deadline, signal, async () => {
        if (!this.running(p)) throw new Error(`${p} exited${this.lastLines(p)}`);
        return this.healthy(p);
      });
    } catch (e) {
      if (e instanceof WaitTimeout) throw new Error(`${e.message}${this.lastLines(p)}`, { cause: e });
      throw e;
    }
  }

  private running(p: ProcessName): boolean {
    return !!this.status().find((s) => s.name === p)?.running;
  }

  /** The end of a process's log, for a message saying it failed. */
  private lastLines(p: ProcessName): string {
    const log = this.path('logs', `${p}.log`);
    return `; the last lines of ${log}:\n${tail(log)}`;
  }

  private requireState(): State {
    if (!this.state) throw new Error(`sandbox ${this.name} has not been started`);
    return this.state;
  }

  private binaryOf(p: ProcessName): string {
    const { binaries: b, registry, berth } = this.requireState();
    return {
      etcd: b.etcd,
      'kube-apiserver': b.kubeApiserver,
      'kube-controller-manager': b.kubeControllerManager,
      'kube-scheduler': b.kubeScheduler,
      kwok: b.kwok,
      registry: registry?.binary ?? '',
      'registry-token': registry?.node ?? '',
      berth: berth?.node ?? '',
    }[p];
  }

  private argsOf(p: ProcessName): string[] {
    const { ports, binaries, audit, berth, webhookClientCa } = this.requireState();
    const pki = (f: string) => this.path('pki', f);
    const kubeconfig = this.path('kubeconfig');
    switch (p) {
      case 'etcd':
        return [
          '--name=berth',
          `--data-dir=${this.path('etcd')}`,
          `--listen-client-urls=http://127.0.0.1:${ports.etcdClient}`,
          `--advertise-client-urls=http://127.0.0.1:${ports.etcdClient}`,
          `--listen-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
          `--initial-advertise-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
          `--initial-cluster=berth=http://127.0.0.1:${ports.etcdPeer}`,
          // A sandbox trades durability across power loss for speed; its data is disposable.
          '--unsafe-no-fsync=true',
          '--quota-backend-bytes=8589934592',
          '--log-level=warn',
        ];
      case 'kube-apiserver':
        return [
          `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
          '--bind-address=127.0.0.1',
          '--advertise-address=127.0.0.1',
          // Endpoints may not be loopback addresses: nothing in the sandbox uses the kubernetes Service.
          '--endpoint-reconciler-type=none',
          `--secure-port=${ports.apiserver}`,
          `--tls-cert-file=${pki('apiserver.crt')}`,
          `--tls-private-key-file=${pki('apiserver.key')}`,
          `--client-ca-file=${pki('ca.crt')}`,
          '--authorization-mode=Node,RBAC',
          `--service-cluster-ip-range=${SERVICE_CIDR}`,
          '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
          `--service-account-signing-key-file=${pki('sa.key')}`,
          `--service-account-key-file=${pki('sa.pub')}`,
          '--allow-privileged=true',
          ...(webhookClientCa ? [`--admission-control-config-file=${this.path('admission.yaml')}`] : []),
          // Room for benchmarks with thousands of nodes on one machine.
          '--max-requests-inflight=1600',
          '--max-mutating-requests-inflight=800',
          '--profiling=false',
          '--v=1',
          ...(audit
            ? [
                `--audit-policy-file=${this.path('audit-policy.yaml')}`,
                `--audit-log-path=${this.auditLogPath}`,
                // Whole lines in one file: a reader never sees half an event or a rotated file.
                '--audit-log-mode=blocking',
                '--audit-log-maxsize=0',
              ]
            : []),
        ];
      case 'kube-controller-manager':
        return [
          `--kubeconfig=${kubeconfig}`,
          `--authentication-kubeconfig=${kubeconfig}`,
          `--authorization-kubeconfig=${kubeconfig}`,
          `--root-ca-file=${pki('ca.crt')}`,
          `--service-account-private-key-file=${pki('sa.key')}`,
          '--leader-elect=false',
          '--bind-address=127.0.0.1',
          `--secure-port=${ports.controllerManager}`,
          '--kube-api-qps=500',
          '--kube-api-burst=1000',
          // kwok renews node leases every 30 s (lease duration 120 s); allow for a loaded machine.
          '--node-monitor-grace-period=180s',
          '--concurrent-daemonset-syncs=5',
          '--profiling=false',
          '--v=1',
        ];
      case 'kube-scheduler':
        return [
          `--config=${this.path('scheduler.yaml')}`,
          `--authentication-kubeconfig=${kubeconfig}`,
          `--authorization-kubeconfig=${kubeconfig}`,
          '--bind-address=127.0.0.1',
          `--secure-port=${ports.scheduler}`,
          '--v=1',
        ];
      case 'kwok':
        return [
          `--kubeconfig=${kubeconfig}`,
          ...binaries.kwokStages.map((s) => `--config=${s}`),
          // Berth's own stages (stages.ts): failed pulls and crashing containers, by image host.
          `--config=${this.path('kwok-stages.yaml')}`,
          `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
          `--server-address=127.0.0.1:${ports.kwok}`,
          '--node-ip=127.0.0.1',
          '--cidr=10.0.0.1/8',
          '--node-lease-duration-seconds=120',
          '--v=WARN',
        ];
      case 'registry':
        return ['serve', this.path('registry', 'config.yml')];
      case 'registry-token':
        return [TOKEN_SERVER, this.path('registry')];
      case 'berth':
        return berthRunArgs(berth!.kubeconfig, berth!.ports, berth!.args, { webhookClientCa });
    }
  }

  private async healthy(p: ProcessName): Promise<boolean> {
    const { ports, berth } = this.requireState();
    try {
      switch (p) {
        case 'etcd':
          return (await httpRequest(`http://127.0.0.1:${ports.etcdClient}/health`)).includes('"true"');
        case 'kube-apiserver':
          return await this.apiserverReady();
        case 'kube-controller-manager':
          return (await this.httpsGet(`https://127.0.0.1:${ports.controllerManager}/healthz`)) === 'ok';
        case 'kube-scheduler':
          return (await this.httpsGet(`https://127.0.0.1:${ports.scheduler}/healthz`)) === 'ok';
        case 'kwok':
          return (await httpRequest(`http://127.0.0.1:${ports.kwok}/healthz`)).trim() === 'ok';
        case 'registry':
          // Token auth guards even the base endpoint: its Bearer challenge is the registry's answer.
          return (await this.httpsStatus(`${this.registry!.url}/v2/`)) === 401;
        case 'registry-token':
          return (await this.httpsStatus(`${this.registry!.realm.replace(/\/token$/, '/healthz')}`)) === 200;
        case 'berth':
          // Ready when /readyz answers 200 (any other answer rejects).
          await httpRequest(`http://127.0.0.1:${berth!.ports.health}/readyz`);
          return true;
      }
    } catch {
      return false;
    }
  }

  /** Compacts etcd's history up to its current revision, so watches from older resourceVersions get 410 Gone. */
  async compactEtcd(): Promise<number> {
    const base = `http://127.0.0.1:${this.ports.etcdClient}/v3/kv`;
    const range = JSON.parse(
      await httpRequest(`${base}/range`, { key: Buffer.from('/').toString('base64') }),
    ) as {
      header: { revision: string };
    };
    await httpRequest(`${base}/compaction`, { revision: range.header.revision, physical: true });
    return Number(range.header.revision);
  }

  async apiserverReady(): Promise<boolean> {
    try {
      return (await this.httpsGet(`${this.server}/readyz`, true)) === 'ok';
    } catch {
      return false;
    }
  }

  /** The status code of a GET to a server with a certificate from the sandbox CA. */
  private httpsStatus(url: string): Promise<number | undefined> {
    return new Promise((resolve, reject) => {
      const req = https.get(url, { ca: readFileSync(this.path('pki', 'ca.crt')), timeout: 2000 }, (res) => {
        res.resume();
        resolve(res.statusCode);
      });
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
    });
  }

  private httpsGet(url: string, withClientCert = false): Promise<string> {
    const auth = withClientCert
      ? {
          cert: readFileSync(this.path('pki', 'admin.crt')),
          key: readFileSync(this.path('pki', 'admin.key')),
        }
      : {};
    return new Promise((resolve, reject) => {
      // The controller-manager and scheduler serve self-signed certificates: their health is all we read.
      const req = https.get(
        url,
        {
          ca: readFileSync(this.path('pki', 'ca.crt')),
          rejectUnauthorized: withClientCert,
          ...auth,
          timeout: 2000,
        },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d));
          res.on('end', () => resolve(body));
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', reject);
    });
  }

  private async waitFor(
    what: string,
    deadline: number,
    signal: AbortSignal | undefined,
    check: () => Promise<boolean>,
  ): Promise<void> {
    while (!(await check())) {
      signal?.throwIfAborted();
      if (Date.now() > deadline)
        throw new WaitTimeout(`timed out waiting for ${what} in sandbox ${this.name}`);
      await sleep(100);
    }
  }

  status(): ProcessStatus[] {
    if (!this.state) return [];
    const st = this.state;
    const portOf: Record<ProcessName, number> = {
      etcd: st.ports.etcdClient,
      'kube-apiserver': st.ports.apiserver,
      'kube-controller-manager': st.ports.controllerManager,
      'kube-scheduler': st.ports.scheduler,
      kwok: st.ports.kwok,
      registry: st.registry?.ports.registry ?? 0,
      'registry-token': st.registry?.ports.token ?? 0,
      berth: st.berth?.ports.health ?? 0,
    };
    const names: ProcessName[] = [
      ...PROCESSES,
      ...(st.registry ? REGISTRY_PROCESSES : []),
      ...(st.berth ? [BERTH_PROCESS] : []),
    ];
    return names.map((name) => {
      const pid = st.pids[name];
      return {
        name,
        ...(pid === undefined ? {} : { pid }),
        running: pid !== undefined && this.isOurs(name, pid),
        port: portOf[name],
      };
    });
  }

  /** True when pid is alive and is still the binary we started (pids are reused). */
  private isOurs(p: ProcessName, pid: number): boolean {
    try {
      return (
        readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '') === this.binaryOf(p) &&
        // Many processes run Node: the token service is ours only when it serves this sandbox.
        (p !== 'registry-token' ||
          readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(this.path('registry'))) &&
        // ... and Berth only when it runs under this sandbox's identity for it.
        (p !== BERTH_PROCESS ||
          readFileSync(`/proc/${pid}/cmdline`, 'utf8')
            .split('\0')
            .includes(`--kubeconfig=${this.state?.berth?.kubeconfig}`)) &&
        !isZombie(pid)
      );
    } catch {
      return false;
    }
  }

  /**
   * Stops every process (newest first) and checks that none of those that ran left its port
   * listening. A port whose process never ran (it failed to start) is not ours any more: another
   * program may have been given it since.
   */
  async down(): Promise<void> {
    if (!this.state) return;
    const ran = this.status().filter((p) => p.running);
    // Berth first: it would retry a gone apiserver, and log it, until stopped.
    for (const p of [...PROCESSES, ...REGISTRY_PROCESSES, BERTH_PROCESS].reverse()) await this.stopProcess(p);
    const ports = ran.flatMap((p) => (p.name === 'etcd' ? [p.port, this.state!.ports.etcdPeer] : [p.port]));
    for (const port of ports) {
      if (await isListening(port))
        throw new Error(`port ${port} is still listening after sandbox ${this.name} stopped`);
    }
  }

  /** Stops the sandbox and deletes its state, data and certificates. */
  async destroy(): Promise<void> {
    await this.down();
    rmSync(this.dir, { recursive: true, force: true });
    this.state = undefined;
  }

  private async ensurePki(): Promise<void> {
    const dir = this.path('pki');
    if (existsSync(join(dir, 'sa.pub'))) return;
    mkdirSync(dir, { recursive: true });
    const ca = await createCertificateAuthority(`berth-sandbox-${this.name}`);
    const server = await ca.issue({
      commonName: 'kube-apiserver',
      dnsNames: [
        'localhost',
        'kubernetes',
        'kubernetes.default',
        'kubernetes.default.svc',
        'kubernetes.default.svc.cluster.local',
      ],
      ipAddresses: ['127.0.0.1', SERVICE_IP],
      usage: 'server',
    });
    const admin = await ca.issue({
      commonName: 'berth-admin',
      organizations: ['system:masters'],
      usage: 'client',
    });
    const sa = await createSigningKeyPair();
    const files: Record<string, string> = {
      'ca.crt': ca.certPem,
      'ca.key': ca.keyPem,
      'apiserver.crt': server.certPem,
      'apiserver.key': server.keyPem,
      'admin.crt': admin.certPem,
      'admin.key': admin.keyPem,
      'sa.key': sa.privateKeyPem,
      'sa.pub': sa.publicKeyPem,
    };
    this.writePki(files);
  }

  /** A certificate for kube-apiserver to present to webhooks, from a CA of its own (a sandbox made before has it added). */
  private async ensureWebhookClientPki(): Promise<void> {
    if (existsSync(this.path('pki', 'webhook-client.key'))) return;
    const ca = await createCertificateAuthority(`berth-sandbox-${this.name}-webhook-clients`);
    const client = await ca.issue({ commonName: 'kube-apiserver', usage: 'client' });
    this.writePki({
      'webhook-client-ca.crt': ca.certPem,
      'webhook-client.crt': client.certPem,
      'webhook-client.key': client.keyPem,
    });
  }

  /** kube-apiserver's AdmissionConfiguration: its webhook client certificate for every webhook (`*`). */
  private writeAdmissionConfiguration(): void {
    const kubeConfigFile = this.path('webhook-client.kubeconfig');
    const user = {
      'client-certificate': this.path('pki', 'webhook-client.crt'),
      'client-key': this.path('pki', 'webhook-client.key'),
    };
    writeFileSync(kubeConfigFile, toYaml({ apiVersion: 'v1', kind: 'Config', users: [{ name: '*', user }] }));
    const plugin = (name: string) => ({
      name,
      configuration: {
        apiVersion: 'apiserver.config.k8s.io/v1',
        kind: 'WebhookAdmissionConfiguration',
        kubeConfigFile,
      },
    });
    writeFileSync(
      this.path('admission.yaml'),
      toYaml({
        apiVersion: 'apiserver.config.k8s.io/v1',
        kind: 'AdmissionConfiguration',
        plugins: [plugin('ValidatingAdmissionWebhook'), plugin('MutatingAdmissionWebhook')],
      }),
    );
  }

  private writePki(files: Record<string, string>): void {
    for (const [f, pem] of Object.entries(files)) writeFileSync(this.path('pki', f), pem, { mode: 0o600 });
  }

  private ca(): Promise<CertificateAuthority> {
    return loadCertificateAuthority({
      certPem: readFileSync(this.path('pki', 'ca.crt'), 'utf8'),
      keyPem: readFileSync(this.path('pki', 'ca.key'), 'utf8'),
    });
  }

  private kubeconfig(
    user: string,
    credentials: { certPem: string; keyPem: string } | { token: string },
  ): string {
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    const cluster = `berth-${this.name}`;
    return toYaml({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        {
          name: cluster,
          cluster: {
            server: this.server,
            'certificate-authority-data': b64(readFileSync(this.path('pki', 'ca.crt'), 'utf8')),
          },
        },
      ],
      users: [
        {
          name: user,
          user:
            'token' in credentials
              ? { token: credentials.token }
              : {
                  'client-certificate-data': b64(credentials.certPem),
                  'client-key-data': b64(credentials.keyPem),
                },
        },
      ],
      contexts: [{ name: cluster, context: { cluster, user } }],
      'current-context': cluster,
    });
  }

  private writeKubeconfigs(): void {
    const certPem = readFileSync(this.path('pki', 'admin.crt'), 'utf8');
    const keyPem = readFileSync(this.path('pki', 'admin.key'), 'utf8');
    writeFileSync(this.kubeconfigPath, this.kubeconfig('berth-admin', { certPem, keyPem }), { mode: 0o600 });
  }

  private writeSchedulerConfig(): void {
    writeFileSync(
      this.path('scheduler.yaml'),
      toYaml({
        apiVersion: 'kubescheduler.config.k8s.io/v1',
        kind: 'KubeSchedulerConfiguration',
        clientConnection: { kubeconfig: this.kubeconfigPath, qps: 500, burst: 1000 },
        leaderElection: { leaderElect: false },
      }),
    );
  }

  /**
   * Mints a user with a client certificate signed by the sandbox CA (no RBAC is granted) and
   * returns the path of its kubeconfig. For RBAC tests.
   */
  async mintUser(user: string, groups: string[] = []): Promise<string> {
    this.requireState();
    const ca = await this.ca();
    const pair = await ca.issue({ commonName: user, organizations: groups, usage: 'client' });
    mkdirSync(this.path('users'), { recursive: true });
    const file = this.path('users', `${user.replace(/[^a-zA-Z0-9_.-]/g, '_')}.kubeconfig`);
    writeFileSync(file, this.kubeconfig(user, pair), { mode: 0o600 });
    return file;
  }

  /**
   * Mints a ServiceAccount identity with exactly the permissions of `rbac` (ClusterRoles, Roles and
   * their bindings, applied as given): creates the namespace and the ServiceAccount the bindings
   * name (exactly one), asks the TokenRequest API for a token and writes a kubeconfig with it;
   * returns its path. For running a program with only what its roles grant.
   */
  async mintServiceAccount(rbac: KubeObject[], expirationSeconds = 24 * 3600): Promise<string> {
    this.requireState();
    const subjects = new Map(
      rbac.flatMap((o) =>
        ((o['subjects'] as { kind: string; name: string; namespace: string }[] | undefined) ?? [])
          .filter((s) => s.kind === 'ServiceAccount')
          .map((s) => [`${s.namespace}/${s.name}`, s] as const),
      ),
    );
    if (subjects.size !== 1)
      throw new Error(`the bindings name ${subjects.size} service accounts, not exactly one`);
    const sa = [...subjects.values()][0]!;
    const client = this.client();
    const fieldManager = 'berth-sandbox';
    try {
      await client.apply(
        Resources.namespaces,
        { apiVersion: 'v1', kind: 'Namespace', metadata: { name: sa.namespace } },
        { fieldManager },
      );
      await client.apply(
        Resources.serviceAccounts,
        { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: sa.name, namespace: sa.namespace } },
        { fieldManager },
      );
      for (const o of rbac) {
        const ref = RBAC_REFS[o.kind ?? ''];
        if (!ref) throw new Error(`mintServiceAccount applies RBAC objects only, not a ${o.kind}`);
        // force: the roles are exactly what was given, whoever applied them before.
        await client.apply(ref, o, { fieldManager, force: true });
      }
      await this.waitFor('the roles in effect', Date.now() + 30_000, undefined, () =>
        rolesInEffect(client, rbac, sa),
      );
      const review = await client.request<{ status: { token: string } }>(
        'POST',
        resourcePath(Resources.serviceAccounts, sa.namespace, sa.name, 'token'),
        {
          body: {
            apiVersion: 'authentication.k8s.io/v1',
            kind: 'TokenRequest',
            spec: { expirationSeconds },
          },
        },
      );
      mkdirSync(this.path('users'), { recursive: true });
      const file = this.path('users', `sa-${sa.namespace}-${sa.name}.kubeconfig`);
      writeFileAtomic(file, this.kubeconfig(`${sa.namespace}/${sa.name}`, { token: review.status.token }));
      return file;
    } finally {
      client.close();
    }
  }

  /** Creates the nodes that are missing and waits until every one of them is Ready. */
  async ensureNodes(
    groups: NodeGroupInput[],
    log: (s: string) => void = () => {},
    deadline = Date.now() + 180_000,
    signal?: AbortSignal,
  ) {
    const client = this.client();
    try {
      const created = await createNodes(client, groups);
      const wanted = new Set(groups.flatMap(nodeNames));
      let ready = 0;
      await this.waitFor(`${wanted.size} Ready nodes`, deadline, signal, async () => {
        const list = await client.list(Resources.nodes);
        ready = list.items.filter((n) => wanted.has(n.metadata!.name!) && hasCondition(n, 'Ready')).length;
        return ready === wanted.size;
      });
      log(`${created} nodes created, ${ready} Ready`);
    } finally {
      client.close();
    }
  }
}

/**
 * Whether the authorizer grants the ServiceAccount the first rule of every role in `rbac` yet: RBAC
 * objects reach it through a watch, a moment after they are written.
 */
async function rolesInEffect(
  admin: KubeClient,
  rbac: KubeObject[],
  sa: { name: string; namespace: string },
): Promise<boolean> {
  // A role takes effect where it is bound: a ClusterRole bound only by RoleBindings, in their namespace.
  const binding = (role: KubeObject) =>
    rbac.find((b) => {
      const ref = b['roleRef'] as { kind?: string; name?: string } | undefined;
      return ref?.kind === role.kind && ref?.name === role.metadata?.name;
    });
  const reviews = rbac
    .filter((o) => o.kind === 'ClusterRole' || o.kind === 'Role')
    .flatMap((o) => {
      const rule = (o['rules'] as PolicyRule[] | undefined)?.find((r) => r.resources?.length);
      const bound = binding(o);
      if (!rule || !bound) return [];
      return [
        {
          namespace: o.metadata?.namespace ?? bound.metadata?.namespace,
          verb: rule.verbs[0],
          group: rule.apiGroups?.[0],
          resource: rule.resources![0]!.split('/')[0],
          subresource: rule.resources![0]!.split('/')[1],
          name: rule.resourceNames?.[0],
        },
      ];
    });
  for (const resourceAttributes of reviews) {
    const review = await admin.request<{ status?: { allowed?: boolean } }>(
      'POST',
      '/apis/authorization.k8s.io/v1/subjectaccessreviews',
      {
        body: {
          apiVersion: 'authorization.k8s.io/v1',
          kind: 'SubjectAccessReview',
          spec: {
            user: `system:serviceaccount:${sa.namespace}:${sa.name}`,
            groups: [
              'system:serviceaccounts',
              `system:serviceaccounts:${sa.namespace}`,
              'system:authenticated',
            ],
            resourceAttributes,
          },
        },
      },
    );
    if (!review.status?.allowed) return false;
  }
  return true;
}

/**
 * An AbortSignal that SIGINT or SIGTERM aborts while a long step runs (a build, a start-up), so
 * that Ctrl-C stops what the step launched instead of leaving it running; `release` restores the
 * default handling.
 */
export function abortOnSignals(): { signal: AbortSignal; release(): void } {
  const ac = new AbortController();
  const signals = ['SIGINT', 'SIGTERM'] as const;
  // A second Ctrl-C while the first one's clean-up runs must not cut that clean-up short.
  const onSignal = (sig: NodeJS.Signals) => ac.abort(new Error(`interrupted by ${sig}`));
  for (const s of signals) process.on(s, onSignal);
  return { signal: ac.signal, release: () => signals.forEach((s) => process.off(s, onSignal)) };
}

class WaitTimeout extends Error {
  override name = 'WaitTimeout';
}

function isZombie(pid: number): boolean {
  try {
    return / Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\)/, ''));
  } catch {
    return true;
  }
}

/** The last lines of a component's log, without the flag dump that Kubernetes components start with. */
function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8')
      .trimEnd()
      .split('\n')
      .filter((l) => !l.includes('] FLAG: --'))
      .slice(-lines)
      .join('\n');
  } catch {
    return '';
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A plain-HTTP request to a local component (etcd, kwok); rejects on a status other than 200. */
function httpRequest(url: string, body?: unknown): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: body === undefined ? 'GET' : 'POST',
        timeout: 5000,
        headers: { 'Content-Type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += d));
        res.on('end', () =>
          res.statusCode === 200 ? resolve(text) : reject(new Error(`${url}: ${res.statusCode} ${text}`)),
        );
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The first port the kernel gives outgoing connections (Linux's ip_local_port_range), or 32768. */
function ephemeralFloor(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32768;
  } catch {
    return 32768;
  }
}

/** Where a port is picked when none is preferred: from 20000 up to the ephemeral range, if there is room. */
const PICK_FROM = 20000;

/**
 * Free loopback ports, all held open together so none repeats: `prefer[i]` where it is free (a
 * restarted sandbox keeps its addresses, so kubeconfigs held elsewhere stay good), else a free one
 * picked below the kernel's ephemeral range, only once every preferred port is held (so no
 * fallback takes another's old port). Below that range because the port is closed again before
 * its process binds it: meanwhile any outgoing connection on the machine may be given an
 * ephemeral port as its own (CI once saw a sandbox's kube-controller-manager fail that way).
 */
export async function freePorts(n: number, prefer: readonly number[] = []): Promise<number[]> {
  const listen = (port: number) =>
    new Promise<import('node:net').Server>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve(s));
    });
  const floor = ephemeralFloor();
  const pick = async () => {
    for (let i = 0; floor - PICK_FROM > 1000 && i < 50; i++) {
      const port = PICK_FROM + Math.floor(Math.random() * (floor - PICK_FROM));
      const s = await listen(port).catch(() => undefined);
      if (s) return s;
    }
    return listen(0);
  };
  const preferred = await Promise.all(
    Array.from({ length: n }, (_, i) => {
      const p = prefer[i];
      return p ? listen(p).catch(() => undefined) : undefined;
    }),
  );
  const servers = await Promise.all(preferred.map((s) => s ?? pick()));
  const ports = servers.map((s) => (s.address() as import('node:net').AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

/** Writes a kubeconfig aside and renames it: a process reading the file (another test, a Berth) never sees half of it. */
function writeFileAtomic(file: string, text: string): void {
  const tmp = `${file}.${process.pid}`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}

export function isListening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
