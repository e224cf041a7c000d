// The local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
// as plain processes bound to 127.0.0.1 on free ports, one state folder per named sandbox; on
// request also an OCI registry and its token service. This class is the façade: what each process
// runs and how its health is checked is in processes.ts, the PKI and kubeconfigs in pki.ts, users
// in users.ts, the state it records in state.ts, ports and requests in net.ts.
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
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, stringify as toYaml } from 'yaml';
import { KubeClient, type ClientOptions } from '../runtime/client/client.ts';
import { DNS1123_LABEL, Resources, type KubeObject } from '../runtime/api/meta.ts';
import {
  defaultKubernetesMinor,
  ensureBinaries,
  ensureRegistry,
  kubernetesMinorOf,
  kubernetesVersion,
  supportedKubernetes,
  type Binaries,
  type KubernetesMinor,
} from './build.ts';
import { hasCondition } from '../runtime/api/conditions.ts';
import { errorText } from '../runtime/observability/log.ts';
import { createNodes, nodeNames, type NodeGroupInput } from './nodes.ts';
import { sandboxDir, stateDir } from './paths.ts';
import { registryInfo, writeRegistryFiles, type SandboxRegistry } from './registry.ts';
import { isZombie, tail, writeFileAtomic } from './files.ts';
import { freePorts, httpRequest, isListening } from './net.ts';
import {
  ensurePki,
  ensureWebhookClientPki,
  loadCa,
  writeAdminKubeconfig,
  writeAdmissionConfiguration,
} from './pki.ts';
import {
  apiserverReady,
  auditLogPath,
  healthy,
  PROCESS,
  serverOf,
  writeProcessConfigs,
} from './processes.ts';
import {
  BERTH_PROCESS,
  PROCESSES,
  REGISTRY_PROCESSES,
  type CellSandbox,
  type Ports,
  type ProcessName,
  type State,
} from './state.ts';
import { mintServiceAccount, mintUser } from './users.ts';
import { sleep, waitFor, WaitTimeout } from './wait.ts';

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
  /**
   * The Kubernetes minor (`1.35`, `v1.36`, the pinned `1.37.2`): a new sandbox's, or the one an
   * existing sandbox runs (another needs `fresh`). Default: the one it runs, else
   * defaultKubernetesMinor().
   */
  kubernetesVersion?: string;
  /** Provides the binaries (default: build what is missing); tests inject a slow or broken one. */
  build?: (log: (s: string) => void, signal?: AbortSignal, minor?: KubernetesMinor) => Promise<Binaries>;
  /** Also run the OCI registry and its token service (building the registry the first time). */
  registry?: boolean;
  /** Provides the registry binary (default: build it if missing). */
  buildRegistry?: (log: (s: string) => void, signal?: AbortSignal) => Promise<string>;
  /**
   * kube-apiserver writes an audit log of every service account's requests (Metadata level: who,
   * verb, resource, response code) to `auditLogPath`. Taken into account when the control plane starts.
   */
  audit?: boolean;
  /**
   * kube-apiserver serves /debug/pprof (for `bench:instances --profile-apiserver`); off otherwise.
   * Taken into account when the control plane starts.
   */
  profiling?: boolean;
  /**
   * kube-apiserver emulates this older minor (`--emulated-version=kube=1.34`: its APIs and features,
   * three minors back at most), as a cluster mid-upgrade can. Taken into account when the control plane starts.
   */
  emulatedVersion?: string;
}

/** Waits until nothing listens on `port`, or `until` (ms since the epoch) has passed: whether it closed. */
async function closedBy(port: number, until: number): Promise<boolean> {
  while (await isListening(port)) {
    if (Date.now() > until) return false;
    await sleep(50);
  }
  return true;
}

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
    return auditLogPath(this.dir);
  }

  /** The Kubernetes release it runs (`v1.37.2`); undefined before its first start. */
  get kubernetesVersion(): string | undefined {
    return this.state?.kubernetesVersion;
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
    return serverOf(this.ports);
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
    const binaries = await (opts.build ?? ensureBinaries)(log, signal, this.minorFor(opts.kubernetesVersion));
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
        await this.start(binaries, log, deadline, signal, opts);
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

  /** The minor `up` runs: the one asked for, which must be the one an existing sandbox runs. */
  private minorFor(asked: string | undefined): KubernetesMinor {
    const minor = asked === undefined ? undefined : kubernetesMinorOf(asked);
    if (asked !== undefined && !minor) throw new Error(`Kubernetes ${asked}: ${supportedKubernetes()}`);
    const runs = this.state && kubernetesMinorOf(this.state.kubernetesVersion);
    if (this.state && !runs)
      throw new Error(
        `sandbox ${this.name} runs Kubernetes ${this.state.kubernetesVersion}, which this Berth no longer ` +
          `builds (${supportedKubernetes()}): start it again with --fresh (its data goes)`,
      );
    if (minor && runs && minor !== runs)
      throw new Error(
        `sandbox ${this.name} runs Kubernetes ${this.state!.kubernetesVersion}; to run ${kubernetesVersion(minor)} ` +
          `instead, start it again with --fresh (its data goes), or give it another --name`,
      );
    return minor ?? runs ?? defaultKubernetesMinor();
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
    await writeRegistryFiles(
      this.path('registry'),
      this.path('pki'),
      () => loadCa(this.dir),
      ports,
      this.name,
    );
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
    {
      audit = false,
      profiling = false,
      emulatedVersion,
    }: Pick<UpOptions, 'audit' | 'profiling' | 'emulatedVersion'>,
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
      ...(profiling ? { profiling } : {}),
      ...(emulatedVersion ? { emulatedVersion } : {}),
      ...(cells ? { cells } : {}),
      ...(registry ? { registry } : {}),
      ...(berth ? { berth } : {}),
    };
    await ensurePki(this.dir, this.name);
    await ensureWebhookClientPki(this.dir, this.name);
    writeAdmissionConfiguration(this.dir);
    this.state.webhookClientCa = this.path('pki', 'webhook-client-ca.crt');
    writeAdminKubeconfig(this);
    writeProcessConfigs(this.dir, audit);
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
    const child = spawn(PROCESS[p].binary(st), PROCESS[p].args(st, this.dir), {
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
    await closedBy(port, until + 5000);
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

  private healthy(p: ProcessName): Promise<boolean> {
    return healthy(p, this.requireState(), this.dir);
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

  apiserverReady(): Promise<boolean> {
    return apiserverReady(this.server, this.dir);
  }

  private waitFor(
    what: string,
    deadline: number,
    signal: AbortSignal | undefined,
    check: () => Promise<boolean>,
  ): Promise<void> {
    return waitFor(`${what} in sandbox ${this.name}`, deadline, signal, check);
  }

  status(): ProcessStatus[] {
    if (!this.state) return [];
    const st = this.state;
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
        port: PROCESS[name].port(st),
      };
    });
  }

  /** True when pid is alive and is still the binary we started (pids are reused). */
  private isOurs(p: ProcessName, pid: number): boolean {
    try {
      return (
        readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '') ===
          PROCESS[p].binary(this.requireState()) &&
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
   * program may have been given it since, and so may a port freed while later processes were
   * stopping (tests start sandboxes side by side): each process's ports are checked as it stops.
   */
  async down(): Promise<void> {
    if (!this.state) return;
    const ran = new Map(this.status().map((p) => [p.name, p.running ? p : undefined]));
    // Berth first: it would retry a gone apiserver, and log it, until stopped.
    for (const name of [...PROCESSES, ...REGISTRY_PROCESSES, BERTH_PROCESS].reverse()) {
      await this.stopProcess(name);
      const p = ran.get(name);
      if (p)
        for (const port of name === 'etcd' ? [p.port, this.state.ports.etcdPeer] : [p.port])
          // A little time still: stopProcess does not wait for a process whose exit had begun.
          if (!(await closedBy(port, Date.now() + 5000)))
            throw new Error(`port ${port} is still listening after sandbox ${this.name} stopped`);
    }
  }

  /** Stops the sandbox and deletes its state, data and certificates. */
  async destroy(): Promise<void> {
    await this.down();
    rmSync(this.dir, { recursive: true, force: true });
    this.state = undefined;
  }

  /**
   * Mints a user with a client certificate signed by the sandbox CA (no RBAC is granted) and
   * returns the path of its kubeconfig. For RBAC tests.
   */
  async mintUser(user: string, groups: string[] = []): Promise<string> {
    this.requireState();
    return mintUser(this, user, groups);
  }

  /**
   * Mints a ServiceAccount identity with exactly the permissions of `rbac` (ClusterRoles, Roles and
   * their bindings, applied as given): creates the namespace and the ServiceAccount the bindings
   * name (exactly one), asks the TokenRequest API for a token and writes a kubeconfig with it;
   * returns its path. For running a program with only what its roles grant.
   */
  async mintServiceAccount(rbac: KubeObject[], expirationSeconds = 24 * 3600): Promise<string> {
    this.requireState();
    return mintServiceAccount(this, rbac, expirationSeconds);
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
