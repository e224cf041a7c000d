import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { ANNOTATION_VALUE_MAX, outputValueError } from '../../../src/labels/values.ts';
import { escapeControl, quote, QUOTE_MAX } from '../../../src/policy/text.ts';

describe('quote', () => {
  test('quotes at most QUOTE_MAX characters of user text', () => {
    assert.equal(quote('abc'), '"abc"');
    const q = quote('x'.repeat(100_000));
    assert.equal(q, `"${'x'.repeat(QUOTE_MAX)}…"`);
  });
  test('escapes control characters, line breaks and bidirectional overrides', () => {
    assert.equal(quote('a\nb\r\tc\u0000'), '"a\\nb\\r\\tc\\u0000"');
    assert.equal(quote('\u007f\u0085\u2028\u202e'), '"\\u007f\\u0085\\u2028\\u202e"');
    // What a forged log line would need: a line break. None survives quoting.
    assert.doesNotMatch(quote('ok\n{"level":50,"msg":"forged"}'), /\n/);
  });
  test('escapeControl keeps text readable and adds no quotes', () => {
    assert.equal(escapeControl('/rules/ns/x\ny'), '/rules/ns/x\\u000ay');
    assert.equal(escapeControl('/rules/ns/plain'), '/rules/ns/plain');
  });
});

describe('outputValueError: one validator per output kind', () => {
  test('labels and taints take Kubernetes label values', () => {
    for (const kind of ['label', 'taint'] as const) {
      assert.equal(outputValueError(kind, ''), undefined);
      assert.equal(outputValueError(kind, 'T4.v1_x-y'), undefined);
      assert.match(outputValueError(kind, 'a b') ?? '', /must be empty or consist of/);
      assert.match(outputValueError(kind, 'x'.repeat(64)) ?? '', /no more than 63/);
      assert.ok(outputValueError(kind, 'a\nb'));
    }
  });
  test('annotations take any text without control characters, up to a bound', () => {
    assert.equal(outputValueError('annotation', 'arch arm64, "quoted" / é'), undefined);
    assert.match(
      outputValueError('annotation', 'a\nb') ?? '',
      /control characters or line breaks \(found "\\n"\)/,
    );
    assert.match(outputValueError('annotation', 'a\u0000') ?? '', /control characters/);
    assert.match(outputValueError('annotation', 'a\u2028') ?? '', /line breaks/);
    assert.equal(outputValueError('annotation', 'x'.repeat(ANNOTATION_VALUE_MAX)), undefined);
    assert.match(
      outputValueError('annotation', 'x'.repeat(ANNOTATION_VALUE_MAX + 1)) ?? '',
      /no more than 4096/,
    );
  });
});
