import assert from 'node:assert/strict';
import { test } from 'node:test';
import { specCidrs } from '../../../src/arch/cluster-ranges.ts';

test("the cluster's ranges: a ServiceCIDR's cidrs, a node's podCIDRs or its older podCIDR", () => {
  assert.deepEqual(
    specCidrs([
      { spec: { cidrs: ['34.118.224.0/20', 'fd00:10:96::/112'] } },
      { spec: { podCIDRs: ['10.244.1.0/24', 'fd00:10:244:1::/64'] } },
      { spec: { podCIDR: '10.244.2.0/24' } },
      { spec: {} },
      {},
    ]),
    ['34.118.224.0/20', 'fd00:10:96::/112', '10.244.1.0/24', 'fd00:10:244:1::/64', '10.244.2.0/24'],
  );
});
