import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ADMISSION_BUDGET_MS, imageWait, INSPECT_MISS_MS } from '../../../../src/arch/decide/admission.ts';

const a = { image: 'r.example/a:1', revalidate: false };
const b = { image: 'r.example/b:1', revalidate: false };
const always = { image: 'r.example/c:latest', revalidate: true };

test('an image never asked is asked now and waited for waitMs, within the review budget', () => {
  const w = imageWait({ unknown: [a], asked: new Map(), now: 1000, arrived: 1000, waitMs: 500 });
  assert.deepEqual(w, { at: 1000, ask: [a], hinted: [a], waitFor: 500 });
  // A review that came long ago has only what is left of its budget.
  const late = imageWait({
    unknown: [a],
    asked: new Map(),
    now: 1000,
    arrived: 1000 - ADMISSION_BUDGET_MS + 100,
    waitMs: 500,
  });
  assert.equal(late.waitFor, 100);
});

test("an image asked meanwhile is waited for until its first asker's deadline, not asked again", () => {
  const w = imageWait({
    unknown: [a],
    asked: new Map([[a.image, 800]]),
    now: 1000,
    arrived: 1000,
    waitMs: 500,
  });
  assert.deepEqual([w.ask, w.hinted, w.waitFor], [[], [], 300]);
  // Its deadline past (a miss): no wait, until INSPECT_MISS_MS after it was asked.
  const missed = imageWait({
    unknown: [a],
    asked: new Map([[a.image, 0]]),
    now: 1000,
    arrived: 1000,
    waitMs: 500,
  });
  assert.ok(missed.waitFor <= 0);
  const again = imageWait({
    unknown: [a],
    asked: new Map([[a.image, 0]]),
    now: INSPECT_MISS_MS,
    arrived: INSPECT_MISS_MS,
    waitMs: 500,
  });
  assert.deepEqual([again.ask, again.waitFor], [[a], 500]);
});

test('the earliest deadline of the pod images wins; a tag pulled Always is hinted for every pod', () => {
  const asked = new Map([
    [b.image, 900],
    [always.image, 950],
  ]);
  const w = imageWait({ unknown: [a, b, always], asked, now: 1000, arrived: 1000, waitMs: 500 });
  assert.deepEqual(w.ask, [a]);
  assert.deepEqual(w.hinted, [a, always]);
  assert.equal(w.waitFor, 400);
});
