import assert from 'node:assert/strict';
import { createHook } from 'node:async_hooks';
import { spawnSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { decide } from '../../../src/labels/decide/nodes.ts';
import {
  formatFileError,
  keepHeld,
  parseRuleFile,
  RuleDirSource,
  scanRuleDir,
  settleScan,
  type FileError,
  type RuleDirSourceOptions,
  type RuleScope,
  type ScannedRuleDir,
} from '../../../src/labels/files.ts';
import { nodeView } from '../../../src/labels/match.ts';
import { controlCharacterError } from '../../../src/labels/values.ts';
import { nodeState, nodeWriteFor } from '../../../src/policy/nodes/write.ts';
import { validateLabelKey, validateLabelValue } from '../../../src/policy/match/selector.ts';
import { FIELD_MANAGER, type Rule } from '../../../src/labels/types.ts';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import { holdsFor, waitFor } from '../../helpers/wait.ts';

const EDGETPU = [
  'kkohtaka.org/edgetpu',
  'feature.node.kubernetes.io/usb-fe_1a6e_089a.present',
  'feature.node.kubernetes.io/pci-0880_1ac1.present',
  'beta.devicetree.org/fsl-imx8mq-phanbell',
].join('\n');

const exists = (label: string) => ({ label, operator: 'Exists' });

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'berth-rules-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** Writes `files` (relative path → content) under `dir`, creating directories. */
async function writeTree(dir: string, files: Record<string, string | Buffer>): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(join(dir, path, '..'), { recursive: true });
    await writeFile(join(dir, path), content);
  }
}

/** Writes a file whole, as editors and atomic writers do: no scan can read it half written. */
async function writeAtomic(path: string, content: string): Promise<void> {
  await writeFile(`${path}.tmp~`, content);
  await rename(`${path}.tmp~`, path);
}

const parse = (content: string | Buffer, namespace = 'accelerators', label = 'edgetpu') =>
  parseRuleFile(
    `labels/${namespace}/${label}`,
    namespace,
    label,
    typeof content === 'string' ? Buffer.from(content) : content,
  );

describe('validateLabelKey / validateLabelValue', () => {
  test('accepts valid keys and values', () => {
    for (const k of [
      'a',
      'edgetpu',
      'kkohtaka.org/edgetpu',
      'x.y-z/A_b.C-9',
      `${'a'.repeat(253)}/${'b'.repeat(63)}`,
    ])
      assert.equal(validateLabelKey(k), undefined, k);
    for (const v of ['', 'true', 'A_b.c-9', 'x'.repeat(63)])
      assert.equal(validateLabelValue(v), undefined, v);
  });

  test('explains invalid keys and values', () => {
    assert.match(validateLabelKey('Bad Key!') ?? '', /name part must consist of/);
    assert.match(validateLabelKey('a/b/c') ?? '', /at most one '\/'/);
    assert.match(validateLabelKey('/x') ?? '', /prefix part must be non-empty/);
    assert.match(validateLabelKey('x/') ?? '', /name part must be non-empty/);
    assert.match(validateLabelKey('Upper.org/x') ?? '', /DNS-1123 subdomain/);
    assert.match(validateLabelKey('-a.org/x') ?? '', /DNS-1123 subdomain/);
    assert.match(validateLabelKey(`${'a'.repeat(254)}/x`) ?? '', /253/);
    assert.match(validateLabelKey('b'.repeat(64)) ?? '', /63/);
    assert.match(validateLabelValue('x'.repeat(64)) ?? '', /63/);
    assert.match(validateLabelValue('-x') ?? '', /must be empty or consist of/);
  });
});

describe('parseRuleFile', () => {
  test('compiles the EdgeTPU example', () => {
    const { rule, errors } = parse(EDGETPU + '\n');
    assert.deepEqual(errors, []);
    assert.deepEqual(rule, {
      name: 'file:accelerators/edgetpu',
      source: { kind: 'File', path: 'labels/accelerators/edgetpu' },
      allOf: [],
      anyOf: [
        exists('kkohtaka.org/edgetpu'),
        exists('feature.node.kubernetes.io/usb-fe_1a6e_089a.present'),
        exists('feature.node.kubernetes.io/pci-0880_1ac1.present'),
        exists('beta.devicetree.org/fsl-imx8mq-phanbell'),
      ],
      labels: { 'accelerators/edgetpu': 'true' },
      annotations: {},
      taints: [],
    });
  });

  test('skips comments and blank lines, tolerates CRLF and whitespace, dedupes', () => {
    const { rule, errors } = parse(
      '# accelerators\r\n\r\n  a.org/x  \r\n\t# indented comment\r\nb\r\na.org/x\r\n',
    );
    assert.deepEqual(errors, []);
    assert.deepEqual(rule?.anyOf, [exists('a.org/x'), exists('b')]);
  });

  test('key=value requires that value', () => {
    const { rule, errors } = parse('a.org/x=yes\nb = 2\nc=\na.org/x\na.org/x=yes\n');
    assert.deepEqual(errors, []);
    assert.deepEqual(rule?.anyOf, [
      { label: 'a.org/x', operator: 'In', values: ['yes'] },
      { label: 'b', operator: 'In', values: ['2'] },
      { label: 'c', operator: 'In', values: [''] },
      exists('a.org/x'),
    ]);
  });

  test('an invalid line rejects the whole file, naming every bad line', () => {
    const { rule, errors } = parse('a.org/x\n# fine\nBad Key!\nok=bad value\n');
    assert.equal(rule, undefined);
    assert.deepEqual(
      errors.map((e) => [e.line, e.file]),
      [
        [3, 'labels/accelerators/edgetpu'],
        [4, 'labels/accelerators/edgetpu'],
      ],
    );
    const [bad, badValue] = errors as [FileError, FileError];
    assert.match(
      formatFileError(bad),
      /^labels\/accelerators\/edgetpu:3: "Bad Key!" is not a valid label key: name part must consist of/,
    );
    assert.match(badValue.message, /^"bad value" is not a valid label value: /);
  });

  test('the output key from the path must be a valid label key', () => {
    const { rule, errors } = parse('a', 'Accelerators', 'edgetpu');
    assert.equal(rule, undefined);
    assert.equal(errors.length, 1);
    assert.equal(errors[0]?.line, undefined);
    assert.match(
      errors[0]?.message ?? '',
      /^the label "Accelerators\/edgetpu": .* \(from the path <namespace>\/<label>\)$/,
    );
  });

  test('the output key may not be one Kubernetes reserves, as for a NodeLabelRule', () => {
    const { rule, errors } = parse('a', 'node.kubernetes.io', 'exclude-from-external-load-balancers');
    assert.equal(rule, undefined);
    assert.match(errors[0]?.message ?? '', /is in a namespace reserved for Kubernetes/);
    assert.ok(parse('a', 'node-role.kubernetes.io', 'edge').rule, 'node-role.kubernetes.io is allowed');
  });

  test('an empty file declares nothing', () => {
    for (const content of ['', '\n\n', '# only a comment\n']) {
      const { rule, errors } = parse(content);
      assert.equal(rule, undefined);
      assert.deepEqual(errors, [
        {
          file: 'labels/accelerators/edgetpu',
          message: 'declares no dependent labels: list one label key per line',
        },
      ]);
    }
  });

  test('binary content is rejected', () => {
    const nul = parse(Buffer.from('a.org/x\nb\0c\n'));
    assert.equal(nul.rule, undefined);
    assert.deepEqual(nul.errors, [
      { file: 'labels/accelerators/edgetpu', line: 2, message: 'contains a NUL byte: not a text file' },
    ]);
    const latin1 = parse(Buffer.from([0x61, 0x0a, 0xff, 0xfe, 0x0a]));
    assert.equal(latin1.rule, undefined);
    assert.deepEqual(latin1.errors, [
      { file: 'labels/accelerators/edgetpu', message: 'is not valid UTF-8 text' },
    ]);
  });

  test('a file of garbage gives ten line errors and a count, not one per line', () => {
    const { rule, errors } = parse('Not A Key!\n'.repeat(5000));
    assert.equal(rule, undefined);
    assert.equal(errors.length, 11);
    assert.deepEqual(
      errors.slice(9).map((e) => [e.line, e.message.slice(0, 14)]),
      [
        [10, '"Not A Key!" i'],
        [undefined, 'and 4990 more '],
      ],
    );
  });

  test('at most 1024 dependent labels per file', () => {
    const keys = (n: number) => Array.from({ length: n }, (_, i) => `example.com/k${i}`).join('\n');
    assert.equal(parse(keys(1024)).rule?.anyOf.length, 1024);
    assert.deepEqual(
      parse(keys(1025)).errors.map((e) => e.message),
      ['declares 1025 dependent labels; a rule file declares at most 1024'],
    );
  });

  test('a very long bad line gives a bounded message', () => {
    const { errors } = parse('x'.repeat(100_000));
    assert.ok((errors[0]?.message.length ?? 0) < 400);
  });
});

describe('scanRuleDir', () => {
  test('reads dir/<namespace>/<label>, sorted; a bad file does not stop the others', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, {
      'accelerators/edgetpu': EDGETPU,
      'accelerators/broken': 'a.org/x\nb.org/y\nNot Valid\n',
      'accelerators/gpu': 'nvidia.com/gpu.present\n',
      'arch.example.org/arm': 'kubernetes.io/arch=arm64\n',
    });
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/edgetpu', 'file:accelerators/gpu', 'file:arch.example.org/arm'],
    );
    assert.equal(rules[0]?.source.kind === 'File' && rules[0].source.path, join(dir, 'accelerators/edgetpu'));
    assert.deepEqual(
      errors.map((e) => [e.file, e.line]),
      [[join(dir, 'accelerators/broken'), 3]],
    );
  });

  test('reports empty and binary files, stray files and too-deep directories', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, {
      'accelerators/empty': '# nothing yet\n',
      'accelerators/binary': Buffer.from([0x7f, 0x45, 0x4c, 0x46, 0x00, 0x01]),
      'accelerators/nested/deep': 'a\n',
      stray: 'a\n',
      'accelerators/ok': 'a\n',
    });
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/ok'],
    );
    const byFile = Object.fromEntries(errors.map((e) => [e.file.slice(dir.length + 1), e.message]));
    assert.deepEqual(Object.keys(byFile), [
      'accelerators/binary',
      'accelerators/empty',
      'accelerators/nested',
      'stray',
    ]);
    assert.match(byFile['accelerators/binary'] ?? '', /NUL byte/);
    assert.match(byFile['accelerators/empty'] ?? '', /declares no dependent labels/);
    assert.match(
      byFile['accelerators/nested'] ?? '',
      /is a directory: rule files go in .*<namespace>\/<label>/,
    );
    assert.match(
      byFile['stray'] ?? '',
      /is not in a namespace directory: rule files go in .*<namespace>\/<label>/,
    );
  });

  test('ignores dotfiles, editor swap and backup files', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, {
      'accelerators/edgetpu': EDGETPU,
      'accelerators/.edgetpu.swp': Buffer.from([0, 1, 2]),
      'accelerators/edgetpu~': 'Not Valid',
      '.git/config': 'Not Valid',
      '.hidden': 'Not Valid',
    });
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(errors, []);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/edgetpu'],
    );
  });

  test('a missing directory is one error, no rules, and vanished (for a following scan to confirm)', async (t) => {
    const dir = join(await tempDir(t), 'absent');
    assert.deepEqual(await scanRuleDir(dir), {
      rules: [],
      errors: [{ file: dir, message: 'rule directory does not exist; its rules apply once it is created' }],
      dirs: [],
      unsettled: [{ scope: {}, file: dir, vanished: true }],
    });
  });

  test('an unreadable file is reported and the others still apply', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU, 'accelerators/secret': 'a\n' });
    const secret = join(dir, 'accelerators/secret');
    await chmod(secret, 0o000);
    const { rules, errors } = await scanRuleDir(dir);
    assert.ok(rules.some((r) => r.name === 'file:accelerators/edgetpu'));
    await t.test('names the unreadable file', async (st) => {
      const readable = await readFile(secret).then(
        () => true,
        () => false,
      );
      if (readable) {
        st.skip('running as root: chmod 000 does not stop root from reading the file');
        return;
      }
      assert.deepEqual(errors, [{ file: secret, message: 'cannot read: permission denied' }]);
    });
  });

  test('reads a ConfigMap volume layout through its symlinks', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { '..2024_01_01_00_00_00.1/accelerators/edgetpu': EDGETPU });
    await symlink('..2024_01_01_00_00_00.1', join(dir, '..data'));
    await symlink('..data/accelerators', join(dir, 'accelerators'));
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(errors, []);
    assert.deepEqual(
      rules.map((r) => [r.name, r.source]),
      [['file:accelerators/edgetpu', { kind: 'File', path: join(dir, 'accelerators/edgetpu') }]],
    );
  });

  test('what it cannot use is unsettled: a rejected file, an unreadable namespace, a vanished file', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, {
      'accelerators/edgetpu': EDGETPU,
      'accelerators/broken': 'Not Valid\n',
      stray: 'a\n',
    });
    await symlink('nowhere', join(dir, 'accelerators/dangling')); // what a swap in progress leaves
    await symlink('looped.example.org', join(dir, 'looped.example.org')); // ELOOP: no root needed
    const { rules, errors, unsettled } = await scanRuleDir(dir);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/edgetpu'],
    );
    assert.deepEqual(unsettled, [
      {
        scope: { namespace: 'accelerators', label: 'broken' },
        file: join(dir, 'accelerators/broken'),
        vanished: false,
      },
      {
        scope: { namespace: 'accelerators', label: 'dangling' },
        file: join(dir, 'accelerators/dangling'),
        vanished: true,
      },
      { scope: { namespace: 'looped.example.org' }, file: join(dir, 'looped.example.org'), vanished: false },
    ]);
    assert.match(
      errors.find((e) => e.file === join(dir, 'looped.example.org'))?.message ?? '',
      /^cannot read: /,
    );
    assert.ok(!errors.some((e) => e.file.endsWith('dangling')), 'a vanished file is no error');

    // The directory itself unreadable.
    const loop = join(dir, 'loop');
    await symlink(loop, loop);
    assert.deepEqual((await scanRuleDir(loop)).unsettled, [{ scope: {}, file: loop, vanished: false }]);
  });
});

describe('settleScan', () => {
  const EDGE = parse(EDGETPU).rule!;
  const GPU = parse('nvidia.com/gpu.present\n', 'accelerators', 'gpu').rule!;
  const OTHER = parse('a\n', 'other.example.org', 'x').rule!;
  const edgeScope: RuleScope = { namespace: 'accelerators', label: 'edgetpu' };
  const file = 'labels/accelerators/edgetpu';
  const before = (rules: Rule[], vanished: string[] = []) => ({
    rules: new Map(rules.map((rule) => [rule.name, { rule }])),
    vanished: new Set(vanished),
  });
  const scan = (rules: Rule[], unsettled: ScannedRuleDir['unsettled'] = []) => ({
    rules,
    errors: [],
    unsettled,
  });
  const names = (rules: Rule[]) => rules.map((r) => r.name);

  test('a rejected file keeps its last good rule; with none (the first scan), it holds its key and says so', () => {
    const rejected = scan([GPU], [{ scope: edgeScope, file, vanished: false }]);
    const kept = settleScan(rejected, before([EDGE, GPU]));
    assert.deepEqual(names(kept.rules), ['file:accelerators/edgetpu', 'file:accelerators/gpu']);
    assert.equal(kept.rules[0], EDGE);
    assert.deepEqual(kept.holds, []);
    assert.deepEqual(kept.errors, [
      { file, message: 'its last good rule stays in force until the file is fixed or removed' },
    ]);

    const first = settleScan(rejected, before([]));
    assert.deepEqual(names(first.rules), ['file:accelerators/gpu']);
    assert.deepEqual(first.holds, [edgeScope]);
    assert.match(
      first.errors[0]?.message ?? '',
      /label accelerators\/edgetpu stays on the nodes where Berth set it/,
    );
    assert.equal(first.recheck, false);
  });

  test('an unreadable directory keeps the last good rules under it and holds its keys', () => {
    const namespace = settleScan(
      scan([OTHER], [{ scope: { namespace: 'accelerators' }, file: 'labels/accelerators', vanished: false }]),
      before([EDGE, GPU, OTHER]),
    );
    assert.deepEqual(names(namespace.rules), [EDGE.name, GPU.name, OTHER.name]);
    assert.deepEqual(namespace.holds, [{ namespace: 'accelerators' }]);
    assert.match(namespace.errors[0]?.message ?? '', /the labels accelerators\/\* that Berth set stay/);

    const root = settleScan(
      scan([], [{ scope: {}, file: 'labels', vanished: false }]),
      before([EDGE, OTHER]),
    );
    assert.deepEqual(names(root.rules), [EDGE.name, OTHER.name]);
    assert.deepEqual(root.holds, [{}]);
  });

  test('ENOENT once is a change in progress: nothing goes, nothing is said, and a following scan is asked for', () => {
    const swap = settleScan(scan([GPU], [{ scope: edgeScope, file, vanished: true }]), before([EDGE, GPU]));
    assert.deepEqual(names(swap.rules), [EDGE.name, GPU.name]);
    assert.deepEqual([swap.errors, swap.holds, swap.recheck], [[], [], true]);
    // The swap done: the file is back, changed or not, and nothing flapped.
    const after = settleScan(scan([EDGE, GPU]), {
      rules: before([EDGE, GPU]).rules,
      vanished: swap.vanished,
    });
    assert.deepEqual(
      [names(after.rules), after.vanished.size, after.recheck],
      [[EDGE.name, GPU.name], 0, false],
    );
    // Vanished on the first scan, with no rule yet: its key is held, not pruned, until confirmed.
    assert.deepEqual(settleScan(scan([], [{ scope: edgeScope, file, vanished: true }]), before([])).holds, [
      edgeScope,
    ]);
  });

  test('ENOENT on a following scan too, or no listing naming it, is a removal, and stays one', () => {
    const gone = scan([GPU], [{ scope: edgeScope, file, vanished: true }]);
    const first = settleScan(gone, before([EDGE, GPU]));
    const second = settleScan(gone, { rules: before(first.rules).rules, vanished: first.vanished });
    assert.deepEqual([names(second.rules), second.holds, second.recheck], [[GPU.name], [], false]);
    // A dangling link stays: it is not brought back, held or rechecked on the next scans.
    const third = settleScan(gone, { rules: before(second.rules).rules, vanished: second.vanished });
    assert.deepEqual([names(third.rules), third.holds, third.recheck], [[GPU.name], [], false]);
    // Not listed any more: gone at once.
    assert.deepEqual(
      names(settleScan(scan([GPU]), { rules: before(first.rules).rules, vanished: first.vanished }).rules),
      [GPU.name],
    );
  });
});

describe('keepHeld', () => {
  /** A node with `labels`, of which Berth's field manager set `owned`. */
  const node = (labels: Record<string, string>, owned: string[]): KubeObject => ({
    metadata: {
      name: 'n1',
      labels,
      managedFields: [
        {
          manager: FIELD_MANAGER,
          operation: 'Apply',
          fieldsV1: { 'f:metadata': { 'f:labels': Object.fromEntries(owned.map((k) => [`f:${k}`, {}])) } },
        },
      ],
    },
  });
  const n = node(
    {
      'accelerators/edgetpu': 'true',
      'accelerators/gpu': 'true',
      'accelerators/tier': 'gold', // a rule file sets only true: not one of theirs
      'accelerators/admin': 'true', // not Berth's
      'other.example.org/x': 'true',
    },
    ['accelerators/edgetpu', 'accelerators/gpu', 'accelerators/tier', 'other.example.org/x'],
  );
  const plan = (holds: RuleScope[], rules: Rule[] = []) =>
    nodeWriteFor(nodeState(n, FIELD_MANAGER), keepHeld(decide(nodeView(n), rules), holds, n));

  test('without holds, a label no rule derives is pruned', () => {
    assert.deepEqual(plan([]).labels, {});
  });

  test("a held file's label stays where Berth set it, and only it", () => {
    const p = plan([{ namespace: 'accelerators', label: 'edgetpu' }]);
    assert.deepEqual(p.labels, { 'accelerators/edgetpu': 'true' });
    assert.equal(p.inSync, false, 'the others still go');
    // Set nowhere new: a node without it is left without it.
    const bare = node({}, []);
    assert.deepEqual(
      keepHeld({ labels: {} }, [{ namespace: 'accelerators', label: 'edgetpu' }], bare).labels,
      {},
    );
  });

  test("a held namespace keeps its labels of Berth's set to true; a held directory, every such label", () => {
    assert.deepEqual(plan([{ namespace: 'accelerators' }]).labels, {
      'accelerators/edgetpu': 'true',
      'accelerators/gpu': 'true',
    });
    const all = plan([{}]);
    assert.deepEqual(all.labels, {
      'accelerators/edgetpu': 'true',
      'accelerators/gpu': 'true',
      'other.example.org/x': 'true',
    });
  });

  test('a rule that sets the key on the node decides it', () => {
    const rule: Rule = {
      name: 'nodelabelrule/a',
      source: { kind: 'NodeLabelRule', name: 'a' },
      allOf: [],
      anyOf: [{ label: 'other.example.org/x', operator: 'Exists' }],
      labels: { 'accelerators/edgetpu': 'yes' },
      annotations: {},
      taints: [],
    };
    assert.deepEqual(plan([{ namespace: 'accelerators', label: 'edgetpu' }], [rule]).labels, {
      'accelerators/edgetpu': 'yes',
    });
  });
});

describe('scanRuleDir: files stay in their directory', () => {
  const SECRET = 'root:*:19000:0:99999:7:::\nnot a label key either\n';

  /** A directory with a secret outside the rule directory, which a link may point at. */
  async function outside(t: TestContext): Promise<{ dir: string; secretDir: string; secret: string }> {
    const base = await tempDir(t);
    const dir = join(base, 'rules');
    const secretDir = join(base, 'etc');
    await writeTree(base, { 'etc/shadow': SECRET, 'rules/accelerators/edgetpu': EDGETPU });
    return { dir, secretDir, secret: join(secretDir, 'shadow') };
  }

  test('a file link that leaves the directory is rejected, naming the link and nothing of its target', async (t) => {
    const { dir, secret } = await outside(t);
    await symlink(secret, join(dir, 'accelerators/shadow'));
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/edgetpu'],
    );
    assert.deepEqual(errors, [
      {
        file: join(dir, 'accelerators/shadow'),
        message: 'is a symbolic link that leads out of the rule directory: only links within it are followed',
      },
    ]);
    assert.doesNotMatch(JSON.stringify(errors), /root|etc/);
  });

  test('a namespace link that leaves the directory is not listed, nor are relative escapes', async (t) => {
    const { dir, secretDir } = await outside(t);
    await symlink(secretDir, join(dir, 'etc.example.com'));
    await symlink('../../etc/shadow', join(dir, 'accelerators/relative'));
    const { rules, errors } = await scanRuleDir(dir);
    assert.deepEqual(
      rules.map((r) => r.name),
      ['file:accelerators/edgetpu'],
    );
    assert.deepEqual(
      errors.map((e) => [e.file.slice(dir.length + 1), /leads out of the rule directory/.test(e.message)]),
      [
        ['accelerators/relative', true],
        ['etc.example.com', true],
      ],
    );
    assert.doesNotMatch(JSON.stringify(errors), /root/);
  });

  test('links within the directory are followed, also through a linked rule directory', async (t) => {
    const { dir } = await outside(t);
    await mkdir(join(dir, 'gpu.example.com'));
    await symlink('../accelerators/edgetpu', join(dir, 'gpu.example.com/edgetpu'));
    const via = join(dir, '..', 'via-link');
    await symlink(dir, via);
    for (const root of [dir, via]) {
      const { rules, errors } = await scanRuleDir(root);
      assert.deepEqual(errors, []);
      assert.deepEqual(
        rules.map((r) => r.name),
        ['file:accelerators/edgetpu', 'file:gpu.example.com/edgetpu'],
      );
    }
  });

  test('a FIFO is not a rule file, and does not hang the scan', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const r = spawnSync('mkfifo', [join(dir, 'accelerators/fifo')]);
    if (r.status !== 0) return t.skip('mkfifo is not available');
    const { rules, errors } = await scanRuleDir(dir);
    assert.equal(rules.length, 1);
    assert.deepEqual(errors, [{ file: join(dir, 'accelerators/fifo'), message: 'is not a regular file' }]);
  });

  test('an offending line is quoted bounded and escaped, and so is a hostile file name', async () => {
    const { errors } = parse(`a.org/x\n${'\u001b[31m'.repeat(3)}Bad\u2028${'y'.repeat(500)}\n`);
    assert.equal(errors.length, 1);
    const m = errors[0]!.message;
    assert.equal(controlCharacterError(m), undefined, m);
    assert.ok(m.startsWith('"\\u001b[31m'), m);
    assert.ok(m.length < 64 * 7 + 100, m);
    assert.equal(
      formatFileError({ file: '/rules/ns/evil\n{"level":50}', line: 1, message: 'x' }),
      '/rules/ns/evil\\u000a{"level":50}:1: x',
    );
  });
});

interface Recorded {
  type: 'add' | 'update' | 'delete';
  name: string;
  anyOf: string[];
  at: number;
}

/** Starts a source on `dir` that records its events; stopped when the test ends. */
async function watchDir(t: TestContext, dir: string, opts: RuleDirSourceOptions = {}) {
  const events: Recorded[] = [];
  const src = new RuleDirSource(dir, opts);
  const record = (type: Recorded['type'], r: Rule) =>
    events.push({ type, name: r.name, anyOf: r.anyOf.map((term) => term.label ?? ''), at: Date.now() });
  src.addEventHandler({
    onAdd: (r) => record('add', r),
    onUpdate: (_, r) => record('update', r),
    onDelete: (r) => record('delete', r),
  });
  t.after(() => src.stop());
  await src.start();
  await src.waitForSync();
  /** Waits (polling every 20 ms, up to 2 s) for the next event after the ones already seen. */
  let seen = events.length;
  const next = async (what: string): Promise<Recorded> => {
    const e = await waitFor(what, () => events[seen], {
      timeoutMs: 2000,
      intervalMs: 20,
      observe: () => ({ events, rules: src.rules(), errors: src.errors() }),
    });
    seen++;
    return e;
  };
  return { src, events, next };
}

describe('RuleDirSource', () => {
  test('delivers creates, edits and deletes within a second', async (t) => {
    const dir = await tempDir(t);
    const { events, next } = await watchDir(t, dir);
    assert.deepEqual(events, []);

    const file = join(dir, 'accelerators/edgetpu');
    await mkdir(join(dir, 'accelerators'));
    const written = Date.now();
    await writeFile(file, EDGETPU);
    const added = await next('onAdd of the new file');
    assert.deepEqual([added.type, added.name], ['add', 'file:accelerators/edgetpu']);
    assert.ok(added.at - written < 1000, `took ${added.at - written} ms`);

    await writeFile(file, 'kkohtaka.org/edgetpu\n');
    const updated = await next('onUpdate of the edited file');
    assert.deepEqual([updated.type, updated.anyOf], ['update', ['kkohtaka.org/edgetpu']]);

    // Rewriting the same content changes nothing; the marker file proves a rescan happened since.
    await writeFile(file, 'kkohtaka.org/edgetpu\n');
    await writeFile(join(dir, 'accelerators/marker'), 'a\n');
    const marker = await next('onAdd of the marker');
    assert.deepEqual([marker.type, marker.name], ['add', 'file:accelerators/marker']);

    await rm(file);
    const deleted = await next('onDelete of the removed file');
    assert.deepEqual([deleted.type, deleted.name], ['delete', 'file:accelerators/edgetpu']);
  });

  test('a file replaced by a rename, then edited in place, is heard each time without a poll', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const { next } = await watchDir(t, dir, { pollMs: 60_000 });
    const file = join(dir, 'accelerators/edgetpu');
    for (const [i, how] of ['rename', 'in place', 'rename', 'in place', 'in place'].entries()) {
      const content = `example.org/v${i}\n`;
      if (how === 'rename') {
        await writeFile(join(dir, 'accelerators/.edgetpu.tmp'), content);
        await rename(join(dir, 'accelerators/.edgetpu.tmp'), file);
      } else await writeFile(file, content);
      const e = await next(`the edit ${i} (${how})`);
      assert.deepEqual([e.type, e.anyOf], ['update', [`example.org/v${i}`]]);
    }
  });

  test('namespace directories come and go', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const { src, events, next } = await watchDir(t, dir);
    assert.deepEqual(
      events.map((e) => [e.type, e.name]),
      [['add', 'file:accelerators/edgetpu']],
    );

    await writeTree(dir, { 'gpus.example.org/nvidia': 'nvidia.com/gpu.present\n' });
    const added = await next('onAdd from the new namespace');
    assert.deepEqual([added.type, added.name], ['add', 'file:gpus.example.org/nvidia']);
    // The new directory is watched too: an edit inside it arrives.
    await writeFile(join(dir, 'gpus.example.org/nvidia'), 'nvidia.com/gpu.count\n');
    assert.equal((await next('onUpdate inside the new namespace')).type, 'update');

    await rm(join(dir, 'gpus.example.org'), { recursive: true });
    const deleted = await next('onDelete of the removed namespace');
    assert.deepEqual([deleted.type, deleted.name], ['delete', 'file:gpus.example.org/nvidia']);
    assert.deepEqual(
      src.rules().map((r) => r.name),
      ['file:accelerators/edgetpu'],
    );
    assert.equal(src.get('file:accelerators/edgetpu')?.anyOf.length, 4);
  });

  test('picks up an atomic swap of a ConfigMap volume', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { '..2024_01_01_00_00_00.1/accelerators/edgetpu': EDGETPU });
    await symlink('..2024_01_01_00_00_00.1', join(dir, '..data'));
    await symlink('..data/accelerators', join(dir, 'accelerators'));
    const { events, next } = await watchDir(t, dir);
    assert.deepEqual(
      events.map((e) => e.type),
      ['add'],
    );

    // What the kubelet's atomic writer does: a new timestamped dir, a new ..data link renamed over the old.
    await writeTree(dir, {
      '..2024_01_01_00_05_00.2/accelerators/edgetpu': 'kkohtaka.org/edgetpu\n',
      '..2024_01_01_00_05_00.2/accelerators/gpu': 'nvidia.com/gpu.present\n',
    });
    await symlink('..2024_01_01_00_05_00.2', join(dir, '..data_tmp'));
    await rename(join(dir, '..data_tmp'), join(dir, '..data'));
    await rm(join(dir, '..2024_01_01_00_00_00.1'), { recursive: true });

    const seen = [await next('the first event of the swap'), await next('the second event of the swap')];
    assert.deepEqual(seen.map((e) => [e.type, e.name, e.anyOf]).sort(), [
      ['add', 'file:accelerators/gpu', ['nvidia.com/gpu.present']],
      ['update', 'file:accelerators/edgetpu', ['kkohtaka.org/edgetpu']],
    ]);
  });

  test('a directory missing at start is picked up when created, and again after being recreated', async (t) => {
    const dir = join(await tempDir(t), 'labels');
    const { src, next } = await watchDir(t, dir);
    assert.deepEqual(src.rules(), []);
    assert.match(src.errors()[0]?.message ?? '', /does not exist/);

    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    assert.equal((await next('onAdd once the directory exists')).type, 'add');
    await waitFor('the missing-directory error to clear', () => src.errors().length === 0, {
      timeoutMs: 2000,
      intervalMs: 20,
    });

    await rm(dir, { recursive: true });
    assert.equal((await next('onDelete when the directory goes')).type, 'delete');
    await writeTree(dir, { 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    assert.deepEqual((await next('onAdd in the recreated directory')).name, 'file:accelerators/gpu');
    // The recreated directory is watched, not only polled.
    await writeFile(join(dir, 'accelerators/gpu'), 'nvidia.com/gpu.count\n');
    assert.equal((await next('onUpdate in the recreated directory')).type, 'update');
  });

  test('onErrors is called once per change of the error set, not on every poll', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const calls: FileError[][] = [];
    const { src } = await watchDir(t, dir, { pollMs: 100, onErrors: (errors) => calls.push(errors) });
    assert.equal(calls.length, 0);

    // Written whole: a poll every 100 ms could catch an in-place write half done, which is reported
    // (and heals) but is not what this test counts.
    await writeAtomic(join(dir, 'accelerators/broken'), 'Bad Key!\n');
    await waitFor('onErrors with the bad file', () => calls.length === 1, {
      timeoutMs: 2000,
      intervalMs: 20,
    });
    assert.deepEqual(calls[0]?.map(formatFileError), [
      `${join(dir, 'accelerators/broken')}:1: "Bad Key!" is not a valid label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
      `${join(dir, 'accelerators/broken')}: no good version of it has been read since Berth started: label accelerators/broken stays on the nodes where Berth set it, and is set on no other, until the file is fixed or removed`,
    ]);
    assert.deepEqual(src.errors(), calls[0]);
    await holdsFor(
      'onErrors not being called again while nothing changes',
      () => calls.length === 1,
      500,
      20,
    );

    await writeAtomic(join(dir, 'accelerators/broken'), 'good.org/key\n');
    await waitFor('onErrors with no errors', () => calls.length === 2, { timeoutMs: 2000, intervalMs: 20 });
    assert.deepEqual(calls[1], []);
    assert.ok(src.get('file:accelerators/broken'));
    await holdsFor('onErrors not being called again', () => calls.length === 2, 300, 20);
  });

  test('a file edited into an invalid one, or emptied, keeps its last good rule and says why', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU, 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    const calls: FileError[][] = [];
    const { src, events, next } = await watchDir(t, dir, { onErrors: (errors) => calls.push(errors) });
    const file = join(dir, 'accelerators/edgetpu');
    const before = src.get('file:accelerators/edgetpu');
    const initial = events.length;

    for (const bad of ['Bad Key!\n', '', Buffer.from([0, 1, 2])]) {
      await writeFile(file, bad);
      await waitFor('the error reported', () => src.errors().some((e) => e.file === file), {
        timeoutMs: 2000,
        intervalMs: 20,
      });
      assert.equal(src.get('file:accelerators/edgetpu'), before, 'the last good rule stays');
      assert.deepEqual(
        src.rules().map((r) => r.name),
        ['file:accelerators/edgetpu', 'file:accelerators/gpu'],
        'still sorted by name',
      );
      await writeFile(file, EDGETPU); // back to good, unchanged: no event
      await waitFor('the error cleared', () => src.errors().length === 0, {
        timeoutMs: 2000,
        intervalMs: 20,
      });
    }
    assert.deepEqual(events.slice(initial), [], 'no delete, and no update for a file back as it was');
    assert.ok(calls.length >= 6);

    // Removed, the rule goes.
    await rm(file);
    assert.deepEqual((await next('onDelete of the removed file')).type, 'delete');
  });

  test('a file invalid at start holds its label, says so, and applies once fixed', async (t) => {
    const dir = await tempDir(t);
    const file = join(dir, 'accelerators/edgetpu');
    // Caught half written as Berth starts (a restart, a new leader): there is no last good rule.
    await writeTree(dir, {
      'accelerators/edgetpu': 'kkohtaka.org/',
      'accelerators/gpu': 'nvidia.com/gpu.present\n',
    });
    const { src, next } = await watchDir(t, dir);
    const changes: RuleScope[][] = [];
    src.holdChanges.addEventHandler({ onUpdate: (_, holds) => changes.push(holds) });
    assert.deepEqual(
      src.rules().map((r) => r.name),
      ['file:accelerators/gpu'],
    );
    assert.deepEqual(src.holds(), [{ namespace: 'accelerators', label: 'edgetpu' }]);
    assert.ok(
      src
        .errors()
        .some((e) => e.file === file && /label accelerators\/edgetpu stays on the nodes/.test(e.message)),
    );

    await writeAtomic(file, EDGETPU);
    assert.deepEqual((await next('onAdd of the fixed file')).name, 'file:accelerators/edgetpu');
    assert.deepEqual(src.holds(), []);
    assert.deepEqual(changes, [[]], 'the hold let go, for the nodes to be reconciled');
    assert.deepEqual(src.errors(), []);
  });

  test('a namespace directory that cannot be read keeps its rules and holds its keys; the others work', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, {
      '.real/accelerators/edgetpu': EDGETPU,
      'other.example.org/x': 'a\n',
    });
    await symlink('.real/accelerators', join(dir, 'accelerators'));
    const { src, events, next } = await watchDir(t, dir);
    const initial = events.length;
    const ns = join(dir, 'accelerators');

    // Swapped whole for a link to itself: ELOOP, an error no chmod is needed for (tests may run as root).
    await symlink('accelerators', join(dir, 'loop~'));
    await rename(join(dir, 'loop~'), ns);
    await waitFor('the unreadable namespace reported', () => src.errors().some((e) => e.file === ns), {
      timeoutMs: 2000,
      intervalMs: 20,
    });
    assert.deepEqual(src.holds(), [{ namespace: 'accelerators' }]);
    assert.deepEqual(
      src.rules().map((r) => r.name),
      ['file:accelerators/edgetpu', 'file:other.example.org/x'],
    );
    await writeFile(join(dir, 'other.example.org/x'), 'b\n');
    assert.deepEqual((await next('onUpdate in the readable namespace')).name, 'file:other.example.org/x');
    assert.equal(events.length, initial + 1, 'no delete');

    // Really removed: its rules go and the hold lets go.
    await rm(ns);
    assert.deepEqual((await next('onDelete once the namespace is gone')).name, 'file:accelerators/edgetpu');
    assert.deepEqual(src.holds(), []);
  });

  test('a file that vanishes (a dangling link) goes once a following scan confirms it, and does not come back', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU, 'accelerators/gpu': 'nvidia.com/gpu.present\n' });
    const { src, events, next } = await watchDir(t, dir, { pollMs: 50 });
    await symlink(join(dir, '..nowhere'), join(dir, 'accelerators/.link'));
    await rename(join(dir, 'accelerators/.link'), join(dir, 'accelerators/edgetpu'));
    assert.deepEqual((await next('onDelete of the vanished file')).name, 'file:accelerators/edgetpu');
    const seen = events.length;
    await holdsFor(
      'no flap: the dangling link is not brought back, nor held, by the polls that follow',
      () => events.length === seen && src.holds().length === 0 && src.rules().length === 1,
      400,
      20,
    );
    assert.deepEqual(src.errors(), []);
  });

  test('a handler added after start gets the current rules', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const { src } = await watchDir(t, dir);
    const late: string[] = [];
    src.addEventHandler({ onAdd: (r) => late.push(r.name) });
    assert.deepEqual(late, ['file:accelerators/edgetpu']);
  });

  test('the first scan and a late handler replay are the initial list; a file written later is news', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    const src = new RuleDirSource(dir, { pollMs: 50 });
    t.after(() => src.stop());
    const adds: string[] = [];
    const record = (r: Rule, initial?: boolean) => adds.push(`${r.name}:${initial === true}`);
    src.addEventHandler({ onAdd: record });
    await src.start();
    await src.waitForSync();
    src.addEventHandler({ onAdd: record });
    await writeFile(join(dir, 'accelerators/coral'), EDGETPU);
    await waitFor('the new file', () => adds.length >= 4 || undefined, { timeoutMs: 2000, intervalMs: 20 });
    assert.deepEqual(adds, [
      'file:accelerators/edgetpu:true',
      'file:accelerators/edgetpu:true',
      'file:accelerators/coral:false',
      'file:accelerators/coral:false',
    ]);
  });

  test('stop() leaves no timers or watchers behind', async (t) => {
    const dir = await tempDir(t);
    await writeTree(dir, { 'accelerators/edgetpu': EDGETPU });
    // Everything the source creates is unref'd, so the event loop alone cannot tell; track the handles.
    const live = new Map<number, string>();
    let tracking = true;
    const hook = createHook({
      init: (id, type) => {
        if (tracking && (type === 'Timeout' || type === 'FSEVENTWRAP')) live.set(id, type);
      },
      destroy: (id) => void live.delete(id),
    }).enable();
    t.after(() => hook.disable());

    const src = new RuleDirSource(dir, { pollMs: 60_000 });
    await src.start();
    await writeFile(join(dir, 'accelerators/edgetpu'), 'a\n');
    await waitFor('the edit', () => src.get('file:accelerators/edgetpu')?.anyOf.length === 1, {
      timeoutMs: 2000,
      intervalMs: 20,
    });
    assert.ok([...live.values()].includes('FSEVENTWRAP'), 'the source watches');
    src.stop();
    tracking = false;
    await waitFor('every timer and watcher of the source to be released', () => live.size === 0, {
      timeoutMs: 500,
      intervalMs: 20,
      observe: () => [...live.values()],
    });
  });
});
