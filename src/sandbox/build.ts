// Builds the local control plane from the pinned Go wrapper modules under controlplane/ and caches
// the binaries per component, version and go.sum hash, so a warm start costs no build at all.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { cacheDir, controlPlaneSourceDir } from './paths.ts';

export interface Component {
  /** Folder under controlplane/ holding the wrapper go.mod. */
  module: string;
  /** The module whose version names the cache entry. */
  pin: string;
  packages: string[];
  /** Extra files copied from the pinned module's source (kwok's stage definitions). */
  files?: string[];
  ldflags?: (version: string) => string;
  /** Binaries to rename after the build: go names a module-root main package after its last path element. */
  rename?: Record<string, string>;
  /** Build tags besides selinux,notest. */
  tags?: string[];
}

/**
 * The Kubernetes version `helm template` and `helm lint` assume without a cluster, set as Helm's
 * Makefile sets it (from the client-go it builds with): left out, Helm assumes 1.20, below the
 * chart's kubeVersion.
 */
function helmKubeVersionFlags(): string {
  const minor = pinnedVersion({ module: 'helm', pin: 'k8s.io/client-go' }).split('.')[1];
  return ['pkg/chartutil', 'pkg/lint/rules']
    .flatMap((p) => [
      `-X helm.sh/helm/v3/${p}.k8sVersionMajor=1`,
      `-X helm.sh/helm/v3/${p}.k8sVersionMinor=${minor}`,
    ])
    .join(' ');
}

const kubeVersionFlags = (v: string): string => {
  const [major, minor] = v.replace(/^v/, '').split('.');
  return ['k8s.io/component-base/version', 'k8s.io/client-go/pkg/version']
    .flatMap((p) => [
      `-X ${p}.gitVersion=${v}`,
      `-X ${p}.gitMajor=${major}`,
      `-X ${p}.gitMinor=${minor}`,
      `-X ${p}.gitTreeState=clean`,
    ])
    .join(' ');
};

/**
 * The Kubernetes minors the sandbox builds, newest first (the first is the default): each its
 * wrapper module under controlplane/ and the etcd wrapper of the etcd minor that upstream release
 * pins (build/dependencies.yaml), at its newest patch; minors that pin the same etcd share its build.
 * kwok, a client of the apiserver, is one build for all.
 */
export const KUBERNETES_MINORS = {
  '1.37': { kubernetes: 'kubernetes-1.37', etcd: 'etcd-3.7' },
  '1.36': { kubernetes: 'kubernetes-1.36', etcd: 'etcd-3.6' },
  '1.35': { kubernetes: 'kubernetes-1.35', etcd: 'etcd-3.6' },
} as const;

export type KubernetesMinor = keyof typeof KUBERNETES_MINORS;

export const DEFAULT_KUBERNETES_MINOR: KubernetesMinor = '1.37';

/**
 * The minor a version names: `1.36`, `v1.36` or the pinned patch `1.36.3`; undefined for a version
 * the sandbox does not build.
 */
export function kubernetesMinorOf(version: string): KubernetesMinor | undefined {
  const m = /^v?(1\.\d+)(\.\d+)?$/.exec(version.trim());
  if (!m || !Object.hasOwn(KUBERNETES_MINORS, m[1]!)) return undefined;
  const minor = m[1] as KubernetesMinor;
  return !m[2] || `v${version.trim().replace(/^v/, '')}` === kubernetesVersion(minor) ? minor : undefined;
}

/**
 * The minor a sandbox is made with when none is asked for: `BERTH_KUBERNETES_VERSION` (the test
 * driver's and the matrix's), else the newest.
 */
export function defaultKubernetesMinor(env: NodeJS.ProcessEnv = process.env): KubernetesMinor {
  const asked = env['BERTH_KUBERNETES_VERSION'];
  if (!asked) return DEFAULT_KUBERNETES_MINOR;
  const minor = kubernetesMinorOf(asked);
  if (!minor) throw new BuildError(`BERTH_KUBERNETES_VERSION=${asked}: ${supportedKubernetes()}`);
  return minor;
}

/** What the sandbox builds, for an error about a version it does not. */
export const supportedKubernetes = (): string =>
  `the sandbox builds Kubernetes ${Object.keys(KUBERNETES_MINORS)
    .map((m) => `${m} (${kubernetesVersion(m as KubernetesMinor)})`)
    .join(', ')}`;

/** The Kubernetes and etcd components of a minor: the shared definitions on that minor's wrappers. */
function controlPlaneOf(minor: KubernetesMinor): { kubernetes: Component; etcd: Component } {
  const modules = KUBERNETES_MINORS[minor];
  return {
    kubernetes: { ...components.kubernetes, module: modules.kubernetes },
    etcd: { ...components.etcd, module: modules.etcd },
  };
}

/** The patch release a minor's wrapper pins (`v1.37.2`). */
export const kubernetesVersion = (minor: KubernetesMinor): string =>
  pinnedVersion(controlPlaneOf(minor).kubernetes);

export const components = {
  // The module folders of these two are each minor's (KUBERNETES_MINORS); these are the default's.
  kubernetes: {
    module: KUBERNETES_MINORS[DEFAULT_KUBERNETES_MINOR].kubernetes,
    pin: 'k8s.io/kubernetes',
    packages: ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl'].map(
      (c) => `k8s.io/kubernetes/cmd/${c}`,
    ),
    ldflags: kubeVersionFlags,
  },
  etcd: {
    module: KUBERNETES_MINORS[DEFAULT_KUBERNETES_MINOR].etcd,
    pin: 'go.etcd.io/etcd/server/v3',
    packages: ['go.etcd.io/etcd/server/v3'],
    rename: { server: 'etcd' },
  },
  kwok: {
    module: 'kwok',
    pin: 'sigs.k8s.io/kwok',
    packages: ['sigs.k8s.io/kwok/cmd/kwok'],
    // The stages that make nodes Ready, keep their leases fresh, and move pods to Running/Ready.
    files: [
      'kustomize/stage/node/fast/node-initialize.yaml',
      'kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml',
      'kustomize/stage/pod/fast/pod-ready.yaml',
      'kustomize/stage/pod/fast/pod-complete.yaml',
      'kustomize/stage/pod/fast/pod-delete.yaml',
    ],
  },
  // CNCF distribution's registry, through Berth's own main package (controlplane/registry/main.go:
  // the filesystem driver and token auth only, half of upstream's cmd/registry). Built only when a
  // sandbox asks for a registry, so the control plane's cold start does not pay for it.
  registry: {
    module: 'registry',
    pin: 'github.com/distribution/distribution/v3',
    packages: ['.'],
    ldflags: (v) => `-X github.com/distribution/distribution/v3/version.version=${v}`,
  },
  // Helm, to lint, render and install Berth's chart as its users do. Built only when a test asks.
  helm: {
    module: 'helm',
    pin: 'helm.sh/helm/v3',
    packages: ['helm.sh/helm/v3/cmd/helm'],
    ldflags: (v) => `-X helm.sh/helm/v3/internal/version.version=${v} ${helmKubeVersionFlags()}`,
  },
  // Prometheus and promtool, to check Berth's alerting rules and to scrape Berth in a test with them
  // loaded. Built only when a test asks; remove_all_sd leaves out every service discovery but file
  // and http (static targets are all a test needs), most of Prometheus's dependencies.
  prometheus: {
    module: 'prometheus',
    pin: 'github.com/prometheus/prometheus',
    packages: ['cmd/prometheus', 'cmd/promtool'].map((c) => `github.com/prometheus/prometheus/${c}`),
    ldflags: (v) => `-X github.com/prometheus/common/version.Version=${v}`,
    tags: ['remove_all_sd'],
  },
  // go-containerregistry's crane, with which `npm run image` assembles Berth's image from files and
  // pushes it (no container engine). Built only when asked for.
  crane: {
    module: 'crane',
    pin: 'github.com/google/go-containerregistry',
    packages: ['github.com/google/go-containerregistry/cmd/crane'],
  },
  // sigstore's cosign, with which `npm run release` signs the image and the chart with a key and the
  // release test verifies them. Built only when asked for.
  cosign: {
    module: 'cosign',
    pin: 'github.com/sigstore/cosign/v2',
    packages: ['github.com/sigstore/cosign/v2/cmd/cosign'],
    ldflags: (v) => `-X sigs.k8s.io/release-utils/version.gitVersion=${v}`,
  },
} satisfies Record<string, Component>;

export type ComponentName = keyof typeof components;

export interface Binaries {
  etcd: string;
  kubeApiserver: string;
  kubeControllerManager: string;
  kubeScheduler: string;
  kubectl: string;
  kwok: string;
  kwokStages: string[];
  kubernetesVersion: string;
}

export class BuildError extends Error {
  override name = 'BuildError';
}

function pinnedVersion(c: Pick<Component, 'module' | 'pin'>): string {
  const gomod = readFileSync(join(controlPlaneSourceDir(), c.module, 'go.mod'), 'utf8');
  // A `require` line, or a line of a require block: `[require] <module> <version>`.
  const version = gomod
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .map((words) => (words[0] === 'require' ? words.slice(1) : words))
    .find((words) => words[0] === c.pin && words[1]?.startsWith('v'))?.[1];
  if (!version) throw new BuildError(`controlplane/${c.module}/go.mod does not pin ${c.pin}`);
  return version;
}

/** The cache folder of a component: its version plus a hash of everything that decides the build. */
export function componentDir(name: ComponentName, c: Component = components[name]): string {
  const src = join(controlPlaneSourceDir(), c.module);
  const h = createHash('sha256');
  // A wrapper's own Go files (the registry's main package) decide the build as much as its pins.
  const goFiles = readdirSync(src)
    .filter((f) => f.endsWith('.go'))
    .sort();
  for (const f of ['go.mod', 'go.sum', ...goFiles]) h.update(readFileSync(join(src, f)));
  h.update(JSON.stringify(c.packages) + (c.ldflags?.('') ?? '') + (c.tags ? JSON.stringify(c.tags) : ''));
  return join(cacheDir(), 'bin', `${name}-${pinnedVersion(c)}-${h.digest('hex').slice(0, 12)}`);
}

export function checkGo(): string {
  const r = spawnSync('go', ['env', 'GOVERSION'], { encoding: 'utf8' });
  if (r.error || r.status !== 0) {
    throw new BuildError(
      'Go is needed to build the local control plane and was not found on PATH. ' +
        'Install Go 1.26 or newer (https://go.dev/doc/install, or your distribution package), then retry.',
    );
  }
  const v = r.stdout.trim();
  const [maj, min] = v.replace(/^go/, '').split('.').map(Number);
  if ((maj ?? 0) < 1 || (maj === 1 && (min ?? 0) < 26)) {
    throw new BuildError(`Go ${v} is too old to build the local control plane: install Go 1.26 or newer.`);
  }
  return v;
}

function run(
  cmd: string,
  args: string[],
  cwd: string,
  env: NodeJS.ProcessEnv,
  log: (s: string) => void,
  signal?: AbortSignal,
) {
  return new Promise<string>((resolve, reject) => {
    const p = spawn(cmd, args, {
      cwd,
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(signal ? { signal } : {}),
    });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d));
    p.stderr.on('data', (d: Buffer) => {
      err += d;
      for (const line of d.toString().split('\n')) if (line.trim()) log(line);
    });
    p.on('error', (e) => reject(signal?.aborted ? signal.reason : e));
    p.on('close', (code) => {
      if (signal?.aborted) reject(signal.reason);
      else if (code === 0) resolve(out);
      else
        reject(
          new BuildError(`${cmd} ${args.join(' ')} failed in ${cwd} (exit ${code}):\n${err.slice(-4000)}`),
        );
    });
  });
}

const goEnv = { CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOFLAGS: '-mod=readonly' };

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Another process's build of this component still running (a second terminal, a test run), after
 * removing the leftovers of builds whose process died (a build interrupted by Ctrl-C or kill -9).
 */
function otherBuilder(dir: string): number | undefined {
  const parent = dirname(dir);
  if (!existsSync(parent)) return undefined;
  let live: number | undefined;
  for (const f of readdirSync(parent)) {
    if (!f.startsWith(`${basename(dir)}.tmp-`)) continue;
    const pid = Number(f.slice(f.lastIndexOf('-') + 1));
    if (pid === process.pid) continue;
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) live ??= pid;
    else rmSync(join(parent, f), { recursive: true, force: true });
  }
  return live;
}

/** Prints that a long step is alive, at least every `everyMs`, until stopped. */
function heartbeat(what: string, log: (s: string) => void, everyMs = 30_000): () => void {
  const started = Date.now();
  const timer = setInterval(() => {
    const s = Math.round((Date.now() - started) / 1000);
    log(`  still ${what}: ${Math.floor(s / 60)} min ${s % 60} s so far`);
  }, everyMs);
  return () => clearInterval(timer);
}

async function buildComponent(
  name: ComponentName,
  log: (s: string) => void,
  signal?: AbortSignal,
  c: Component = components[name],
): Promise<string> {
  const dir = componentDir(name, c);
  const version = pinnedVersion(c);
  for (
    let pid = otherBuilder(dir);
    pid !== undefined && !existsSync(join(dir, '.complete'));
    pid = otherBuilder(dir)
  ) {
    log(`waiting for process ${pid}, which is building ${name} ${version}`);
    const stop = heartbeat(`waiting for the build of ${name}`, log);
    try {
      while (alive(pid) && !existsSync(join(dir, '.complete'))) await sleep(1000, undefined, { signal });
    } finally {
      stop();
    }
  }
  if (existsSync(join(dir, '.complete'))) return dir;
  checkGo();
  const src = join(controlPlaneSourceDir(), c.module);
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  log(`building ${name} ${version} (first time only; several minutes cold)`);
  const started = Date.now();
  const stop = heartbeat(`building ${name} ${version}`, log);
  try {
    const ldflags = ['-s -w', c.ldflags?.(version) ?? ''].join(' ').trim();
    await run(
      'go',
      [
        'build',
        '-p',
        '2',
        '-trimpath',
        '-tags',
        ['selinux', 'notest', ...(c.tags ?? [])].join(','),
        '-ldflags',
        ldflags,
        '-o',
        tmp + '/',
        ...c.packages,
      ],
      src,
      goEnv,
      log,
      signal,
    );
    if (c.files?.length) {
      const modDir = (
        await run('go', ['list', '-m', '-f', '{{.Dir}}', c.pin], src, goEnv, log, signal)
      ).trim();
      for (const f of c.files) copyFileSync(join(modDir, f), join(tmp, f.split('/').pop()!));
    }
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  } finally {
    stop();
  }
  for (const [from, to] of Object.entries(c.rename ?? {})) renameSync(join(tmp, from), join(tmp, to));
  writeFileSync(join(tmp, '.complete'), `${version}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  log(`built ${name} ${version} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return dir;
}

/**
 * Builds what `minor`'s control plane misses (in sequence: two cores are better spent on one link
 * at a time) and returns the paths.
 */
export async function ensureBinaries(
  log: (s: string) => void = () => {},
  signal?: AbortSignal,
  minor: KubernetesMinor = defaultKubernetesMinor(),
): Promise<Binaries> {
  const cp = controlPlaneOf(minor);
  const k8s = await buildComponent('kubernetes', log, signal, cp.kubernetes);
  const etcd = await buildComponent('etcd', log, signal, cp.etcd);
  const kwok = await buildComponent('kwok', log, signal);
  return {
    etcd: join(etcd, 'etcd'),
    kubeApiserver: join(k8s, 'kube-apiserver'),
    kubeControllerManager: join(k8s, 'kube-controller-manager'),
    kubeScheduler: join(k8s, 'kube-scheduler'),
    kubectl: join(k8s, 'kubectl'),
    kwok: join(kwok, 'kwok'),
    kwokStages: (components.kwok.files ?? []).map((f) => join(kwok, f.split('/').pop()!)),
    kubernetesVersion: pinnedVersion(cp.kubernetes),
  };
}

/** The helm binary, built on first use (a few minutes cold) and cached like the control plane. */
export async function ensureHelm(log: (s: string) => void = () => {}, signal?: AbortSignal): Promise<string> {
  return join(await buildComponent('helm', log, signal), 'helm');
}

/** The crane binary (go-containerregistry), built on first use and cached like the control plane. */
export async function ensureCrane(
  log: (s: string) => void = () => {},
  signal?: AbortSignal,
): Promise<string> {
  return join(await buildComponent('crane', log, signal), 'crane');
}

/** Builds the registry if missing (only a sandbox that runs one asks) and returns its binary. */
export async function ensureRegistry(
  log: (s: string) => void = () => {},
  signal?: AbortSignal,
): Promise<string> {
  return join(await buildComponent('registry', log, signal), 'registry');
}

/** Prometheus's folder (`prometheus`, `promtool`), built on first use and cached like the control plane. */
export async function ensurePrometheus(
  log: (s: string) => void = () => {},
  signal?: AbortSignal,
): Promise<{ prometheus: string; promtool: string }> {
  const dir = await buildComponent('prometheus', log, signal);
  return { prometheus: join(dir, 'prometheus'), promtool: join(dir, 'promtool') };
}

/** The cosign binary, built on first use and cached like the control plane. */
export async function ensureCosign(
  log: (s: string) => void = () => {},
  signal?: AbortSignal,
): Promise<string> {
  return join(await buildComponent('cosign', log, signal), 'cosign');
}
