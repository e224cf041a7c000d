// The admission webhooks capabilities declare: served by every replica on one WebhookServer, and
// registered with the apiserver as one MutatingWebhookConfiguration and one
// ValidatingWebhookConfiguration, server-side applied by every replica (the content is the same).
// A webhook with a scope is sent only what its live policies may act on: its entry is applied
// again whenever the scope changes, and left out while no policy needs it (decision 0043).
import { isIP } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { errorText } from '../observability/log.ts';
import type { KubeClient } from '../client/client.ts';
import { rootLogger, type Logger } from '../observability/log.ts';
import type { Runnable } from '../manager/manager.ts';
import { Resources, type KubeObject, type ResourceRef } from '../api/meta.ts';
import {
  WebhookServer,
  type AdmissionHandler,
  type WebhookCertificates,
  type WebhookServerOptions,
} from './admission.ts';
import type { FedHandler } from './threaded.ts';
import {
  mutatingWebhookConfiguration,
  validatingWebhookConfiguration,
  webhookClientConfig,
  type LabelSelector,
  type MutatingWebhook,
  type RuleWithOperations,
  type ValidatingWebhook,
} from './configuration.ts';

export interface WebhookSpec {
  /** Fully qualified, e.g. 'pods.agents.berth.dev'. */
  name: string;
  /** Where the server serves it, e.g. '/mutate-pod'. */
  path: string;
  kind: 'mutating' | 'validating';
  /** Called on the main thread; a FedHandler answers in the webhook thread (threaded.ts). */
  handler: AdmissionHandler | FedHandler;
  rules: RuleWithOperations[];
  failurePolicy: 'Fail' | 'Ignore';
  /** Narrows further; kube-system and Berth's own namespace are always excluded. */
  namespaceSelector?: LabelSelector;
  objectSelector?: LabelSelector;
  matchConditions?: ValidatingWebhook['matchConditions'];
  timeoutSeconds?: number;
  /** Mutating webhooks only. */
  reinvocationPolicy?: MutatingWebhook['reinvocationPolicy'];
  /** What the live policies need sent here; without one, everything the rules match, always. */
  scope?: WebhookScope;
}

type MatchCondition = NonNullable<ValidatingWebhook['matchConditions']>[number];

/**
 * What a webhook is sent: nothing (no entry at all), everything its rules match, or only what
 * these select too (on top of the spec's own selectors and conditions).
 */
export type WebhookSelection =
  | { send: 'none' }
  | { send: 'all' }
  | {
      send: 'some';
      namespaceSelector?: LabelSelector;
      objectSelector?: LabelSelector;
      matchConditions?: MatchCondition[];
    };

/** Where a webhook's selection comes from (policy/admission.ts), and who learns it is in effect. */
export interface WebhookScope {
  /** The selection now, and a token of what it was computed from, for applied(). */
  selection(): { selection: WebhookSelection; token: unknown };
  /** Calls `changed` whenever selection() may give another answer. */
  watch(changed: () => void): void;
  /** The selection of `token` is in effect at admission. */
  applied(token: unknown): void;
  /**
   * A registrar applies the selections from now until it calls what this returns (it stopped);
   * without one (registered by the install, or webhooks off) what is registered is not Berth's to narrow.
   */
  engage(): () => void;
}

export type WebhookRegistration =
  /** The apiserver calls a URL; `{port}` in it stands for the port the server bound. */
  | { mode: 'url'; url: string }
  /** The apiserver calls a Service (port default 443) in front of the replicas. */
  | { mode: 'service'; namespace: string; name: string; port?: number }
  /** Serve only: something else registers (Helm, kustomize with cert-manager's CA injection). */
  | { mode: 'none' };

export const webhookFieldManager = 'berth-webhooks';
export const webhookConfigLabels = { 'app.kubernetes.io/managed-by': 'berth' };

const registerInitialMs = 1000;
const registerMaxMs = 30_000;
// How often a replica checks whether its CA (--webhook-cert-dir's ca.crt) rotated and needs re-registering.
const caCheckMs = 10_000;
/**
 * How long after a changed configuration is applied it is taken to be in effect: each apiserver
 * reads webhook configurations from its own informer, which learns of the change a watch event
 * later (milliseconds on a healthy control plane), so a policy's Ready waits this long.
 */
export const WEBHOOK_SETTLE_MS = 1000;

const boundUrl = (url: string, port: number): string => url.replaceAll('{port}', String(port));

/** The registration with `{port}` in a url replaced by the bound port. */
export function withBoundPort(registration: WebhookRegistration, port: number): WebhookRegistration {
  return registration.mode === 'url' ? { mode: 'url', url: boundUrl(registration.url, port) } : registration;
}

/** What both selectors select (undefined when neither is given); b's labels as In, so none overrides a's. */
function bothSelect(a: LabelSelector | undefined, b: LabelSelector | undefined): LabelSelector | undefined {
  if (!a || !b) return a ?? b;
  return {
    ...(a.matchLabels ? { matchLabels: a.matchLabels } : {}),
    matchExpressions: [
      ...(a.matchExpressions ?? []),
      ...Object.entries(b.matchLabels ?? {}).map(([key, v]) => ({
        key,
        operator: 'In' as const,
        values: [v],
      })),
      ...(b.matchExpressions ?? []),
    ],
  };
}

/**
 * The configurations that point the apiserver at `registration`: at most one mutating and one
 * validating, named `configName`, none when something else registers. Every webhook skips
 * kube-system and `berthNamespace`, so Berth can never block the system or its own pods. A
 * webhook `selected` says sends nothing has no entry; its configuration is still applied (with
 * fewer webhooks, or none), so that the entry it had is taken out.
 */
export function webhookConfigurations(
  specs: WebhookSpec[],
  registration: WebhookRegistration,
  caBundle: string | undefined,
  berthNamespace: string,
  configName = 'berth',
  selected: (s: WebhookSpec) => WebhookSelection = () => ({ send: 'all' }),
): KubeObject[] {
  if (registration.mode === 'none') return [];
  const target =
    registration.mode === 'url'
      ? { url: registration.url }
      : {
          service: {
            namespace: registration.namespace,
            name: registration.name,
            ...(registration.port ? { port: registration.port } : {}),
          },
        };
  const excluded = [...new Set(['kube-system', berthNamespace])];
  const excludedNamespaces: LabelSelector = {
    matchExpressions: [{ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: excluded }],
  };
  const webhook = (s: WebhookSpec): ValidatingWebhook => {
    const sel = selected(s);
    const some: Partial<Extract<WebhookSelection, { send: 'some' }>> = sel.send === 'some' ? sel : {};
    const objectSelector = bothSelect(s.objectSelector, some.objectSelector);
    const matchConditions = [...(s.matchConditions ?? []), ...(some.matchConditions ?? [])];
    return {
      name: s.name,
      clientConfig: webhookClientConfig(target, s.path, caBundle),
      rules: s.rules,
      failurePolicy: s.failurePolicy,
      namespaceSelector: bothSelect(
        bothSelect(s.namespaceSelector, some.namespaceSelector),
        excludedNamespaces,
      )!,
      ...(objectSelector ? { objectSelector } : {}),
      ...(matchConditions.length ? { matchConditions } : {}),
      ...(s.timeoutSeconds !== undefined ? { timeoutSeconds: s.timeoutSeconds } : {}),
    };
  };
  const sent = (s: WebhookSpec) => selected(s).send !== 'none';
  const kinds = new Set(specs.map((s) => s.kind));
  const mutating: MutatingWebhook[] = specs
    .filter((s) => s.kind === 'mutating' && sent(s))
    .map((s) => ({
      ...webhook(s),
      ...(s.reinvocationPolicy ? { reinvocationPolicy: s.reinvocationPolicy } : {}),
    }));
  const validating = specs.filter((s) => s.kind === 'validating' && sent(s)).map(webhook);
  const spec = <W>(webhooks: W[]) => ({ name: configName, labels: webhookConfigLabels, webhooks });
  return [
    ...(kinds.has('mutating') ? [mutatingWebhookConfiguration(spec(mutating))] : []),
    ...(kinds.has('validating') ? [validatingWebhookConfiguration(spec(validating))] : []),
  ];
}

/**
 * The configurations Berth registers into, empty: the install creates them (Helm, kustomize,
 * `berth install`), and Berth fills in their webhooks and caBundle with patches by name, so its role
 * needs no create (which no name could limit). No `webhooks` field: whoever applies these owns none.
 */
export const emptyWebhookConfigurations = (name: string): KubeObject[] =>
  [Resources.mutatingWebhookConfigurations, Resources.validatingWebhookConfigurations].map((ref) => ({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: ref.kind,
    metadata: { name, labels: { ...webhookConfigLabels } },
  }));

/** Where a Mutating- or ValidatingWebhookConfiguration lives in the API. */
export const configurationRef = (config: KubeObject): ResourceRef =>
  config.kind === Resources.mutatingWebhookConfigurations.kind
    ? Resources.mutatingWebhookConfigurations
    : Resources.validatingWebhookConfigurations;

/** A generated serving certificate valid on loopback and wherever the registration sends the apiserver. */
export function generatedCertificates(
  registration: WebhookRegistration,
): Extract<WebhookCertificates, { kind: 'generated' }> {
  const dnsNames = ['localhost'];
  const ipAddresses = ['127.0.0.1'];
  if (registration.mode === 'service') {
    // The apiserver verifies a Service's certificate against <name>.<namespace>.svc.
    const svc = `${registration.name}.${registration.namespace}.svc`;
    dnsNames.push(svc, `${svc}.cluster.local`);
  } else if (registration.mode === 'url') {
    const host = new URL(boundUrl(registration.url, 1)).hostname.replace(/^\[|\]$/g, '');
    (isIP(host) ? ipAddresses : dnsNames).push(host);
  }
  return { kind: 'generated', dnsNames: [...new Set(dnsNames)], ipAddresses: [...new Set(ipAddresses)] };
}

/** `url=https://HOST:{port}`, `service=NAMESPACE/NAME[:PORT]` or `none`. */
export function parseWebhookRegistration(value: string): WebhookRegistration {
  if (value === 'none') return { mode: 'none' };
  const [, mode, arg = ''] = /^(url|service)=(.*)$/.exec(value) ?? [];
  if (mode === 'url') {
    const url = URL.parse(boundUrl(arg, 1));
    if (url?.protocol === 'https:') return { mode: 'url', url: arg };
    throw new Error(`webhook registration url must be an https URL: "${arg}"`);
  }
  if (mode === 'service') {
    const m = /^([a-z0-9-]+)\/([a-z0-9-]+)(?::(\d+))?$/.exec(arg);
    const port = m?.[3] === undefined ? undefined : Number(m[3]);
    if (m && (port === undefined || (port > 0 && port < 65536))) {
      return { mode: 'service', namespace: m[1]!, name: m[2]!, ...(port ? { port } : {}) };
    }
    throw new Error(`webhook registration service must be NAMESPACE/NAME[:PORT]: "${arg}"`);
  }
  throw new Error(
    `bad webhook registration "${value}": use url=https://HOST:{port}, service=NAMESPACE/NAME[:PORT] or none`,
  );
}

/** Whether a server bound to `host` is reachable only from this machine. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || host.startsWith('127.');
}

/** A loopback server registers its own URL (local runs, tests); any other sits behind a Service. */
export function defaultWebhookRegistration(bindHost: string, namespace: string): WebhookRegistration {
  return isLoopbackHost(bindHost)
    ? { mode: 'url', url: `https://${bindHost.includes(':') ? `[${bindHost}]` : bindHost}:{port}` }
    : { mode: 'service', namespace, name: 'berth-webhook' };
}

export interface WebhookRunnableOptions {
  /** A client without the leader's write guard: every replica registers, leader or not. */
  client: KubeClient;
  server: WebhookServerOptions;
  registration: WebhookRegistration;
  specs: WebhookSpec[];
  /** The namespace Berth runs in, which its webhooks never gate. */
  berthNamespace: string;
  /** Name of the configurations; default 'berth'. */
  configName?: string;
  /** WEBHOOK_SETTLE_MS unless given. */
  settleMs?: number;
  logger?: Logger;
}

/**
 * Serves the specs and registers them. stop() leaves the configurations in place: a restarting
 * replica must not open a window in which the apiserver admits objects unchecked, and with
 * several replicas the others still serve. Uninstalling Berth means deleting them.
 *
 * With generated certificates each replica has its own CA and the last to register wins, so more
 * than one replica behind a Service needs shared certificates (the shared Secret, or --webhook-cert-dir).
 *
 * Behind a Service, a replica that cannot use the shared Secret serves a certificate of its own
 * (admission.ts) but registers nothing and is not ready until it can: its CA in the shared caBundle
 * would make the apiserver reject every other replica. (A URL registration is the replica's own, so
 * its own CA is the right one to register there.) As with cert-controller's rotator, the caBundle only ever
 * holds the Secret's CAs, and a replica without them stays out of the Service. Appending replica
 * CAs to the bundle instead would keep trusting CAs whose replica is gone (nothing can tell them
 * from live ones to prune them), grow with every restart, and need every replica to merge the
 * bundle rather than apply it.
 */
export class WebhookRunnable implements Runnable {
  readonly name = 'webhooks';
  readonly needLeaderElection = false;
  private readonly opts: WebhookRunnableOptions;
  private readonly log: Logger;
  private readonly server: WebhookServer;
  private readonly settleMs: number;
  private disengage: (() => void)[] = [];
  private readonly stopping = new AbortController();
  private readonly registered = Promise.withResolvers<void>();
  private registering: Promise<void> | undefined;

  constructor(opts: WebhookRunnableOptions) {
    this.opts = opts;
    this.log = opts.logger ?? rootLogger.child({ component: 'webhooks' });
    this.server = new WebhookServer({ logger: this.log, ...opts.server });
    this.settleMs = opts.settleMs ?? WEBHOOK_SETTLE_MS;
    // Something else registers in mode none: what it registers is not Berth's to narrow.
    if (opts.registration.mode !== 'none') {
      this.disengage = opts.specs.flatMap((s) => (s.scope ? [s.scope.engage()] : []));
    }
    // Stopping before registering rejects ready(); nobody has to be waiting for it.
    this.registered.promise.catch(() => {});
  }

  /**
   * Resolves once the configurations have been applied (at once in mode none). The apiserver's
   * webhook cache is eventually consistent, so the first requests after may still skip the webhooks.
   */
  ready(): Promise<void> {
    return this.registered.promise;
  }

  async start(signal: AbortSignal): Promise<void> {
    for (const s of this.opts.specs) this.server.register(s.path, s.handler, { name: s.name });
    await this.server.prepare();
    if (this.opts.registration.mode === 'none') {
      // What something else registers may send anything here.
      await this.server.listen();
      this.registered.resolve();
      return;
    }
    // In the background, so that an unreachable apiserver delays registration, not serving.
    this.registering = this.register(AbortSignal.any([signal, this.stopping.signal]));
  }

  /** Whether this replica's webhook thread runs: only once some webhook is to be sent requests. */
  get listening(): boolean {
    return this.server.listening;
  }

  /** Why the apiserver should not be sent here: a certificate it does not trust (see the class comment). */
  unready(): string | undefined {
    const why = this.sharedFallback();
    return why && `webhooks: ${why}, which the apiserver does not trust`;
  }

  /** Why this replica serves a certificate of its own while the configurations are shared. */
  private sharedFallback(): string | undefined {
    return this.opts.registration.mode === 'service' ? this.server.fallback : undefined;
  }

  drain(): void {
    this.server.drain();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    this.registered.reject(new Error('webhooks stopped before they were registered'));
    await this.registering;
    for (const release of this.disengage) release();
    await this.server.stop();
  }

  /**
   * Applies until it succeeds, then again whenever the CA changes (a rotated ca.crt) or a scope
   * does; nothing while a replica behind a Service is on a certificate of its own (see the class
   * comment). A scope learns its selection is in effect once the apiserver had WEBHOOK_SETTLE_MS to
   * see it (or at once when the configurations did not change).
   */
  private async register(signal: AbortSignal): Promise<void> {
    const scoped = this.opts.specs.filter((s) => s.scope);
    let changed = Promise.withResolvers<void>();
    for (const s of scoped) s.scope!.watch(() => changed.resolve());
    let applied: string | undefined;
    let delay = registerInitialMs;
    while (!signal.aborted) {
      if (!this.sharedFallback()) {
        changed = Promise.withResolvers<void>();
        const selections = new Map(scoped.map((s) => [s, s.scope!.selection()]));
        const selected = (s: WebhookSpec) => selections.get(s)?.selection ?? { send: 'all' };
        try {
          // Listening before any configuration sends requests here; never, while none does.
          if (this.opts.specs.some((s) => selected(s).send !== 'none')) await this.server.listen();
          const configs = this.configurations(selected, this.server.caBundle);
          const content = JSON.stringify(configs);
          if (content !== applied) {
            await this.apply(configs);
            if (scoped.length) await sleep(this.settleMs, undefined, { signal });
            applied = content;
          }
          for (const [s, { token }] of selections) s.scope!.applied(token);
          delay = registerInitialMs;
          this.registered.resolve();
          // Mounted files and the shared Secret rotate; a generated CA lives as long as the process.
          if (this.opts.server.certificates.kind === 'generated' && !scoped.length) return;
        } catch (e) {
          if (signal.aborted) return;
          this.log.error({ err: errorText(e), retryInMs: delay }, 'registering webhooks failed; retrying');
          await sleep(delay, undefined, { signal }).catch(() => {});
          delay = Math.min(delay * 2, registerMaxMs);
          continue;
        }
      }
      // The CA check's timer goes with the wait, so that many changes leave no timers behind.
      const woken = new AbortController();
      const timer = sleep(caCheckMs, undefined, { signal: AbortSignal.any([signal, woken.signal]) });
      await Promise.race([changed.promise, timer]).catch(() => {});
      woken.abort();
    }
  }

  private configurations(selected: (s: WebhookSpec) => WebhookSelection, caBundle: string | undefined) {
    const { specs, berthNamespace, configName } = this.opts;
    return webhookConfigurations(specs, this.bound(), caBundle, berthNamespace, configName, selected);
  }

  /** The registration with the bound port; as given while not listening (then no webhook uses it). */
  private bound(): WebhookRegistration {
    return this.server.listening
      ? withBoundPort(this.opts.registration, this.server.port)
      : this.opts.registration;
  }

  private async apply(configs: KubeObject[]): Promise<void> {
    for (const config of configs) {
      // Berth owns these objects: force takes back fields someone edited by hand.
      await this.opts.client.apply(configurationRef(config), config, {
        fieldManager: webhookFieldManager,
        force: true,
      });
    }
    this.log.info(
      {
        configurations: configs.map((c) => `${c.kind}/${c.metadata?.name}`),
        webhooks: configs.flatMap((c) => (c['webhooks'] as { name: string }[]).map((w) => w.name)),
        registration: this.bound(),
      },
      'webhooks registered',
    );
  }
}
