// Berth's probe and metrics servers against a client that holds their connections: `berth run` as a
// process of its own (no controller), its probes asked as the kubelet asks them, from another
// address (Linux routes all of 127/8 to the loopback interface, so 127.0.0.2 is another client).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { probeServerLimits } from '../../src/runtime/server/http.ts';
import { startBerth, type BerthProcess } from '../helpers/berth.ts';
import { testSandbox } from '../helpers/cluster.ts';

const sandbox = testSandbox();
let berth: BerthProcess;

before(async () => {
  berth = await startBerth(sandbox, ['--controllers=', '--webhook-bind-address=0']);
});

after(() => berth?.stop());

/** GET `path` on `port` from `localAddress`, on `agent`'s connections (a fresh one without); rejects on a connection error. */
function get(port: number, path: string, localAddress: string, agent: http.Agent | false): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path, localAddress, agent, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within 2 s`)));
    req.on('error', reject);
  });
}

for (const [server, path] of [
  ['health', '/healthz'],
  ['metrics', '/metrics'],
] as const) {
  test(`a client holding every connection it can to the ${server} port does not stop ${path} for another address`, async (t) => {
    const port = server === 'health' ? berth.healthPort : berth.metricsPort;
    const refused = () =>
      berth.metric('berth_http_rejected_total', (l) =>
        l.includes(`server="${server}",reason="connections_per_address"`),
      );
    const refusedBefore = await refused();
    // As many keep-alive connections as the server keeps in all, left open once answered.
    const holder = new http.Agent({ keepAlive: true, maxSockets: probeServerLimits.maxConnections });
    try {
      const held = await Promise.allSettled(
        Array.from({ length: probeServerLimits.maxConnections }, () => get(port, path, '127.0.0.2', holder)),
      );
      const kept = held.filter((r) => r.status === 'fulfilled').length;
      t.diagnostic(`${kept} of ${held.length} connections from 127.0.0.2 kept`);
      // The kubelet's probes, each on a connection of its own.
      for (let i = 0; i < 5; i++) assert.equal(await get(port, path, '127.0.0.1', false), 200);
      assert.ok(
        kept <= probeServerLimits.maxConnectionsPerAddress,
        `${kept} connections kept from one address`,
      );
      assert.ok((await refused()) >= refusedBefore + held.length - kept);
    } finally {
      holder.destroy();
    }
  });
}
