// `npm run release -- --version X.Y.Z --registry REGISTRY --key cosign.key`: a release of Berth from
// the commit tagged vX.Y.Z, on a clean tree whose package.json and Chart.yaml (version and
// appVersion) say X.Y.Z (decision 0045). Into --out (default dist/release/X.Y.Z):
//   - the image, REGISTRY/berth:X.Y.Z (linux/amd64 and linux/arm64, scripts/image.ts), pushed;
//   - the chart, its values naming that image by digest, packaged and pushed with `helm push` to
//     oci://REGISTRY/charts (so `helm install berth oci://REGISTRY/charts/berth --version X.Y.Z`);
//   - both signed with cosign and the key (COSIGN_PASSWORD), nothing sent to a transparency log;
//   - the CLI, berth-linux-<arch> and its .tar.gz for krew (scripts/cli-binary.ts), and krew's
//     plugin manifest (berth.yaml) with the archives' checksums;
//   - the npm package's tarball, an SPDX SBOM of it and of the image, cosign.pub, release.json, and
//     SHA256SUMS of every file.
// With --sandbox NAME, the sandbox's registry (its login and CA; REGISTRY defaults to its host).
import { execFile, spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { cpSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { parse as parseYaml, parseDocument } from 'yaml';
import { ensureCosign, ensureHelm } from '../src/sandbox/build.ts';
import { packageRoot } from '../src/sandbox/paths.ts';
import { Sandbox } from '../src/sandbox/sandbox.ts';
import { buildCli } from './cli-binary.ts';
import {
  buildImage,
  craneEnv,
  IMAGE_PLATFORMS,
  sandboxProxy,
  type BuildOptions,
  type ImagePlatform,
} from './image.ts';

const root = packageRoot();
const CHART = join(root, 'deploy', 'helm', 'berth');

function run(cmd: string, args: string[], opts: SpawnSyncOptions = {}): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, cwd: root, ...opts });
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stderr}${r.error ?? ''}`,
    );
  return String(r.stdout).trim();
}

/** A tool that talks to the registry, without blocking the loop (the sandbox proxy runs in this process). */
async function registryTool(cmd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const r = await promisify(execFile)(cmd, args, { env, cwd: root, maxBuffer: 16 << 20 }).catch(
    (e: { stderr?: string }) => {
      throw new Error(`${basename(cmd)} ${args.join(' ')} failed:\n${e.stderr ?? String(e)}`);
    },
  );
  return `${r.stdout}${r.stderr}`;
}

/** What decides whether a release may be made. */
export interface ReleaseState {
  version: string;
  packageVersion: string;
  chart: { version: string; appVersion: string };
  /** `git status --porcelain`. */
  status: string;
  /** Tags pointing at HEAD. */
  tags: string[];
}

/** Why this tree may not be released as `version` (none: it may). */
export function releaseRefusals(s: ReleaseState): string[] {
  const v = s.version;
  const out: string[] = [];
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(v)) out.push(`--version ${v} is not X.Y.Z`);
  if (s.packageVersion !== v) out.push(`package.json says ${s.packageVersion}, not ${v}`);
  if (s.chart.version !== v) out.push(`Chart.yaml's version is ${s.chart.version}, not ${v}`);
  if (s.chart.appVersion !== v) out.push(`Chart.yaml's appVersion is ${s.chart.appVersion}, not ${v}`);
  if (s.status.trim()) out.push(`the tree has changes not committed:\n${s.status.trimEnd()}`);
  if (!s.tags.includes(`v${v}`)) out.push(`HEAD is not tagged v${v} (git tag v${v})`);
  return out;
}

/** One package an SBOM lists. */
export interface SbomPackage {
  name: string;
  version: string;
  /** Package URL: pkg:npm/…, pkg:deb/debian/…, pkg:generic/… */
  purl: string;
}

/** An SPDX 2.3 document (JSON) describing `subject` as made of `packages`. */
export function spdx(subject: SbomPackage, packages: SbomPackage[], created: Date): object {
  const id = (i: number) => `SPDXRef-Package-${i}`;
  const pkg = (p: SbomPackage, i: number) => ({
    name: p.name,
    SPDXID: id(i),
    versionInfo: p.version,
    downloadLocation: 'NOASSERTION',
    externalRefs: [{ referenceCategory: 'PACKAGE-MANAGER', referenceType: 'purl', referenceLocator: p.purl }],
  });
  return {
    spdxVersion: 'SPDX-2.3',
    dataLicense: 'CC0-1.0',
    SPDXID: 'SPDXRef-DOCUMENT',
    name: `${subject.name}-${subject.version}`,
    documentNamespace: `https://berth.dev/spdx/${subject.name}-${subject.version}-${randomUUID()}`,
    creationInfo: {
      created: created.toISOString().replace(/\.\d+Z$/, 'Z'),
      creators: ['Tool: berth-release'],
    },
    packages: [subject, ...packages].map(pkg),
    relationships: [
      { spdxElementId: 'SPDXRef-DOCUMENT', relationshipType: 'DESCRIBES', relatedSpdxElement: id(0) },
      ...packages.map((_, i) => ({
        spdxElementId: id(0),
        relationshipType: 'CONTAINS',
        relatedSpdxElement: id(i + 1),
      })),
    ],
  };
}

/** The production packages of a package-lock (what `npm ci --omit=dev` installs). */
export function npmPackages(lock: {
  packages: Record<string, { version?: string; dev?: boolean }>;
}): SbomPackage[] {
  return Object.entries(lock.packages)
    .filter(([path, p]) => path.startsWith('node_modules/') && !p.dev && p.version)
    .map(([path, p]) => {
      const name = path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length);
      return { name, version: p.version!, purl: `pkg:npm/${name.replace('@', '%40')}@${p.version}` };
    })
    .filter((p, i, all) => all.findIndex((q) => q.purl === p.purl) === i)
    .sort((a, b) => a.purl.localeCompare(b.purl));
}

/** A Debian package from its file's name, `name_version_arch.deb` (an epoch's colon as %3a). */
export function debPackage(file: string): SbomPackage {
  const [name, raw, arch] = basename(file, '.deb').split('_');
  const version = decodeURIComponent(raw!);
  return { name: name!, version, purl: `pkg:deb/debian/${name}@${encodeURIComponent(version)}?arch=${arch}` };
}

/** krew's plugin manifest for the archives (`berth-linux-<arch>.tar.gz`) at `baseUrl`. */
export function krewManifest(version: string, baseUrl: string, sha256: Record<string, string>): string {
  const platforms = Object.entries(sha256).map(([arch, sum]) => ({
    selector: { matchLabels: { os: 'linux', arch } },
    uri: `${baseUrl}/berth-linux-${arch}.tar.gz`,
    sha256: sum,
    bin: 'berth',
  }));
  return `${JSON.stringify(
    {
      apiVersion: 'krew.googlecontainertools.github.com/v1alpha2',
      kind: 'Plugin',
      metadata: { name: 'berth' },
      spec: {
        version: `v${version}`,
        homepage: 'https://github.com/berth-dev/berth',
        shortDescription: 'Plan, explain and uninstall Berth placement policies',
        description:
          'The berth command as a kubectl plugin: what a placement policy change would do (plan), why a\n' +
          'node or pod is placed as it is (explain), install and uninstall Berth.',
        platforms,
      },
    },
    null,
    2,
  )}\n`;
}

const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

/** The chart as released: version and appVersion already checked, the image by repository and digest. */
function packageChart(helm: string, out: string, repository: string, digest: string, work: string): string {
  const dir = join(work, 'berth');
  cpSync(CHART, dir, { recursive: true });
  const values = parseDocument(readFileSync(join(dir, 'values.yaml'), 'utf8'));
  values.setIn(['image', 'repository'], repository);
  values.setIn(['image', 'digest'], digest);
  writeFileSync(join(dir, 'values.yaml'), values.toString());
  run(helm, ['package', dir, '--destination', out]);
  const [file] = readdirSync(out).filter((f) => /^berth-\d.*\.tgz$/.test(f));
  return join(out, file!);
}

export interface ReleaseOptions {
  version: string;
  /** host[/path]: the image goes to REGISTRY/berth, the chart to oci://REGISTRY/charts. */
  registry: string;
  /** cosign's private key (its password in COSIGN_PASSWORD). */
  key: string;
  out: string;
  /** The sandbox registry's login and CA, reached through a loopback proxy (scripts/image.ts says why). */
  sandbox?: NonNullable<BuildOptions['registry']>;
  /** Where krew downloads the archives. */
  downloadUrl: string;
  /** All of IMAGE_PLATFORMS for a release; fewer only where a test saves the time. */
  platforms: ImagePlatform[];
  log: (s: string) => void;
}

/** Pushes and signs the image and the chart; the rest is files in `o.out`. */
export async function release(o: ReleaseOptions): Promise<Record<string, string>> {
  const commit = run('git', ['rev-parse', 'HEAD']);
  rmSync(o.out, { recursive: true, force: true });
  mkdirSync(o.out, { recursive: true });
  const work = join(o.out, '.work');
  mkdirSync(work);
  const [helm, cosign] = [await ensureHelm(o.log), await ensureCosign(o.log)];
  const image = await buildImage({
    tag: `${o.registry}/berth:${o.version}`,
    commit,
    platforms: o.platforms,
    log: o.log,
    ...(o.sandbox ? { registry: o.sandbox } : {}),
  });
  const digest = image.reference.slice(image.reference.indexOf('@') + 1);
  const proxy = o.sandbox ? await sandboxProxy(o.sandbox) : undefined;
  try {
    // Helm, cosign and crane read the same login file; through the proxy, plain HTTP on loopback.
    const env: NodeJS.ProcessEnv = {
      ...craneEnv(o.sandbox, proxy?.host ?? '', work),
      COSIGN_PASSWORD: process.env['COSIGN_PASSWORD'] ?? '',
    };
    const docker = env['DOCKER_CONFIG'] ?? join(process.env['HOME'] ?? '', '.docker');
    env['HELM_REGISTRY_CONFIG'] = join(docker, 'config.json');
    const via = proxy ? o.registry.replace(o.sandbox!.host, proxy.host) : o.registry;
    const insecure = proxy ? ['--allow-http-registry', '--allow-insecure-registry'] : [];
    const chartFile = packageChart(helm, o.out, `${o.registry}/berth`, digest, work);
    o.log(`helm push ${basename(chartFile)} oci://${o.registry}/charts`);
    const pushArgs = ['push', chartFile, `oci://${via}/charts`, ...(proxy ? ['--plain-http'] : [])];
    const pushed = await registryTool(helm, pushArgs, env);
    const chartDigest = /Digest: (sha256:[0-9a-f]{64})/.exec(pushed)?.[1];
    if (!chartDigest) throw new Error(`helm push said no digest:\n${pushed}`);
    const refs = {
      image: `${o.registry}/berth@${digest}`,
      chart: `${o.registry}/charts/berth@${chartDigest}`,
    };
    for (const ref of Object.values(refs)) {
      o.log(`cosign sign ${ref}`);
      // The identity signed is the registry's own name, also when reached through the proxy.
      const identity = ['--sign-container-identity', ref.slice(0, ref.indexOf('@'))];
      const args = ['sign', '--yes', '--key', o.key, '--tlog-upload=false', ...insecure, ...identity];
      await registryTool(cosign, [...args, proxy ? ref.replace(o.registry, via) : ref], env);
    }
    run(cosign, ['public-key', '--key', o.key, '--outfile', join(o.out, 'cosign.pub')], { env });
    await files(o, image.debs);
    const manifest = { version: o.version, commit, ...refs, imageTag: `${o.registry}/berth:${o.version}` };
    writeFileSync(join(o.out, 'release.json'), `${JSON.stringify(manifest, null, 2)}\n`);
    sums(o.out);
    return manifest;
  } finally {
    proxy?.close();
    rmSync(work, { recursive: true, force: true });
  }
}

/** The CLI, its krew archives and manifest, the npm tarball and the SBOMs. */
async function files(o: ReleaseOptions, debs: Record<string, string[]>): Promise<void> {
  const cli = await buildCli(o.out, o.platforms, { log: o.log, requireCodeCache: true });
  const archives: Record<string, string> = {};
  for (const file of Object.values(cli.files)) {
    const arch = file.slice(file.lastIndexOf('-') + 1);
    const dir = join(o.out, '.work', `krew-${arch}`);
    mkdirSync(dir, { recursive: true });
    cpSync(file, join(dir, 'berth'));
    const tgz = `${file}.tar.gz`;
    run('tar', [
      '--create',
      '--gzip',
      `--file=${tgz}`,
      '--owner=0',
      '--group=0',
      '--mtime=@0',
      `--directory=${dir}`,
      'berth',
    ]);
    archives[arch] = sha256(tgz);
  }
  writeFileSync(join(o.out, 'berth.yaml'), krewManifest(o.version, o.downloadUrl, archives));
  const tarball = run('npm', ['pack', '--pack-destination', o.out, '--silent', '--ignore-scripts'])
    .split('\n')
    .pop()!;
  const lock = npmPackages(JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')));
  const now = new Date();
  const npm = {
    name: '@berth-dev/berth',
    version: o.version,
    purl: `pkg:npm/%40berth-dev/berth@${o.version}`,
  };
  writeFileSync(join(o.out, `${tarball}.spdx.json`), `${JSON.stringify(spdx(npm, lock, now), null, 2)}\n`);
  const node = {
    name: 'node',
    version: process.versions.node,
    purl: `pkg:generic/node@${process.versions.node}`,
  };
  const debian = [...new Set(Object.values(debs).flat())].map(debPackage);
  const image = { name: 'berth-image', version: o.version, purl: `pkg:oci/berth@${o.version}` };
  const doc = spdx(image, [...debian, node, npm, ...lock], now);
  writeFileSync(join(o.out, `berth-image-${o.version}.spdx.json`), `${JSON.stringify(doc, null, 2)}\n`);
}

/** SHA256SUMS of every file in `dir`, as `sha256sum -c` reads them. */
function sums(dir: string): void {
  const lines = readdirSync(dir, { withFileTypes: true })
    .filter((f) => f.isFile() && f.name !== 'SHA256SUMS')
    .map((f) => `${sha256(join(dir, f.name))}  ${f.name}`)
    .sort((a, b) => a.slice(66).localeCompare(b.slice(66)));
  writeFileSync(join(dir, 'SHA256SUMS'), `${lines.join('\n')}\n`);
}

/** The tree's state as releaseRefusals reads it. */
function state(version: string): ReleaseState {
  const chart = parseYaml(readFileSync(join(CHART, 'Chart.yaml'), 'utf8')) as ReleaseState['chart'];
  return {
    version,
    packageVersion: (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string })
      .version,
    chart: { version: String(chart.version), appVersion: String(chart.appVersion) },
    status: run('git', ['status', '--porcelain']),
    tags: run('git', ['tag', '--points-at', 'HEAD']).split('\n').filter(Boolean),
  };
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      version: { type: 'string' },
      registry: { type: 'string' },
      sandbox: { type: 'string' },
      key: { type: 'string' },
      out: { type: 'string' },
      'download-url': { type: 'string' },
      platform: { type: 'string', multiple: true },
    },
  });
  const version = values.version ?? '';
  const sandbox = values.sandbox ? new Sandbox(values.sandbox).registry : undefined;
  if (values.sandbox && !sandbox) throw new Error(`sandbox ${values.sandbox} runs no registry`);
  const registry = values.registry ?? sandbox?.host;
  const refusals = [
    ...releaseRefusals(state(version)),
    ...(registry ? [] : ['say where to push: --registry host[/path] (or --sandbox NAME)']),
    ...(values.key ? [] : ['say which key signs: --key cosign.key (cosign generate-key-pair)']),
  ];
  if (refusals.length) {
    for (const r of refusals) process.stderr.write(`berth: release refused: ${r}\n`);
    process.exit(1);
  }
  run('npm', ['run', 'build', '--silent']);
  const made = await release({
    version,
    registry: registry!,
    key: values.key!,
    out: values.out ?? join(root, 'dist', 'release', version),
    ...(sandbox ? { sandbox } : {}),
    platforms: (values.platform as ImagePlatform[] | undefined) ?? IMAGE_PLATFORMS,
    downloadUrl: values['download-url'] ?? `https://github.com/berth-dev/berth/releases/download/v${version}`,
    log: (s) => process.stderr.write(`${s}\n`),
  });
  process.stdout.write(`${JSON.stringify(made, null, 2)}\n`);
}
