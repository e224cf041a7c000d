// freePorts: a preferred port where it is free (a restarted sandbox keeps its addresses), another
// where it is taken, and never the same port twice in one answer.
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { freePorts } from '../../../src/sandbox/net.ts';

test('a preferred port where it is free, another where it is taken, none twice', async () => {
  const [a, b] = (await freePorts(2)) as [number, number];
  assert.notEqual(a, b);
  assert.deepEqual(await freePorts(2, [b, a]), [b, a], 'both free: both kept');
  const holder = createServer();
  await new Promise<void>((r) => holder.listen(a, '127.0.0.1', r));
  try {
    const [x, y, z] = (await freePorts(3, [a, b])) as [number, number, number];
    assert.notEqual(x, a, 'taken: another');
    assert.equal(y, b);
    assert.equal(new Set([x, y, z]).size, 3);
  } finally {
    await new Promise((r) => holder.close(r));
  }
});
