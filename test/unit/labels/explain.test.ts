import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { explainNodeLabels } from '../../../src/labels/explain.ts';
import { holdsOf } from '../../../src/labels/files.ts';
import { scanRuleDir } from '../../../src/labels/files.ts';
import { FIELD_MANAGER } from '../../../src/labels/types.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';

/** A node carrying `owned`, set by Berth's field manager, and `others`, set by someone else. */
const node = (owned: Record<string, string>, others: Record<string, string> = {}): KubeObject => ({
  metadata: {
    name: 'n1',
    labels: { ...others, ...owned },
    managedFields: [
      {
        manager: FIELD_MANAGER,
        operation: 'Apply',
        fieldsV1: {
          'f:metadata': { 'f:labels': Object.fromEntries(Object.keys(owned).map((k) => [`f:${k}`, {}])) },
        },
      },
    ],
  },
});

async function ruleDir(t: TestContext, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-explain-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), content);
  }
  return dir;
}

describe('explain node: labels held for a rule file Berth cannot use', () => {
  test('a label kept only by a rejected rule file is held, with the file and its error, not removed', async (t) => {
    const dir = await ruleDir(t, {
      'accelerators/edgetpu': 'kkohtaka.org/edgetpu\nnot a key\n',
      'accelerators/gpu': 'nvidia.com/gpu.present\n',
    });
    const scan = await scanRuleDir(dir);
    const n = node(
      { 'accelerators/edgetpu': 'true', 'accelerators/gpu': 'true' },
      { 'nvidia.com/gpu.present': '' },
    );
    assert.deepEqual(
      holdsOf(scan).map((h) => [h.scope, h.file]),
      [[{ namespace: 'accelerators', label: 'edgetpu' }, join(dir, 'accelerators', 'edgetpu')]],
    );
    const lines = explainNodeLabels(n, scan.rules, holdsOf(scan));
    // The label a rule sets is backed by it; only the rejected file's is held.
    const held = lines.filter((l) => l.includes('held:'));
    assert.equal(held.length, 1, lines.join('\n'));
    assert.match(
      held[0]!,
      new RegExp(
        `^ {2}held: label accelerators/edgetpu=true stays though no rule sets it: rule file ${join(dir, 'accelerators', 'edgetpu')} cannot be used \\(line 2: "not a key" is not a valid label key`,
      ),
    );
    assert.match(held[0]!, /until the file is fixed or removed/);
    assert.doesNotMatch(lines.join('\n'), /will remove label accelerators\/edgetpu/);
    assert.doesNotMatch(lines.join('\n'), /not yet applied/);
  });

  test('a namespace directory Berth cannot use holds the labels under it, and says why', async (t) => {
    const outside = await ruleDir(t, { edgetpu: 'kkohtaka.org/edgetpu\n' });
    const dir = await ruleDir(t, { 'other.example.org/x': 'a\n' });
    await symlink(outside, join(dir, 'accelerators'));
    const scan = await scanRuleDir(dir);
    const n = node({ 'accelerators/edgetpu': 'true', 'other.example.org/x': 'true' }, { a: '' });
    const text = explainNodeLabels(n, scan.rules, holdsOf(scan)).join('\n');
    assert.match(
      text,
      /held: label accelerators\/edgetpu=true stays though no rule sets it: namespace directory \S+accelerators cannot be used \(is a symbolic link that leads out of the rule directory[^)]*\): Berth leaves the labels it set under it where they are until it can be read or is removed/,
    );
    assert.doesNotMatch(text, /held: label other\.example\.org/);
    assert.doesNotMatch(text, /will remove/);
  });

  test('without a hold, a label no rule sets is still to be removed', async (t) => {
    const dir = await ruleDir(t, { 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    const scan = await scanRuleDir(dir);
    assert.deepEqual(holdsOf(scan), []);
    const text = explainNodeLabels(node({ 'accelerators/edgetpu': 'true' }), scan.rules, holdsOf(scan)).join(
      '\n',
    );
    assert.match(text, /will remove label accelerators\/edgetpu \(no rule backs it any more\)/);
    assert.doesNotMatch(text, /held:/);
  });

  test('a path that vanished is gone, as the controller finds on its recheck: nothing is held', () => {
    const scan = {
      rules: [],
      errors: [],
      unsettled: [
        {
          scope: { namespace: 'accelerators', label: 'edgetpu' },
          file: 'labels/accelerators/edgetpu',
          vanished: true,
        },
      ],
    };
    assert.deepEqual(holdsOf(scan), []);
  });

  test('a file name is escaped in the held line', () => {
    const file = 'labels/accelerators/edge\ntpu';
    const text = explainNodeLabels(
      node({ 'accelerators/edgetpu': 'true' }),
      [],
      [
        {
          scope: { namespace: 'accelerators', label: 'edgetpu' },
          file,
          errors: [{ file, message: 'cannot read: permission denied' }],
        },
      ],
    );
    assert.ok(
      text.some((l) => l.includes('rule file labels/accelerators/edge\\u000atpu cannot be used')),
      text.join('\n'),
    );
  });
});
