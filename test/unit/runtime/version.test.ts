// What an apiserver's /version says against the Kubernetes minors Berth supports.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  parseServerVersion,
  SUPPORTED_KUBERNETES,
  unsupportedReason,
} from '../../../src/runtime/api/version.ts';

test('the version is read from gitVersion, else from major and minor as managed clusters write them', () => {
  assert.deepEqual(parseServerVersion({ gitVersion: 'v1.37.2' }), { major: 1, minor: 37 });
  assert.deepEqual(parseServerVersion({ gitVersion: 'v1.36.3-eks-4a8b2c1' }), { major: 1, minor: 36 });
  assert.deepEqual(parseServerVersion({ major: '1', minor: '35+', gitVersion: '' }), { major: 1, minor: 35 });
  assert.equal(parseServerVersion({ gitVersion: 'main' }), undefined);
});

test('an apiserver emulating an older minor (--emulated-version) is that minor: it serves those APIs', () => {
  const v = { gitVersion: 'v1.37.2', major: '1', minor: '37', emulationMajor: '1', emulationMinor: '34' };
  assert.deepEqual(parseServerVersion(v), { major: 1, minor: 34 });
  assert.match(
    unsupportedReason(v) ?? '',
    /Kubernetes 1\.34 \(emulated by v1\.37\.2\), older than Berth supports/,
  );
  assert.equal(unsupportedReason({ ...v, emulationMinor: '36' }), undefined);
});

test('the supported minors pass; one below, one above and an unreadable version are refused, saying why', () => {
  assert.deepEqual(SUPPORTED_KUBERNETES, { oldest: 35, newest: 37 });
  for (const v of ['v1.35.0', 'v1.36.3', 'v1.37.2'])
    assert.equal(unsupportedReason({ gitVersion: v }), undefined, v);
  assert.match(
    unsupportedReason({ gitVersion: 'v1.34.4' }) ?? '',
    /v1\.34\.4, older than Berth supports \(1\.35 to 1\.37/,
  );
  assert.match(unsupportedReason({ gitVersion: 'v1.38.0' }) ?? '', /v1\.38\.0, newer than Berth supports/);
  assert.match(unsupportedReason({ gitVersion: 'v2.0.0' }) ?? '', /newer/);
  assert.match(unsupportedReason({ major: '1', minor: '' }) ?? '', /cannot read \(1\./);
});
