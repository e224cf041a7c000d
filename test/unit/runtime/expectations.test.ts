import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { maxWaitMs, WriteExpectations } from '../../../src/runtime/controller/expectations.ts';
import type { EventHandler } from '../../../src/runtime/cache/informer.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';

const node = (resourceVersion: string): KubeObject => ({ metadata: { name: 'n1', resourceVersion } });

function setup() {
  let handler: EventHandler<KubeObject> | undefined;
  const e = new WriteExpectations<string>({ addEventHandler: (h) => void (handler = h) });
  return {
    e,
    add: (o: KubeObject) => handler!.onAdd!(o),
    update: (o: KubeObject) => handler!.onUpdate!(o, o),
    remove: (o: KubeObject) => handler!.onDelete!(o),
  };
}

describe('WriteExpectations', () => {
  test('a write is pending until the cache holds its version, then forgotten', () => {
    const { e, update } = setup();
    assert.equal(e.pending(node('10')), undefined);
    e.expect('n1', '12', 'plan-a');
    assert.equal(e.pending(node('10')), 'plan-a');
    update(node('11'));
    assert.equal(e.pending(node('11')), 'plan-a', 'an older event does not count');
    update(node('12'));
    assert.equal(e.pending(node('10')), undefined, 'its echo seen: a stale copy no longer waits');
  });

  test('a newer version counts as seen (a relist may skip the echo itself)', () => {
    const { e } = setup();
    e.expect('n1', '12', 'plan-a');
    assert.equal(e.pending(node('15')), undefined);
  });

  test('forget drops the expectation; a write without a version expects nothing', () => {
    const { e } = setup();
    e.expect('n1', '12', 'plan-a');
    e.forget('n1');
    assert.equal(e.pending(node('10')), undefined);
    e.expect('n1', undefined, 'plan-b');
    assert.equal(e.pending(node('10')), undefined);
  });

  test('a create is pending by key until its add event, a delete until its delete event', () => {
    const { e, add, remove } = setup();
    assert.equal(e.pendingKey('n1'), undefined);
    e.expect('n1', '12', 'create');
    assert.equal(e.pendingKey('n1'), 'create', 'not cached yet');
    add(node('12'));
    assert.equal(e.pendingKey('n1'), undefined, 'its add event seen');
    e.expect('n1', '13', 'delete');
    remove(node('12'));
    assert.equal(e.pendingKey('n1'), undefined, 'gone from the cache: nothing left to wait for');
  });

  test('an echo that came before the write was answered counts: a create deleted at once waits for nothing', () => {
    const { e, add, update, remove } = setup();
    // The Pod made and deleted by someone else, both events in before the create's answer.
    add(node('20'));
    remove(node('21'));
    e.expect('n1', '20', 'create');
    assert.equal(e.pendingKey('n1'), undefined);
    // An earlier object's events under the same key do not stand for a later write's echo.
    e.expect('n1', '30', 'create again');
    assert.equal(e.pendingKey('n1'), 'create again');
    update(node('30'));
    assert.equal(e.pendingKey('n1'), undefined);
  });

  test('what it holds stays bounded: echoes drop their writes, and writes whose echo never came go after maxWaitMs', (t) => {
    t.mock.timers.enable({ apis: ['Date'], now: 0 });
    const { e, add } = setup();
    const obj = (name: string, resourceVersion: string): KubeObject => ({
      metadata: { name, resourceVersion },
    });
    // A write per object ever made, each echoed: none is kept (before, one per key ever written).
    for (let i = 0; i < 100; i++) {
      e.expect(`n${i}`, String(100 + i), 'create');
      add(obj(`n${i}`, String(100 + i)));
    }
    assert.equal(e.size, 0);
    // Writes whose echo never comes and that are never asked about again (their objects gone).
    for (let i = 0; i < 100; i++) e.expect(`lost${i}`, String(1000 + i), 'create');
    assert.equal(e.size, 100);
    t.mock.timers.tick(maxWaitMs + 1);
    e.expect('next', '5000', 'create');
    assert.equal(e.size, 1, 'only the new write');
  });
});
