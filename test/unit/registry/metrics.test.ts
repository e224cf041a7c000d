import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseRegistriesConfig } from '../../../src/registry/hosts.ts';
import { configuredHosts, hostLabel } from '../../../src/registry/metrics.ts';

test('registry hosts in metrics: well-known and configured ones by name, any other is `other` (issue 47)', () => {
  const configured = configuredHosts(
    parseRegistriesConfig({
      registries: {
        'docker.io': { mirrors: [{ url: 'https://mirror.internal:5000' }] },
        'registry.internal:5000': {},
        'lab.local:5000': { server: 'http://lab.local:5000', insecure: true },
      },
    }),
  );
  assert.deepEqual([...configured].sort(), [
    'lab.local:5000',
    'mirror.internal:5000',
    'registry-1.docker.io',
    'registry.internal:5000',
  ]);
  for (const host of ['quay.io', 'auth.docker.io', 'mirror.internal:5000', 'registry.internal:5000'])
    assert.equal(hostLabel(host, configured), host);
  // Whatever hosts the pods name, they add one series.
  const named = new Set(
    Array.from({ length: 1000 }, (_, i) => hostLabel(`r${i}.attacker.example`, configured)),
  );
  assert.deepEqual([...named], ['other']);
  assert.equal(hostLabel('registry.internal:5001', configured), 'other');
  assert.equal(hostLabel('quay.io', configuredHosts(undefined)), 'quay.io');
});
