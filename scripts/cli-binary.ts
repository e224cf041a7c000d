// `npm run cli-binary`: the `berth` command as one file per platform, needing neither Node.js nor
// the sources (decision 0045). esbuild bundles src/cli/main.ts and its dependencies into one
// CommonJS script, with the version and commit baked in; Node's single executable applications turn
// it into a blob (`node --experimental-sea-config`, on the locked Node.js, which the binaries are
// too), and postject injects that blob into a copy of each platform's `node` from its npm package
// (the image's, scripts/image.ts). Each platform's blob is made by its own `node` (arm64's under
// qemu-user on an amd64 machine) so that it carries V8's code cache. The UI's page script rides
// along as an asset.
//
//   npm run cli-binary -- [--out DIR] [--platform linux/amd64]   (writes DIR/berth-linux-<arch>)
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { build, type Plugin } from 'esbuild';
import { inject } from 'postject';
import { cacheDir, packageRoot } from '../src/sandbox/paths.ts';
import { PAGE_ASSET } from '../src/ui/server.ts';
import { debianBase, IMAGE_PLATFORMS, nodeBinary, PLATFORMS, type ImagePlatform } from './image.ts';

const root = packageRoot();

/** The fuse Node.js looks for to know it carries a blob (Node's docs, "Single executable applications"). */
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

/** What `berth version` says of a build: the package's version, and the checkout's commit. */
export function buildInfo(): { version: string; commit: string } {
  const { version } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string };
  const r = spawnSync('git', ['rev-parse', 'HEAD'], { cwd: root, encoding: 'utf8' });
  return { version, commit: r.status === 0 ? r.stdout.trim() : 'unknown' };
}

/** The CLI as one CommonJS script: `import.meta.url` (which ESM code reads) is the executable's URL. */
async function bundle(out: string, info: { version: string; commit: string }): Promise<void> {
  await build({
    entryPoints: [join(root, 'src', 'cli', 'main.ts')],
    outfile: out,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node24',
    minify: true,
    legalComments: 'none',
    logLevel: 'warning',
    banner: { js: 'var __berth_url=require("node:url").pathToFileURL(process.execPath).href;' },
    define: { 'import.meta.url': '__berth_url', BERTH_BUILD: JSON.stringify(info) },
    plugins: [bundledRequire],
  });
}

/**
 * What Berth's sources load when first used (`createRequire(import.meta.url)('yaml')`, decision
 * 0050) is, in a CommonJS bundle, the bundle's own `require('yaml')`: written so, esbuild bundles it
 * (still run only when first called). Left as it is, the executable would look for node_modules.
 */
const bundledRequire: Plugin = {
  name: 'bundled-require',
  setup(b) {
    b.onLoad({ filter: /[\\/]src[\\/].*\.ts$/ }, (args) => ({
      contents: readFileSync(args.path, 'utf8').replaceAll('createRequire(import.meta.url)(', 'require('),
      loader: 'ts',
    }));
  },
};

export interface BuiltCli {
  /** Each platform's executable. */
  files: Record<string, string>;
  version: string;
  commit: string;
}

/** How to run a platform's `node` here: natively, under qemu-user (with its Debian base), or not. */
function runner(deb: string, base: () => string): string[] | undefined {
  const native = { x64: 'amd64', arm64: 'arm64' }[process.arch as string];
  if (native === deb) return [];
  const qemu = `qemu-${deb === 'arm64' ? 'aarch64' : 'x86_64'}-static`;
  if (spawnSync(qemu, ['--version']).status !== 0) return undefined;
  return [qemu, '-L', base()];
}

/**
 * The blob for one platform, made by that platform's `node` so that it carries V8's code cache
 * (without which the bundled script is compiled at every start, several times slower): run
 * natively, or under qemu-user. Where neither can run it, a blob without the cache, said in the
 * log (a release asks buildCli to stop instead: requireCodeCache).
 */
function blob(
  work: string,
  deb: string,
  node: string,
  assets: Record<string, string>,
  o: CliOptions,
): Buffer {
  const run = runner(deb, () => {
    debianBase(deb, join(work, `${deb}-base`), o.log);
    return join(work, `${deb}-base`);
  });
  if (!run) o.log(noCodeCache(deb));
  const config = {
    main: join(work, 'berth.cjs'),
    output: join(work, `${deb}.blob`),
    disableExperimentalSEAWarning: true,
    useSnapshot: false,
    useCodeCache: run !== undefined,
    assets,
  };
  writeFileSync(join(work, `${deb}.json`), JSON.stringify(config));
  const [cmd, ...args] = run ? [...run, node] : [process.execPath];
  const r = spawnSync(cmd!, [...args, '--experimental-sea-config', join(work, `${deb}.json`)], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`node --experimental-sea-config (${deb}) failed:\n${r.stderr}`);
  return readFileSync(config.output);
}

const noCodeCache = (deb: string) =>
  `no qemu-${deb === 'arm64' ? 'aarch64' : 'x86_64'}-static here: berth-linux-${deb} would start without V8's code cache`;

export interface CliOptions {
  log: (s: string) => void;
  /** Fail rather than build a platform's file without V8's code cache (a release). */
  requireCodeCache?: boolean;
}

/** Builds `berth-linux-<arch>` for each platform into `outDir`. */
export async function buildCli(
  outDir: string,
  platforms: ImagePlatform[] = IMAGE_PLATFORMS,
  o: CliOptions = { log: () => {} },
): Promise<BuiltCli> {
  const { log } = o;
  const uncached = platforms.map((p) => PLATFORMS[p].deb).filter((deb) => !runner(deb, () => ''));
  if (o.requireCodeCache && uncached[0] !== undefined)
    throw new Error(
      `${noCodeCache(uncached[0])}; install it (apt-get install qemu-user-static) to make a release`,
    );
  const info = buildInfo();
  const work = join(cacheDir(), 'image', `sea-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  mkdirSync(outDir, { recursive: true });
  try {
    log(`bundling berth ${info.version} (${info.commit.slice(0, 12)})`);
    await bundle(join(work, 'berth.cjs'), info);
    const assets = { [PAGE_ASSET]: join(root, 'dist', 'ui', 'web', 'page', 'app.js') };
    const files: Record<string, string> = {};
    for (const p of platforms) {
      const { deb, node } = PLATFORMS[p];
      nodeBinary(node, join(work, deb), log);
      const nodeFile = join(work, deb, 'usr', 'local', 'bin', 'node');
      const data = blob(work, deb, nodeFile, assets, o);
      const file = join(outDir, `berth-linux-${deb}`);
      copyFileSync(nodeFile, file);
      chmodSync(file, 0o755);
      log(`injecting into ${file}`);
      await inject(file, 'NODE_SEA_BLOB', data, { sentinelFuse: SEA_FUSE });
      files[p] = file;
    }
    return { files, ...info };
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      out: { type: 'string', default: join(root, 'dist', 'bin') },
      platform: { type: 'string', multiple: true },
    },
  });
  const built = await buildCli(values.out, values.platform as ImagePlatform[] | undefined, {
    log: (s) => process.stderr.write(`${s}\n`),
  });
  for (const f of Object.values(built.files)) process.stdout.write(`${f}\n`);
}
