import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  checkClusterName,
  clusterKey,
  localCluster,
  splitClusterKey,
} from '../../../src/runtime/cluster/key.ts';
import { withSeed, type Prng } from '../../helpers/prng.ts';

const label = (r: Prng, alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789') => {
  const inner = Array.from({ length: r.int(20) }, () => r.pick([...alphabet, '-'])).join('');
  return r.pick([...alphabet]) + inner + (inner ? r.pick([...alphabet]) : '');
};

test('a local key stays as it is and reads back as the local cluster', () => {
  for (const key of ['node-1', 'ns/name', 'nodelabelrule/r', 'p/3f2a-uid'])
    assert.deepEqual(splitClusterKey(clusterKey(localCluster, key)), { cluster: localCluster, key });
  assert.equal(clusterKey(localCluster, 'ns/name'), 'ns/name');
});

test('a key of another cluster names it and splits back exactly (generated cases)', () =>
  withSeed('cluster keys', (r) => {
    for (let i = 0; i < 500; i++) {
      const cluster = label(r);
      if (cluster === localCluster) continue;
      // Keys are any text, slashes and 'cluster://' included: only the first slash after the name splits.
      const key = Array.from({ length: r.int(4) }, () => r.pick([label(r), 'cluster://x', '', 'a:b'])).join(
        '/',
      );
      const queued = clusterKey(cluster, key);
      assert.notEqual(queued, key);
      assert.deepEqual(splitClusterKey(queued), { cluster, key });
      // A Kubernetes object key (names cannot hold ':') never reads as another cluster's.
      const objectKey = `${label(r)}/${label(r)}`;
      assert.equal(splitClusterKey(objectKey).cluster, localCluster);
    }
  }));

test('cluster names are DNS labels, so a cluster key splits without ambiguity', () => {
  for (const bad of ['', 'a/b', 'Cell', '-a', 'a-', 'a.b', 'x'.repeat(64)])
    assert.throws(() => checkClusterName(bad), /must be a DNS label/);
  for (const good of ['a', 'cell-1', 'x'.repeat(63)]) checkClusterName(good);
  assert.throws(() => splitClusterKey('cluster://cell'), /names a cluster but no key/);
});
