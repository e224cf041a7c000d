// What a cell says, as `berth cells join` and `berth cells list` print it: a cell's version with
// control characters escaped and cut, so that a hostile cell cannot rewrite the operator's terminal.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cellsTable } from '../../../src/cells/cli.ts';
import { probeCell } from '../../../src/cells/controllers/cells.ts';
import type { CellObject } from '../../../src/cells/types.ts';
import { QUOTE_MAX } from '../../../src/policy/text.ts';
import { localApiserver } from '../../helpers/apiserver.ts';

// A terminal escape that clears the screen, a forged line, and a bidirectional override.
const HOSTILE = 'v1.35.0\u001b[2J\u001b[H\ncell dfw joined: all fine\u202e';

test("a cell's version is escaped and cut where it is read (the probe), before the Cell or a terminal sees it", async (t) => {
  const client = await localApiserver(t, {}, (req, res) => {
    res.setHeader('content-type', 'application/json');
    if (req.url === '/version') res.end(JSON.stringify({ gitVersion: HOSTILE + 'x'.repeat(500) }));
    else res.end(JSON.stringify({ kind: 'APIResourceList', resources: [] }));
  });
  const probe = await probeCell(client, 5000);
  assert.ok(probe.ok);
  assert.equal(probe.version.includes('\u001b'), false);
  assert.equal(probe.version.includes('\n'), false);
  assert.equal(probe.version.includes('\u202e'), false);
  assert.match(probe.version, /^v1\.35\.0\\u001b\[2J\\u001b\[H\\u000acell dfw joined/);
  assert.ok(probe.version.length < QUOTE_MAX * 2, probe.version);
});

test('`berth cells list` escapes the version a Cell holds (one written before the probe escaped it too)', () => {
  const cell = {
    metadata: { name: 'dfw' },
    spec: { locations: ['DFW'], namespaces: [] },
    status: { serverVersion: HOSTILE },
  } as unknown as CellObject;
  const table = cellsTable([cell]);
  assert.equal(table.split('\n').length, 2, table);
  // Its two lines aside, no control character.
  // eslint-disable-next-line no-control-regex -- finding control characters is the point
  assert.doesNotMatch(table, /[\u0000-\u0009\u000b-\u001f\u202e]/u);
  assert.match(table, /v1\.35\.0\\u001b\[2J/);
});
