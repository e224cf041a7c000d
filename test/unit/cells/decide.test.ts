import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { findCondition, type Condition } from '../../../src/runtime/api/conditions.ts';
import { ApiError } from '../../../src/runtime/client/client.ts';
import { parseKubeconfig } from '../../../src/runtime/client/kubeconfig.ts';
import { capabilities } from '../../../src/capabilities.ts';
import { cellRules } from '../../../src/capability.ts';
import {
  accessDue,
  cellAccess,
  cellEvents,
  cellStatus,
  clusterNameOf,
  crdsServed,
  historyOf,
  kubeconfigProblem,
  observe,
  probeFailure,
  reachable,
  REFUSED_HOLD_MS,
  statusChanged,
  type FailureReason,
  type History,
  type Probe,
  type Timing,
} from '../../../src/cells/decide.ts';
import type { CellStatus } from '../../../src/cells/types.ts';
import { withSeed } from '../../helpers/prng.ts';

const t: Timing = { unreachableAfterMs: 6000, contactRefreshMs: 60_000 };
const T0 = Date.parse('2026-11-22T10:00:00Z');
const ok = (at: number, crdsInstalled = true, version = 'v1.34.1'): Probe => ({
  ok: true,
  at,
  version,
  crdsInstalled,
});
const fail = (at: number, reason: FailureReason = 'Unreachable'): Probe => ({
  ok: false,
  at,
  reason,
  message: `${reason} at ${at}`,
});
const history = (...probes: Probe[]): History => probes.reduce<History | undefined>(observe, undefined)!;
const cell = (status?: CellStatus, unschedulable = false, generation = 1) => ({
  metadata: { generation },
  spec: { unschedulable },
  ...(status ? { status } : {}),
});
const cond = (s: CellStatus, type: string) => findCondition(s.conditions, type)!;

describe('clusterNameOf', () => {
  test('a cell named by a DNS label is engaged as cell-<name>; others cannot name a cluster', () => {
    assert.equal(clusterNameOf('dfw-1'), 'cell-dfw-1');
    assert.equal(clusterNameOf('a'.repeat(58)), `cell-${'a'.repeat(58)}`);
    assert.equal(clusterNameOf('a'.repeat(59)), undefined);
    assert.equal(clusterNameOf('dfw.example'), undefined);
    assert.equal(clusterNameOf('dfw-'), undefined);
  });
});

describe('crdsServed', () => {
  test('only when discovery lists both WorkloadDeployments and Instances', () => {
    const list = (...names: string[]) => ({ resources: names.map((name) => ({ name })) });
    assert.equal(crdsServed(list('workloaddeployments', 'instances', 'quotas')), true);
    assert.equal(crdsServed(list('workloaddeployments', 'workloaddeployments/status')), false);
    assert.equal(crdsServed(list('cells')), false);
    assert.equal(crdsServed(undefined), false);
  });
});

describe('probeFailure', () => {
  test('refused credentials are Unauthorized, unloadable TLS material a bad kubeconfig, the rest Unreachable', () => {
    assert.equal(probeFailure(new ApiError(401, 'Unauthorized', 'Unauthorized', {})).reason, 'Unauthorized');
    assert.equal(probeFailure(new ApiError(403, 'Forbidden', 'forbidden', {})).reason, 'Unauthorized');
    assert.equal(probeFailure(new ApiError(503, 'ServiceUnavailable', 'down', {})).reason, 'Unreachable');
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
    assert.equal(probeFailure(refused).reason, 'Unreachable');
    const pem = Object.assign(new Error('error:1E08010C:DECODER routines::unsupported'), {
      code: 'ERR_OSSL_UNSUPPORTED',
    });
    assert.equal(probeFailure(pem).reason, 'BadKubeconfig');
    assert.equal(
      probeFailure(new Error('error:0480006C:PEM routines::no start line')).reason,
      'BadKubeconfig',
    );
  });
  test('the message is one line', () => {
    assert.doesNotMatch(probeFailure(new Error('a\nb\n  c')).message, /\n/);
  });
});

describe('kubeconfigProblem', () => {
  const kubeconfig = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}) => {
    return parseKubeconfig(
      JSON.stringify({
        apiVersion: 'v1',
        kind: 'Config',
        'current-context': 'c',
        contexts: [{ name: 'c', context: { cluster: 'k', user: 'u' } }],
        clusters: [{ name: 'k', cluster: { server: 'https://127.0.0.1:6443', ...cluster } }],
        users: [{ name: 'u', user }],
      }),
    );
  };
  test('embedded credentials and certificates are used', () => {
    assert.equal(
      kubeconfigProblem(kubeconfig({ token: 'x' }, { 'certificate-authority-data': 'Zm9v' })),
      undefined,
    );
    assert.equal(
      kubeconfigProblem(kubeconfig({ 'client-certificate-data': 'Zm9v', 'client-key-data': 'YmFy' })),
      undefined,
    );
  });
  test('no command is run and no file read on behalf of a Secret', () => {
    assert.match(
      kubeconfigProblem(
        kubeconfig({ exec: { command: 'sh', apiVersion: 'client.authentication.k8s.io/v1' } }),
      )!,
      /exec/,
    );
    assert.match(
      kubeconfigProblem(kubeconfig({ token: 'x' }, { 'certificate-authority': '/etc/ca.crt' }))!,
      /CA file/,
    );
    assert.match(kubeconfigProblem(kubeconfig({ 'client-certificate': '/c', 'client-key': '/k' }))!, /files/);
  });
  test('a server that is not https, or no current context, is named', () => {
    assert.match(
      kubeconfigProblem(kubeconfig({ token: 'x' }, { server: 'http://127.0.0.1:8080' }))!,
      /not https/,
    );
    assert.match(kubeconfigProblem(parseKubeconfig('{}'))!, /no current context/);
  });
});

describe('reachable', () => {
  test('a cell that stops answering stays Reachable until unreachableAfter has passed, then is Unreachable', () => {
    // Counted from the last answer (T0), not from the first probe that went unanswered.
    const h = history(ok(T0), fail(T0 + 1000), fail(T0 + 3000), fail(T0 + 5000));
    assert.equal(h.failingSince, T0);
    assert.equal(reachable(h, T0 + 5000, t).status, 'True');
    assert.equal(reachable(h, T0 + 5999, t).status, 'True');
    assert.deepEqual(reachable(h, T0 + 6000, t), {
      status: 'False',
      reason: 'Unreachable',
      message: `Unreachable at ${T0 + 5000}`,
    });
    assert.equal(reachable(observe(h, ok(T0 + 8000)), T0 + 8000, t).status, 'True');
  });
  test('a failure that waiting cannot fix is reported at once', () => {
    for (const reason of ['Unauthorized', 'BadKubeconfig', 'SecretMissing', 'InvalidName'] as const) {
      const h = history(ok(T0), fail(T0 + 1000, reason));
      assert.equal(reachable(h, T0 + 1000, t).reason, reason);
      assert.equal(reachable(h, T0 + 1000, t).status, 'False');
    }
  });
  test('a cell never contacted is Unknown (Probing) until unreachableAfter has passed', () => {
    assert.equal(reachable(history(fail(T0)), T0 + 100, t).status, 'Unknown');
    assert.equal(reachable(history(fail(T0)), T0 + 6000, t).status, 'False');
    assert.equal(reachable({}, T0, t).reason, 'Probing');
  });
  test('the failing period starts again after an answer', () => {
    const h = history(fail(T0), fail(T0 + 5000), ok(T0 + 5500), fail(T0 + 6000));
    assert.equal(h.failingSince, T0 + 5500);
    assert.equal(reachable(h, T0 + 11_499, t).status, 'True');
    assert.equal(reachable(h, T0 + 11_500, t).status, 'False');
  });
});

describe('cellStatus', () => {
  test('Ready = Reachable, the cell CRDs served and not unschedulable, each with its reason', () => {
    const h = history(ok(T0));
    const s = cellStatus(cell(), h, T0, t);
    assert.deepEqual(
      [cond(s, 'Reachable').status, cond(s, 'Ready').status, cond(s, 'Ready').reason],
      ['True', 'True', 'Ready'],
    );
    assert.equal(s.serverVersion, 'v1.34.1');
    assert.equal(s.crdsInstalled, true);
    assert.equal(s.lastContactTime, '2026-11-22T10:00:00Z');
    assert.equal(s.observedGeneration, 1);
    assert.equal(cond(cellStatus(cell(), history(ok(T0, false)), T0, t), 'Ready').reason, 'CRDsMissing');
    assert.equal(cond(cellStatus(cell(undefined, true), h, T0, t), 'Ready').reason, 'Unschedulable');
    const lost = cellStatus(cell(s), observe(h, fail(T0, 'Unauthorized')), T0 + 2000, t);
    assert.deepEqual([cond(lost, 'Ready').status, cond(lost, 'Ready').reason], ['False', 'Unauthorized']);
  });
  test('a lost cell keeps its last contact, version and CRDs, marked by its conditions', () => {
    const h1 = history(ok(T0));
    const s1 = cellStatus(cell(), h1, T0, t);
    const h2 = observe(observe(h1, fail(T0 + 2000)), fail(T0 + 9000));
    const s2 = cellStatus(cell(s1), h2, T0 + 9000, t);
    assert.equal(cond(s2, 'Reachable').reason, 'Unreachable');
    // Unreachable since the last contact, not since Berth noticed (T0 + 9 s).
    assert.equal(cond(s2, 'Reachable').lastTransitionTime, '2026-11-22T10:00:00Z');
    assert.equal(cond(s2, 'Ready').lastTransitionTime, '2026-11-22T10:00:00Z');
    assert.equal(s2.lastContactTime, s1.lastContactTime);
    assert.equal(s2.serverVersion, 'v1.34.1');
    assert.equal(s2.crdsInstalled, true);
  });
  test('lastContactTime moves at most once per contactRefresh: steady probes write nothing', () => {
    let s = cellStatus(cell(), history(ok(T0)), T0, t);
    let h = history(ok(T0));
    let writes = 0;
    for (let at = T0 + 2000; at <= T0 + 180_000; at += 2000) {
      h = observe(h, ok(at));
      const next = cellStatus(cell(s), h, at, t);
      if (statusChanged(s, next)) {
        writes++;
        s = next;
      }
    }
    assert.equal(writes, 3, 'one write a minute over three minutes');
    assert.equal(s.lastContactTime, '2026-11-22T10:03:00Z');
  });
  test('the conditions keep their transition times while their status holds', () => {
    const s1 = cellStatus(cell(), history(ok(T0)), T0, t);
    const s2 = cellStatus(cell(s1, true, 2), history(ok(T0 + 4000)), T0 + 4000, t);
    assert.equal(cond(s2, 'Reachable').lastTransitionTime, cond(s1, 'Reachable').lastTransitionTime);
    assert.notEqual(cond(s2, 'Ready').lastTransitionTime, cond(s1, 'Ready').lastTransitionTime);
    assert.equal(statusChanged(s1, s2), true, 'a new generation is written');
  });
});

describe('historyOf: a restart of Berth (probes are kept in memory) is no change of the cell', () => {
  // Before the restart: answering at T0, then silent from T0 + 2 s.
  const before = cellStatus(cell(), history(ok(T0)), T0, t);
  const lost = cellStatus(cell(before), history(ok(T0), fail(T0 + 2000), fail(T0 + 9000)), T0 + 9000, t);
  const restart = T0 + 3_600_000;

  test('a cell lost before stays lost since then: no new transition time (failover), no new Warning', () => {
    for (const reason of ['Unreachable', 'Unauthorized'] as const) {
      const was =
        reason === 'Unreachable'
          ? lost
          : cellStatus(cell(before), history(fail(T0 + 9000, reason)), T0 + 9000, t);
      const h = observe(historyOf(was), fail(restart, reason));
      const next = cellStatus(cell(was), h, restart, t);
      assert.deepEqual(cond(next, 'Reachable'), {
        ...cond(was, 'Reachable'),
        message: `${reason} at ${restart}`,
      });
      assert.deepEqual(cellEvents(was.conditions, next.conditions!), [], reason);
    }
    // It answers: Reachable again, announced once.
    const back = cellStatus(cell(lost), observe(historyOf(lost), ok(restart)), restart, t);
    assert.equal(cond(back, 'Reachable').status, 'True');
    assert.equal(cellEvents(lost.conditions, back.conditions!)[0]?.type, 'Normal');
  });

  test('a reachable cell whose first probe fails is not lost before unreachableAfter', () => {
    const h = observe(historyOf(before), fail(restart));
    const next = cellStatus(cell(before), h, restart, t);
    assert.equal(cond(next, 'Reachable').status, 'True');
    assert.equal(statusChanged(before, next), false);
    assert.equal(
      cond(cellStatus(cell(next), observe(h, fail(restart + 6000)), restart + 6000, t), 'Reachable').reason,
      'Unreachable',
    );
  });

  test('no status, or one never reached: nothing is known', () => {
    assert.deepEqual(historyOf(undefined), {});
    assert.deepEqual(historyOf(cellStatus(cell(), history(fail(T0)), T0, t)), {});
  });
});

describe('cellEvents', () => {
  const c = (status: Condition['status'], reason: string, message = reason): Condition[] => [
    { type: 'Reachable', status, reason, message, lastTransitionTime: '' },
  ];
  test('a Warning when the cell is lost or the cause changes (not its text), a Normal when it is back, nothing otherwise', () => {
    assert.deepEqual(cellEvents(c('True', 'Reachable'), c('False', 'Unreachable', 'gone')), [
      { type: 'Warning', reason: 'Unreachable', message: 'gone' },
    ]);
    assert.deepEqual(cellEvents(undefined, c('False', 'BadKubeconfig')), [
      { type: 'Warning', reason: 'BadKubeconfig', message: 'BadKubeconfig' },
    ]);
    assert.deepEqual(cellEvents(c('False', 'Unreachable'), c('False', 'Unreachable')), []);
    assert.deepEqual(
      cellEvents(c('False', 'Unreachable', 'refused'), c('False', 'Unreachable', 'timed out')),
      [],
    );
    assert.equal(
      cellEvents(c('False', 'Unreachable'), c('False', 'Unauthorized'))[0]?.reason,
      'Unauthorized',
    );
    assert.deepEqual(cellEvents(c('False', 'Unreachable'), c('True', 'Reachable')), [
      { type: 'Normal', reason: 'Reachable', message: 'the cell answers again (was Unreachable)' },
    ]);
    assert.deepEqual(cellEvents(undefined, c('True', 'Reachable')), []);
    assert.deepEqual(cellEvents(c('Unknown', 'Probing'), c('True', 'Reachable')), []);
  });

  test('a Warning when a cell that answers cannot take workloads (CRDs, access), once per cause; none for a cordon', () => {
    // Reachable's status and reason, then Ready's.
    const at = (reachable: string, ready: string): Condition[] => {
      const [rs, rr] = reachable.split(' ') as [Condition['status'], string];
      const [s, reason] = ready.split(' ') as [Condition['status'], string];
      return [
        ...c(rs, rr),
        { type: 'Ready', status: s, reason, message: `${reason}!`, lastTransitionTime: '' },
      ];
    };
    const up = 'True Reachable';
    const cases: [Condition[], Condition[], string[]][] = [
      [at(up, 'True Ready'), at(up, 'False AccessDenied'), ['Warning AccessDenied']],
      [at(up, 'False AccessDenied'), at(up, 'False AccessDenied'), []],
      [at(up, 'False AccessDenied'), at(up, 'False CRDsMissing'), ['Warning CRDsMissing']],
      [at(up, 'True Ready'), at(up, 'False Unschedulable'), []],
      // Back, and at once found wanting: both said.
      [
        at('False Unreachable', 'False Unreachable'),
        at(up, 'False CRDsMissing'),
        ['Normal Reachable', 'Warning CRDsMissing'],
      ],
    ];
    for (const [before, after, expected] of cases)
      assert.deepEqual(
        cellEvents(before, after).map((e) => `${e.type} ${e.reason}`),
        expected,
      );
    assert.equal(cellEvents(at(up, 'True Ready'), at(up, 'False AccessDenied'))[0]?.message, 'AccessDenied!');
  });
});

describe("access: what the cell's credentials may not do", () => {
  const denied = (at: number, d: string[], crdsInstalled = true): Probe => ({
    ok: true,
    at,
    version: 'v1.34.1',
    crdsInstalled,
    denied: d,
  });
  test('asked at first, at every probe while short, otherwise once per contactRefresh', () => {
    assert.equal(accessDue(undefined, T0, t), true);
    const allowed = history(denied(T0, []));
    assert.equal(accessDue(allowed, T0 + 59_000, t), false);
    assert.equal(accessDue(allowed, T0 + 60_000, t), true);
    assert.equal(accessDue(history(denied(T0, ['list instances'])), T0 + 1000, t), true);
  });
  test('an answer is kept by probes that did not ask, and by failures', () => {
    const h = history(denied(T0, ['watch instances']), ok(T0 + 2000), fail(T0 + 4000));
    assert.deepEqual([h.denied, h.accessCheckedAt], [['watch instances'], T0]);
    const fixed = observe(h, denied(T0 + 6000, []));
    assert.deepEqual([fixed.denied, fixed.accessCheckedAt], [[], T0 + 6000]);
  });
  test('Ready=False AccessDenied names what is missing; a lost cell or missing CRDs say so first; a cordon comes after', () => {
    const short = history(denied(T0, ['list instances', 'delete workloaddeployments']));
    const ready = cond(cellStatus(cell(undefined, true), short, T0, t), 'Ready');
    assert.deepEqual([ready.status, ready.reason], ['False', 'AccessDenied']);
    assert.match(ready.message, /may not list instances, delete workloaddeployments: grant them/);
    assert.equal(
      cond(cellStatus(cell(), history(denied(T0, ['list instances'], false)), T0, t), 'Ready').reason,
      'CRDsMissing',
    );
    assert.equal(
      cond(cellStatus(cell(), observe(short, fail(T0 + 1000, 'Unauthorized')), T0 + 1000, t), 'Ready').reason,
      'Unauthorized',
    );
    assert.equal(
      cond(cellStatus(cell(undefined, true), history(denied(T0, [])), T0, t), 'Ready').reason,
      'Unschedulable',
    );
    assert.equal(cond(cellStatus(cell(), history(denied(T0, [])), T0, t), 'Ready').status, 'True');
  });
  test('Ready=False AnswerTooLarge, with a Warning, for REFUSED_HOLD_MS after an answer refused for its size; a lost cell says so first', () => {
    const refused = { at: T0, message: 'watch /apis/x from h: a line of more than 16 bytes, refused' };
    const h = { ...history(ok(T0)), refused };
    const s = cellStatus(cell(), h, T0 + 1000, t);
    const ready = cond(s, 'Ready');
    assert.deepEqual(
      [cond(s, 'Reachable').status, ready.status, ready.reason],
      ['True', 'False', 'AnswerTooLarge'],
    );
    assert.match(ready.message, /sent more than Berth reads.*a line of more than 16 bytes/);
    assert.deepEqual(
      cellEvents(cellStatus(cell(), history(ok(T0)), T0, t).conditions, s.conditions!).map(
        (e) => `${e.type} ${e.reason}`,
      ),
      ['Warning AnswerTooLarge'],
    );
    assert.equal(cond(cellStatus(cell(), h, T0 + REFUSED_HOLD_MS, t), 'Ready').status, 'True');
    const lost = { ...observe(history(ok(T0)), fail(T0 + 1000, 'Unauthorized')), refused };
    assert.equal(cond(cellStatus(cell(), lost, T0 + 1000, t), 'Ready').reason, 'Unauthorized');
  });
});

test('generated probe histories: Unreachable exactly when no answer came for unreachableAfter, one Warning per loss or change of cause, writes only on change (500 cases)', async () => {
  await withSeed('cells fuzz', (r) => {
    for (let n = 0; n < 500; n++) {
      let h: History | undefined;
      let s: CellStatus | undefined;
      const probes: Probe[] = [];
      let at = T0;
      let expectedWarnings = 0;
      let warnings = 0;
      let lost: string | undefined;
      for (let i = 0; i < 60; i++) {
        at += 500 + r.int(3000);
        // A cause keeps its reason while its text varies, as an apiserver that stays down does.
        const reason: FailureReason = r.chance(0.9) ? 'Unreachable' : 'Unauthorized';
        const p: Probe = r.chance(0.5)
          ? ok(at, r.chance(0.9))
          : { ok: false, at, reason, message: `${reason}: error ${r.int(3)}` };
        probes.push(p);
        h = observe(h, p);
        const before = s?.conditions;
        const next = cellStatus(cell(s), h, at, t);
        // The same probe history at the same time changes nothing once written.
        assert.equal(statusChanged(next, cellStatus(cell(next), h, at, t)), false);
        if (!s || statusChanged(s, next)) s = next;
        // Reachable's Warnings (a cell without CRDs has Ready's own, tested above).
        warnings += cellEvents(before, s.conditions!).filter(
          (e) => e.type === 'Warning' && e.reason !== 'CRDsMissing',
        ).length;
        const rc = cond(s, 'Reachable');
        // The oracle: the failures since the last answer (silent since that answer, else since the
        // first failure), and whether the last one is transient.
        const lastOk = probes.findLastIndex((q) => q.ok);
        const failing = probes.slice(lastOk + 1) as (Probe & { ok: false })[];
        const last = failing.at(-1);
        const silentSince = lastOk >= 0 ? probes[lastOk]!.at : failing[0]?.at;
        const expectFalse =
          last !== undefined && (last.reason !== 'Unreachable' || at - silentSince! >= t.unreachableAfterMs);
        assert.equal(rc.status, expectFalse ? 'False' : lastOk >= 0 ? 'True' : 'Unknown', `probe ${i}`);
        if (expectFalse) {
          assert.equal(rc.reason, last.reason);
          if (lost !== last.reason) expectedWarnings++;
          lost = last.reason;
        } else lost = undefined;
      }
      assert.equal(warnings, expectedWarnings);
    }
  });
});

describe('cellAccess: what a probe asks the cell', () => {
  test("namespaces are listed and watched; making them is not asked (a refusal is the Workload's)", () => {
    const verbs = cellAccess.find((a) => a.resource === 'namespaces')?.verbs ?? [];
    assert.deepEqual([...verbs].sort(), ['list', 'watch']);
  });

  test('every verb it asks for is granted by the cell role (berth manifests --cell)', () => {
    const rules = cellRules(capabilities);
    for (const { group, resource, verbs } of cellAccess)
      for (const verb of verbs)
        assert.ok(
          rules.some(
            (r) => r.apiGroups?.includes(group) && r.resources?.includes(resource) && r.verbs.includes(verb),
          ),
          `${verb} ${resource}`,
        );
  });
});
