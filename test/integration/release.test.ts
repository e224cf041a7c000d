// test-driver: alone — two releases (image builds, Go and Node bundling) load both cores, which would
// slow the timed files beside it.
//
// A release, installed the way docs/getting-started/install.md says, with nothing from the checkout.
// Two releases are made into the sandbox's registry by `npm run release` (scripts/release.ts), each
// from a clone of this commit tagged as it: 0.0.1 (the same tree, its versions set to 0.0.1: the
// previous release) and the package's version. To save time, linux/amd64 only (the image and the
// CLI); the release script makes both platforms by default. Then, in a folder holding only the
// released files, with PATH holding only the CLI binary (berth, kubectl-berth), helm and cosign (and
// the system's /usr/bin): the checksums are checked, the image's and the chart's signatures verified
// with the public key, the previous chart installed from oci://…/charts/berth and upgraded to this
// one, `berth plan`, `kubectl berth explain` and, after `helm uninstall`, `berth uninstall` run.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { NodeLabelRule } from '../../src/labels/crd.ts';
import { Resources } from '../../src/runtime/api/meta.ts';
import { ensureCosign, ensureHelm } from '../../src/sandbox/build.ts';
import { packageRoot } from '../../src/sandbox/paths.ts';
import { Sandbox } from '../../src/sandbox/sandbox.ts';
import type { KubeClient } from '../../src/runtime/client/client.ts';
import { uniqueName } from '../helpers/cluster.ts';
import { releasePlace } from '../helpers/helm.ts';

// A sandbox of its own: what other files leave cluster-wide (a ClusterRole named berth) would stop a
// release named berth from installing, and a user installs into a cluster without them.
const sandbox = new Sandbox(uniqueName('release'));
let client: KubeClient;
const root = packageRoot();
const PREVIOUS = '0.0.1';
const CURRENT = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
const ns = uniqueName('rel');
const work = mkdtempSync(join(tmpdir(), 'berth-release-'));
const PASSWORD = 'release-test';
let place: Awaited<ReturnType<typeof releasePlace>> | undefined;
let userEnv: NodeJS.ProcessEnv;
let cosignPath: string;
const made: Record<string, { image: string; chart: string; commit: string; out: string }> = {};

function sh(cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 900_000, maxBuffer: 64 << 20, ...opts });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} failed (${r.status}):\n${r.stderr}${r.error ?? ''}`);
  return r.stdout;
}

/** A clone of this commit at `version` (package.json and Chart.yaml), tagged, released into the sandbox. */
function makeRelease(version: string, key: string): void {
  const clone = join(work, `src-${version}`);
  sh('git', ['clone', '--quiet', root, clone]);
  symlinkSync(join(root, 'node_modules'), join(clone, 'node_modules'));
  const git = (args: string[]) =>
    sh('git', ['-c', 'user.name=release-test', '-c', 'user.email=release-test@example.org', ...args], {
      cwd: clone,
    });
  if (version !== CURRENT) {
    const pkg = join(clone, 'package.json');
    writeFileSync(
      pkg,
      readFileSync(pkg, 'utf8').replace(`"version": "${CURRENT}"`, `"version": "${version}"`),
    );
    const chartFile = join(clone, 'deploy/helm/berth/Chart.yaml');
    const chart = readFileSync(chartFile, 'utf8')
      .replace(/^version: .*$/m, `version: ${version}`)
      .replace(/^appVersion: .*$/m, `appVersion: '${version}'`);
    writeFileSync(chartFile, chart);
    git(['commit', '--quiet', '-am', `release ${version}`]);
  }
  git(['tag', `v${version}`]);
  const out = join(work, 'out', version);
  const args = ['scripts/release.ts', '--version', version, '--sandbox', sandbox.name, '--key', key];
  const stdout = sh(process.execPath, [...args, '--out', out, '--platform', 'linux/amd64'], {
    cwd: clone,
    env: { ...process.env, COSIGN_PASSWORD: PASSWORD },
  });
  made[version] = { ...(JSON.parse(stdout) as { image: string; chart: string; commit: string }), out };
}

before(
  async () => {
    await sandbox.up({ fresh: true, registry: true });
    client = sandbox.client();
    const registry = sandbox.registry;
    assert.ok(registry, 'the sandbox runs a registry');
    const [helm, cosign] = [await ensureHelm(), await ensureCosign()];
    cosignPath = cosign;
    const keys = join(work, 'keys');
    mkdirSync(keys);
    sh(cosign, ['generate-key-pair'], { cwd: keys, env: { ...process.env, COSIGN_PASSWORD: PASSWORD } });
    for (const v of [PREVIOUS, CURRENT]) makeRelease(v, join(keys, 'cosign.key'));
    // The user's machine: the released files, and on PATH only the CLI, helm and cosign.
    const bin = join(work, 'user', 'bin');
    mkdirSync(bin, { recursive: true });
    copyFileSync(join(made[CURRENT]!.out, 'berth-linux-amd64'), join(bin, 'berth'));
    sh('chmod', ['+x', join(bin, 'berth')]);
    symlinkSync('berth', join(bin, 'kubectl-berth'));
    for (const b of [helm, cosign]) symlinkSync(b, join(bin, b.slice(dirname(b).length + 1)));
    userEnv = {
      PATH: `${bin}:/usr/bin:/bin`,
      HOME: join(work, 'user'),
      KUBECONFIG: sandbox.kubeconfigPath,
      // The sandbox registry's CA, as a user trusts a private registry's.
      SSL_CERT_FILE: registry.caPath,
    };
    place = await releasePlace(client, ns);
    // Two releases: some three minutes each on a quiet machine, several times that on a busy one.
  },
  { timeout: 40 * 60_000 },
);

after(async () => {
  await place?.remove();
  client?.close();
  await sandbox.destroy();
  rmSync(work, { recursive: true, force: true });
});

/** Runs a command as the user: in the release's folder, with the user's PATH alone. */
const user = (version: string, cmd: string, args: string[]) =>
  spawnSync(cmd, args, { cwd: made[version]!.out, env: userEnv, encoding: 'utf8', timeout: 300_000 });
const ok = (r: ReturnType<typeof user>, what: string) => {
  assert.equal(r.status, 0, `${what} failed (${r.status}):\n${r.stderr}${r.error ?? ''}`);
  return r.stdout;
};

describe('a release, from its artifacts alone', () => {
  test('its files match their checksums, and its image and chart verify against the key', () => {
    for (const v of [PREVIOUS, CURRENT]) {
      ok(user(v, 'sha256sum', ['--check', '--strict', 'SHA256SUMS']), `sha256sum -c (${v})`);
      const { image, chart } = made[v]!;
      for (const ref of [image, chart.replace(/@sha256:.*/, `:${v}`)]) {
        const said = ok(
          user(v, 'cosign', ['verify', '--key', 'cosign.pub', '--insecure-ignore-tlog=true', ref]),
          ref,
        );
        assert.match(said, new RegExp(`"docker-manifest-digest":"sha256:`));
      }
    }
    // Another key does not verify them.
    const other = join(work, 'other');
    mkdirSync(other);
    sh(cosignPath, ['generate-key-pair'], {
      cwd: other,
      env: { ...process.env, COSIGN_PASSWORD: PASSWORD },
    });
    const refused = user(CURRENT, 'cosign', [
      'verify',
      '--key',
      join(other, 'cosign.pub'),
      '--insecure-ignore-tlog=true',
      made[CURRENT]!.image,
    ]);
    assert.notEqual(refused.status, 0, 'a signature checked against another key');
  });

  test('berth version names the release and its commit; as kubectl berth too', () => {
    const said = JSON.parse(ok(user(CURRENT, 'berth', ['version', '-o', 'json']), 'berth version')) as Record<
      string,
      string
    >;
    assert.equal(said['berthVersion'], CURRENT);
    assert.equal(said['gitCommit'], made[CURRENT]!.commit);
    assert.match(
      ok(user(CURRENT, 'kubectl-berth', ['--help']), 'kubectl-berth --help'),
      /^Usage: kubectl berth/,
    );
  });

  test('helm installs the previous release from OCI and upgrades to this one, each running its signed image', async () => {
    const registry = sandbox.registry!;
    const charts = `oci://${registry.host}/charts/berth`;
    const values = Object.entries(place!.onNode).flatMap(([k, v]) => ['--set', `${k}=${v}`]);
    const deployed = async () =>
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      ((await client.get(Resources.deployments, 'berth', ns)) as any).spec.template.spec.containers[0]
        .image as string;
    ok(
      user(PREVIOUS, 'helm', [
        'install',
        'berth',
        charts,
        '--version',
        PREVIOUS,
        '-n',
        ns,
        '--wait=false',
        ...values,
      ]),
      'helm install',
    );
    assert.equal(await deployed(), made[PREVIOUS]!.image);
    ok(
      user(CURRENT, 'helm', [
        'upgrade',
        'berth',
        charts,
        '--version',
        CURRENT,
        '-n',
        ns,
        '--wait=false',
        ...values,
      ]),
      'helm upgrade',
    );
    assert.equal(await deployed(), made[CURRENT]!.image);
  });

  test('the CLI plans and explains against the cluster, and uninstalls after helm uninstall', async () => {
    const rule = uniqueName('rel');
    writeFileSync(
      join(made[CURRENT]!.out, 'rule.yaml'),
      JSON.stringify({
        apiVersion: NodeLabelRule.apiVersion,
        kind: NodeLabelRule.kind,
        metadata: { name: rule },
        spec: {
          match: { anyOf: [{ label: `${ns}.test/berth`, operator: 'Exists' }] },
          labels: { [`${rule}.example/on`]: 'true' },
        },
      }),
    );
    const plan = user(CURRENT, 'berth', ['plan', '-f', 'rule.yaml', '--berth-namespace', ns]);
    // 2: changes, the rule would label this file's node.
    assert.equal(plan.status, 2, `berth plan:\n${plan.stdout}${plan.stderr}`);
    assert.match(plan.stdout, new RegExp(place!.node));
    const explained = ok(
      user(CURRENT, 'kubectl-berth', ['explain', 'node', place!.node]),
      'kubectl berth explain',
    );
    assert.match(explained, new RegExp(place!.node));
    ok(user(CURRENT, 'helm', ['uninstall', 'berth', '-n', ns, '--wait']), 'helm uninstall');
    ok(user(CURRENT, 'berth', ['uninstall', '--berth-namespace', ns]), 'berth uninstall');
    const crds = await client.list(Resources.crds);
    assert.deepEqual(
      crds.items.map((c) => c.metadata!.name!).filter((n) => n.endsWith('.berth.dev')),
      [],
      'berth uninstall deleted the CRDs',
    );
  });
});
