// The cells Provider's answers to whether a cluster still exists (what releases a deleted Cell's quota
// claims) and which namespaces it serves (what its instances count for), from a stand-in of its Cell
// informer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CellProvider } from '../../../src/cells/provider.ts';
import type { CellObject } from '../../../src/cells/types.ts';
import type { Informer } from '../../../src/runtime/cache/informer.ts';
import { rootLogger } from '../../../src/runtime/observability/log.ts';

test('a cluster is a cell while a Cell of that name lives; unknown until the Cells are listed', () => {
  let synced = false;
  let cells: CellObject[] = [];
  const informer = {
    hasSynced: () => synced,
    list: () => cells,
    addIndexer: () => {},
  } as unknown as Informer<CellObject>;
  const provider = new CellProvider({
    cells: informer,
    secrets: informer as unknown as ConstructorParameters<typeof CellProvider>[0]['secrets'],
    berthNamespace: 'berth-system',
    onChange: () => {},
    log: rootLogger,
  });
  const cell = (name: string, deleting = false, namespaces: string[] = []) =>
    ({
      metadata: { name, ...(deleting ? { deletionTimestamp: '2030-01-01T00:00:00Z' } : {}) },
      spec: { kubeconfigSecretRef: { namespace: 'berth-system', name }, locations: ['DFW'], namespaces },
    }) as unknown as CellObject;
  assert.equal(provider.knows('cell-dfw'), undefined);
  // Which namespaces a cell serves: those its Cell lists, none while it is being deleted or unknown.
  cells = [cell('dfw', false, ['shop']), cell('lhr', true, ['shop'])];
  assert.equal(provider.serves('cell-dfw', 'shop'), true);
  assert.equal(provider.serves('cell-dfw', 'payments'), false);
  assert.equal(provider.serves('cell-lhr', 'shop'), false);
  assert.equal(provider.serves('cell-nrt', 'shop'), false);
  cells = [];
  synced = true;
  cells = [cell('dfw'), cell('lhr', true)];
  assert.equal(provider.knows('cell-dfw'), true);
  // Being deleted, or gone: none of the provider's any more.
  assert.equal(provider.knows('cell-lhr'), false);
  assert.equal(provider.knows('cell-nrt'), false);
});
