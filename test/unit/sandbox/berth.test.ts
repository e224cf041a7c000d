import assert from 'node:assert/strict';
import { test } from 'node:test';
import { berthRunArgs } from '../../../src/sandbox/berth.ts';

const ports = { metrics: 1, health: 2 };

test("berth run requires the apiserver's webhook client certificate when the sandbox's apiserver presents one", () => {
  assert.ok(
    berthRunArgs('kc', ports, [], { webhookClientCa: '/ca.crt' }).includes('--webhook-client-ca=/ca.crt'),
  );
  assert.ok(!berthRunArgs('kc', ports, []).some((a) => a.startsWith('--webhook-client-ca')));
});

test("a caller's own flags come last, so they override the sandbox's", () => {
  const args = berthRunArgs('kc', ports, ['--webhook-bind-address=0'], { webhookClientCa: '/ca.crt' });
  assert.equal(args.at(-1), '--webhook-bind-address=0');
  assert.ok(args.indexOf('--webhook-client-ca=/ca.crt') < args.length - 1);
});
