// The cities of `berth sandbox up --cells`: what the user typed, made into one cell per city whose
// sandbox name is a DNS label, or a clear answer before anything starts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { cellName, cellSandboxName, federationCities } from '../../../src/sandbox/federation.ts';

test('city codes are trimmed, upper-cased and taken once each, in the order given', () => {
  assert.deepEqual(federationCities('fed', ['DFW', ' lhr', 'nrt ', 'DFW', 'Lhr', '']), ['DFW', 'LHR', 'NRT']);
});

test("each city's cell is named by the city and runs in the sandbox <management>-<city>", () => {
  assert.equal(cellName('DFW'), 'dfw');
  assert.equal(cellSandboxName('fed', 'DFW'), 'fed-dfw');
});

test('no city, or one that makes no sandbox name, is refused with what to type', () => {
  assert.throws(() => federationCities('fed', []), /at least one city code, such as DFW/);
  assert.throws(() => federationCities('fed', [' ', '']), /at least one city code/);
  assert.throws(
    () => federationCities('fed', ['DF_W']),
    /city code "DF_W" makes the sandbox name "fed-df_w", which is not a DNS label/,
  );
  assert.throws(() => federationCities('fed', ['DFW', 'L.H']), /"fed-l\.h", which is not a DNS label/);
});
