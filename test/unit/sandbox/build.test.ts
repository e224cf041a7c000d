// Which Kubernetes the sandbox builds: one wrapper module per supported minor, the newest the default.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { parse } from 'yaml';
import { minorName, SUPPORTED_KUBERNETES } from '../../../src/runtime/api/version.ts';
import {
  DEFAULT_KUBERNETES_MINOR,
  defaultKubernetesMinor,
  KUBERNETES_MINORS,
  kubernetesMinorOf,
  kubernetesVersion,
  type KubernetesMinor,
} from '../../../src/sandbox/build.ts';
import { controlPlaneSourceDir, packageRoot } from '../../../src/sandbox/paths.ts';

const minors = Object.keys(KUBERNETES_MINORS) as KubernetesMinor[];

test('the sandbox builds every supported minor, newest first, the newest by default', () => {
  const supported = [];
  for (let m = SUPPORTED_KUBERNETES.newest; m >= SUPPORTED_KUBERNETES.oldest; m--)
    supported.push(minorName(m));
  assert.deepEqual(minors, supported);
  assert.equal(DEFAULT_KUBERNETES_MINOR, minors[0]);
});

test("each minor's wrapper pins that minor and maps every staging module to its v0 release", () => {
  for (const minor of minors) {
    const version = kubernetesVersion(minor);
    assert.match(version, new RegExp(`^v${minor.replace('.', '\\.')}\\.\\d+$`));
    const gomod = readFileSync(
      join(controlPlaneSourceDir(), KUBERNETES_MINORS[minor].kubernetes, 'go.mod'),
      'utf8',
    );
    const staged = [...gomod.matchAll(/^\s*(k8s\.io\/[a-z-]+) => (k8s\.io\/[a-z-]+) (v\S+)$/gm)];
    assert.ok(staged.length >= 30, `${minor}: the staging modules are mapped`);
    for (const [, from, to, v] of staged) {
      assert.equal(from, to);
      assert.equal(v, version.replace(/^v1\./, 'v0.'), `${minor}: ${from}`);
    }
  }
});

test("each minor's etcd is the etcd minor its Kubernetes release pins", () => {
  // build/dependencies.yaml of each release: 1.35 and 1.36 pin etcd 3.6, 1.37 pins etcd 3.7.
  const pinned: Record<KubernetesMinor, string> = { '1.35': '3.6', '1.36': '3.6', '1.37': '3.7' };
  for (const minor of minors) {
    const gomod = readFileSync(
      join(controlPlaneSourceDir(), KUBERNETES_MINORS[minor].etcd, 'go.mod'),
      'utf8',
    );
    assert.match(
      gomod,
      new RegExp(`go\\.etcd\\.io/etcd/server/v3 v${pinned[minor].replace('.', '\\.')}\\.\\d+`),
      minor,
    );
  }
});

test('a version names a minor as 1.36, v1.36 or its pinned patch, and nothing else', () => {
  assert.equal(kubernetesMinorOf('1.36'), '1.36');
  assert.equal(kubernetesMinorOf('v1.37'), '1.37');
  assert.equal(kubernetesMinorOf(kubernetesVersion('1.35')), '1.35');
  assert.equal(kubernetesMinorOf(kubernetesVersion('1.35').slice(1)), '1.35');
  for (const v of ['1.34', '1.38', '1.37.999', 'latest', '', '1', 'toString', '1.constructor'])
    assert.equal(kubernetesMinorOf(v), undefined, v);
  assert.equal(defaultKubernetesMinor({}), DEFAULT_KUBERNETES_MINOR);
  assert.equal(defaultKubernetesMinor({ BERTH_KUBERNETES_VERSION: 'v1.35' }), '1.35');
  assert.throws(
    () => defaultKubernetesMinor({ BERTH_KUBERNETES_VERSION: '1.30' }),
    /1\.30: the sandbox builds Kubernetes 1\.37 \(v1\.37\.\d+\), 1\.36/,
  );
});

test("the Helm chart's kubeVersion is the supported range", () => {
  const chart = parse(readFileSync(join(packageRoot(), 'deploy/helm/berth/Chart.yaml'), 'utf8')) as {
    kubeVersion: string;
  };
  assert.equal(
    chart.kubeVersion,
    `>=${minorName(SUPPORTED_KUBERNETES.oldest)}.0-0 <${minorName(SUPPORTED_KUBERNETES.newest + 1)}.0-0`,
  );
});
