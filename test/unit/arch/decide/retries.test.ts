import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { MAX_PAUSED_MS, nextTry } from '../../../../src/arch/decide/retries.ts';
import { InspectionError } from '../../../../src/registry/types.ts';

describe('after a failed inspection', () => {
  const now = 1_000_000;
  const ctx = { now, secretsMissing: false };
  const err = (reason: InspectionError['reason'], transient: boolean, retryAt?: number) =>
    new InspectionError(reason, 'web:1', 'x', transient, retryAt);

  test('transient: 1 s doubling, up to the retries; permanent: at once', () => {
    let r = { attempts: 0 };
    const waits: number[] = [];
    for (let step; (step = nextTry(err('Unreachable', true), r, 3, ctx)); r = step.retries)
      waits.push(step.afterMs);
    assert.deepEqual(waits, [1000, 2000, 4000]);
    assert.equal(nextTry(err('Malformed', false), { attempts: 0 }, 3, ctx), undefined);
    assert.equal(nextTry(err('Unauthorized', false), { attempts: 0 }, 3, ctx), undefined);
    assert.equal(nextTry(err('Unreachable', true), { attempts: 9 }, 10, ctx)?.afterMs, 30_000);
  });

  test('a registry that asked to wait is waited out as asked, without using a retry, for a bounded time', () => {
    const paused = nextTry(err('RateLimited', true, now + 30_000), { attempts: 2 }, 3, ctx);
    assert.deepEqual(paused, { afterMs: 30_000, retries: { attempts: 2, pausedSince: now } });
    // Pauses keep the first pause's time: waited out while they end within MAX_PAUSED_MS of it.
    const later = now + MAX_PAUSED_MS - 60_000;
    const again = nextTry(err('RateLimited', true, later + 60_000), paused!.retries, 3, {
      ...ctx,
      now: later,
    });
    assert.deepEqual(again, { afterMs: 60_000, retries: { attempts: 2, pausedSince: now } });
    // Beyond it, a pause counts as a retry like any transient failure, and the retries end.
    const beyond = nextTry(err('RateLimited', true, later + 60_001), paused!.retries, 3, {
      ...ctx,
      now: later,
    });
    assert.deepEqual(beyond, { afterMs: 4000, retries: { attempts: 3, pausedSince: now } });
    assert.equal(
      nextTry(err('RateLimited', true, later + 60_001), beyond!.retries, 3, { ...ctx, now: later }),
      undefined,
    );
    // No retries at all: the policy asked to act at once, pause or not.
    assert.equal(nextTry(err('RateLimited', true, now + 30_000), { attempts: 0 }, 0, ctx), undefined);
    // A pause already over: an ordinary retry.
    assert.deepEqual(nextTry(err('RateLimited', true, now), { attempts: 0 }, 3, ctx), {
      afterMs: 1000,
      retries: { attempts: 1 },
    });
  });

  test('refused or not found while a pull secret the pod names was missing: retried, the secret may come next', () => {
    const missing = { now, secretsMissing: true };
    for (const reason of ['Unauthorized', 'NotFound'] as const) {
      assert.deepEqual(nextTry(err(reason, false), { attempts: 0 }, 3, missing), {
        afterMs: 1000,
        retries: { attempts: 1 },
      });
      assert.equal(nextTry(err(reason, false), { attempts: 3 }, 3, missing), undefined);
    }
    assert.equal(nextTry(err('Malformed', false), { attempts: 0 }, 3, missing), undefined);
  });
});
