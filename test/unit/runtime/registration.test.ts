import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { KubeObject } from '../../../src/runtime/api/meta.ts';
import type { MutatingWebhook } from '../../../src/runtime/webhook/configuration.ts';
import {
  defaultWebhookRegistration,
  generatedCertificates,
  parseWebhookRegistration,
  webhookConfigurations,
  withBoundPort,
  type WebhookSpec,
} from '../../../src/runtime/webhook/registration.ts';

const allow = () => ({ allowed: true as const });

const spec = (over: Partial<WebhookSpec> & Pick<WebhookSpec, 'name' | 'kind'>): WebhookSpec => ({
  path: `/${over.name}`,
  handler: allow,
  rules: [{ operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'] }],
  failurePolicy: 'Fail',
  ...over,
});

const webhooksOf = (config: KubeObject | undefined) => (config?.['webhooks'] ?? []) as MutatingWebhook[];

const ca = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const url = { mode: 'url', url: 'https://127.0.0.1:9443' } as const;

describe('webhookConfigurations', () => {
  test('one configuration per kind, each with every spec of its kind, labelled and named', () => {
    const specs = [
      spec({ name: 'pods.agents.berth.dev', kind: 'mutating', reinvocationPolicy: 'IfNeeded' }),
      spec({ name: 'nodes.gates.berth.dev', kind: 'mutating', timeoutSeconds: 2 }),
      spec({ name: 'rules.labels.berth.dev', kind: 'validating', failurePolicy: 'Ignore' }),
    ];
    const [mutating, validating, ...rest] = webhookConfigurations(specs, url, ca, 'berth-system', 'mine');
    assert.equal(rest.length, 0);
    assert.equal(mutating?.kind, 'MutatingWebhookConfiguration');
    assert.equal(mutating?.apiVersion, 'admissionregistration.k8s.io/v1');
    assert.deepEqual(mutating?.metadata, {
      name: 'mine',
      labels: { 'app.kubernetes.io/managed-by': 'berth' },
    });
    assert.deepEqual(
      webhooksOf(mutating).map((w) => [w.name, w.reinvocationPolicy, w.timeoutSeconds]),
      [
        ['pods.agents.berth.dev', 'IfNeeded', 5],
        ['nodes.gates.berth.dev', undefined, 2],
      ],
    );
    assert.equal(validating?.kind, 'ValidatingWebhookConfiguration');
    assert.equal(validating?.metadata?.name, 'mine');
    const [rule] = webhooksOf(validating);
    assert.equal(rule?.name, 'rules.labels.berth.dev');
    assert.equal(rule?.failurePolicy, 'Ignore');
    assert.deepEqual(rule?.clientConfig, {
      url: 'https://127.0.0.1:9443/rules.labels.berth.dev',
      caBundle: Buffer.from(ca).toString('base64'),
    });
    // The builders' defaults apply.
    assert.equal(rule?.sideEffects, 'None');
    assert.deepEqual(rule?.admissionReviewVersions, ['v1']);
  });

  test('only the kinds that have specs, named berth by default', () => {
    const configs = webhookConfigurations([spec({ name: 'a.berth.dev', kind: 'validating' })], url, ca, 'b');
    assert.deepEqual(
      configs.map((c) => [c.kind, c.metadata?.name]),
      [['ValidatingWebhookConfiguration', 'berth']],
    );
    assert.deepEqual(webhookConfigurations([], url, ca, 'b'), []);
  });

  test('a webhook its scope sends nothing has no entry, and its configuration is still applied, to take it out', () => {
    const specs = [
      spec({ name: 'a.berth.dev', kind: 'mutating' }),
      spec({ name: 'b.berth.dev', kind: 'mutating' }),
      spec({ name: 'c.berth.dev', kind: 'validating' }),
    ];
    const configs = webhookConfigurations(specs, url, ca, 'b', 'berth', (s) =>
      s.name === 'b.berth.dev' ? { send: 'all' } : { send: 'none' },
    );
    assert.deepEqual(
      configs.map((c) => [c.kind, webhooksOf(c).map((w) => w.name)]),
      [
        ['MutatingWebhookConfiguration', ['b.berth.dev']],
        ['ValidatingWebhookConfiguration', []],
      ],
    );
  });

  test("a scope's selectors are required besides the spec's own, and its conditions come after the spec's", () => {
    const own = spec({
      name: 'a.berth.dev',
      kind: 'mutating',
      objectSelector: { matchLabels: { app: 'web' } },
      matchConditions: [{ name: 'mine', expression: 'true' }],
    });
    const [config] = webhookConfigurations([own], url, ca, 'b', 'berth', () => ({
      send: 'some',
      namespaceSelector: { matchLabels: { team: 'a' } },
      objectSelector: { matchLabels: { app: 'db' } },
      matchConditions: [{ name: 'berth-policies-select', expression: 'false' }],
    }));
    const [w] = webhooksOf(config);
    // app=web and app=db both required: a scope never widens what the spec sends.
    assert.deepEqual(w?.objectSelector, {
      matchLabels: { app: 'web' },
      matchExpressions: [{ key: 'app', operator: 'In', values: ['db'] }],
    });
    assert.deepEqual(w?.namespaceSelector, {
      matchLabels: { team: 'a' },
      matchExpressions: [
        { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system', 'b'] },
      ],
    });
    assert.deepEqual(
      w?.matchConditions?.map((c) => c.name),
      ['mine', 'berth-policies-select'],
    );
  });

  test('kube-system and the Berth namespace are excluded, merged with the spec selector', () => {
    const own = { key: 'team', operator: 'In' as const, values: ['a'] };
    const [config] = webhookConfigurations(
      [
        spec({
          name: 'a.berth.dev',
          kind: 'mutating',
          namespaceSelector: { matchLabels: { tier: 'apps' }, matchExpressions: [own] },
          objectSelector: { matchLabels: { x: 'y' } },
        }),
        spec({ name: 'b.berth.dev', kind: 'mutating' }),
      ],
      url,
      ca,
      'berth',
    );
    const exclusion = {
      key: 'kubernetes.io/metadata.name',
      operator: 'NotIn',
      values: ['kube-system', 'berth'],
    };
    const [a, b] = webhooksOf(config);
    assert.deepEqual(a?.namespaceSelector, {
      matchLabels: { tier: 'apps' },
      matchExpressions: [own, exclusion],
    });
    assert.deepEqual(a?.objectSelector, { matchLabels: { x: 'y' } });
    assert.deepEqual(b?.namespaceSelector, { matchExpressions: [exclusion] });
    assert.equal(b?.objectSelector, undefined);
  });

  test('Berth running in kube-system excludes it once', () => {
    const [config] = webhookConfigurations(
      [spec({ name: 'a.berth.dev', kind: 'mutating' })],
      url,
      ca,
      'kube-system',
    );
    assert.deepEqual(webhooksOf(config)[0]?.namespaceSelector?.matchExpressions?.[0]?.values, [
      'kube-system',
    ]);
  });

  test('service mode points at the Service, with its port when given', () => {
    const specs = [spec({ name: 'a.berth.dev', kind: 'mutating', path: '/mutate-pod' })];
    const [withPort] = webhookConfigurations(
      specs,
      { mode: 'service', namespace: 'berth-system', name: 'berth-webhook', port: 8443 },
      undefined,
      'berth-system',
    );
    assert.deepEqual(webhooksOf(withPort)[0]?.clientConfig, {
      service: { namespace: 'berth-system', name: 'berth-webhook', port: 8443, path: '/mutate-pod' },
    });
    const [noPort] = webhookConfigurations(
      specs,
      { mode: 'service', namespace: 'ns', name: 'svc' },
      ca,
      'ns',
    );
    assert.deepEqual(webhooksOf(noPort)[0]?.clientConfig.service, {
      namespace: 'ns',
      name: 'svc',
      path: '/mutate-pod',
    });
  });

  test('mode none builds nothing', () => {
    const specs = [
      spec({ name: 'a.berth.dev', kind: 'mutating' }),
      spec({ name: 'b.berth.dev', kind: 'validating' }),
    ];
    assert.deepEqual(webhookConfigurations(specs, { mode: 'none' }, ca, 'berth-system'), []);
  });
});

describe('withBoundPort', () => {
  test('replaces {port} in a url with the bound port', () => {
    assert.deepEqual(withBoundPort({ mode: 'url', url: 'https://127.0.0.1:{port}' }, 40123), {
      mode: 'url',
      url: 'https://127.0.0.1:40123',
    });
    assert.deepEqual(withBoundPort({ mode: 'url', url: 'https://hooks.example:8443' }, 1), {
      mode: 'url',
      url: 'https://hooks.example:8443',
    });
  });

  test('leaves the other modes alone', () => {
    const service = { mode: 'service', namespace: 'n', name: 's' } as const;
    assert.equal(withBoundPort(service, 1), service);
  });
});

describe('parseWebhookRegistration', () => {
  test('url, service and none', () => {
    assert.deepEqual(parseWebhookRegistration('url=https://127.0.0.1:{port}'), {
      mode: 'url',
      url: 'https://127.0.0.1:{port}',
    });
    assert.deepEqual(parseWebhookRegistration('service=berth-system/berth-webhook'), {
      mode: 'service',
      namespace: 'berth-system',
      name: 'berth-webhook',
    });
    assert.deepEqual(parseWebhookRegistration('service=ns/svc:8443'), {
      mode: 'service',
      namespace: 'ns',
      name: 'svc',
      port: 8443,
    });
    assert.deepEqual(parseWebhookRegistration('none'), { mode: 'none' });
  });

  test('rejects what the apiserver could not use', () => {
    for (const bad of [
      'url=http://127.0.0.1:{port}',
      'url=not a url',
      'service=svc',
      'service=ns/svc:0',
      'service=ns/svc:70000',
      'service=NS/svc',
      'cluster=x',
      '',
    ]) {
      assert.throws(() => parseWebhookRegistration(bad), /webhook registration/, bad);
    }
  });
});

describe('defaultWebhookRegistration', () => {
  test('a loopback bind registers its URL, any other a Service', () => {
    assert.deepEqual(defaultWebhookRegistration('127.0.0.1', 'b'), {
      mode: 'url',
      url: 'https://127.0.0.1:{port}',
    });
    assert.deepEqual(defaultWebhookRegistration('::1', 'b'), { mode: 'url', url: 'https://[::1]:{port}' });
    assert.deepEqual(defaultWebhookRegistration('0.0.0.0', 'berth-system'), {
      mode: 'service',
      namespace: 'berth-system',
      name: 'berth-webhook',
    });
  });
});

describe('generatedCertificates', () => {
  test('loopback names, plus the Service names or the URL host', () => {
    assert.deepEqual(generatedCertificates({ mode: 'url', url: 'https://127.0.0.1:{port}' }), {
      kind: 'generated',
      dnsNames: ['localhost'],
      ipAddresses: ['127.0.0.1'],
    });
    assert.deepEqual(generatedCertificates({ mode: 'url', url: 'https://hooks.example:{port}' }), {
      kind: 'generated',
      dnsNames: ['localhost', 'hooks.example'],
      ipAddresses: ['127.0.0.1'],
    });
    assert.deepEqual(generatedCertificates({ mode: 'url', url: 'https://[::1]:{port}' }), {
      kind: 'generated',
      dnsNames: ['localhost'],
      ipAddresses: ['127.0.0.1', '::1'],
    });
    assert.deepEqual(generatedCertificates({ mode: 'service', namespace: 'ns', name: 'svc' }), {
      kind: 'generated',
      dnsNames: ['localhost', 'svc.ns.svc', 'svc.ns.svc.cluster.local'],
      ipAddresses: ['127.0.0.1'],
    });
  });
});
