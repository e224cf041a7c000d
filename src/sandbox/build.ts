// Builds the local control plane from the pinned Go wrapper modules under controlplane/ and caches
// the binaries per component, version and go.sum hash, so a warm start costs no build at all.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
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

export const components = {
  kubernetes: {
    module: 'kubernetes',
    pin: 'k8s.io/kubernetes',
    packages: ['kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kubectl'].map(
      (c) => `k8s.io/kubernetes/cmd/${c}`,
    ),
    ldflags: kubeVersionFlags,
  },
  etcd: {
    module: 'etcd',
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

function pinnedVersion(c: Component): string {
  const gomod = readFileSync(join(controlPlaneSourceDir(), c.module, 'go.mod'), 'utf8');
  const m = gomod.match(new RegExp(`^\\s*(?:require\\s+)?${c.pin.replace(/\./g, '\\.')}\\s+(v\\S+)`, 'm'));
  if (!m?.[1]) throw new BuildError(`controlplane/${c.module}/go.mod does not pin ${c.pin}`);
  return m[1];
}

/** The cache folder of a component: its version plus a hash of everything that decides the build. */
export function componentDir(name: ComponentName): string {
  const c: Component = components[name];
  const src = join(controlPlaneSourceDir(), c.module);
  const h = createHash('sha256');
  for (const f of ['go.mod', 'go.sum']) h.update(readFileSync(join(src, f)));
  h.update(JSON.stringify(c.packages) + (c.ldflags?.('') ?? ''));
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

function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv, log: (s: string) => void) {
  return new Promise<string>((resolve, reject) => {
    const p = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d: Buffer) => (out += d));
    p.stderr.on('data', (d: Buffer) => {
      err += d;
      for (const line of d.toString().split('\n')) if (line.trim()) log(line);
    });
    p.on('error', reject);
    p.on('close', (code) => {
      if (code === 0) resolve(out);
      else
        reject(
          new BuildError(`${cmd} ${args.join(' ')} failed in ${cwd} (exit ${code}):\n${err.slice(-4000)}`),
        );
    });
  });
}

const goEnv = { CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOFLAGS: '-mod=readonly' };

async function buildComponent(name: ComponentName, log: (s: string) => void): Promise<string> {
  const dir = componentDir(name);
  if (existsSync(join(dir, '.complete'))) return dir;
  const c: Component = components[name];
  checkGo();
  const src = join(controlPlaneSourceDir(), c.module);
  const version = pinnedVersion(c);
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  log(`building ${name} ${version} (first time only; several minutes cold)`);
  const started = Date.now();
  const ldflags = ['-s -w', c.ldflags?.(version) ?? ''].join(' ').trim();
  await run(
    'go',
    [
      'build',
      '-p',
      '2',
      '-trimpath',
      '-tags',
      'selinux,notest',
      '-ldflags',
      ldflags,
      '-o',
      tmp + '/',
      ...c.packages,
    ],
    src,
    goEnv,
    log,
  );
  if (c.files?.length) {
    const modDir = (await run('go', ['list', '-m', '-f', '{{.Dir}}', c.pin], src, goEnv, log)).trim();
    for (const f of c.files) copyFileSync(join(modDir, f), join(tmp, f.split('/').pop()!));
  }
  for (const [from, to] of Object.entries(c.rename ?? {})) renameSync(join(tmp, from), join(tmp, to));
  writeFileSync(join(tmp, '.complete'), `${version}\n`);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  log(`built ${name} ${version} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
  return dir;
}

/** Builds what is missing (in sequence: two cores are better spent on one link at a time) and returns the paths. */
export async function ensureBinaries(log: (s: string) => void = () => {}): Promise<Binaries> {
  const k8s = await buildComponent('kubernetes', log);
  const etcd = await buildComponent('etcd', log);
  const kwok = await buildComponent('kwok', log);
  return {
    etcd: join(etcd, 'etcd'),
    kubeApiserver: join(k8s, 'kube-apiserver'),
    kubeControllerManager: join(k8s, 'kube-controller-manager'),
    kubeScheduler: join(k8s, 'kube-scheduler'),
    kubectl: join(k8s, 'kubectl'),
    kwok: join(kwok, 'kwok'),
    kwokStages: (components.kwok.files ?? []).map((f) => join(kwok, f.split('/').pop()!)),
    kubernetesVersion: pinnedVersion(components.kubernetes),
  };
}
