// `berth run`: the controller manager.
import { SUMMARIES } from '../command/summaries.ts';
import { PolicyKit } from '../policy/kit.ts';
import { Command, InvalidArgumentError, Option } from 'commander';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import path from 'node:path';
import { controllersOption, runningCapabilities, type CapabilityContext } from '../capability.ts';
import {
  berthNamespace,
  LEADER_ELECTION_ID,
  NAMESPACE,
  WEBHOOK_CERT_SECRET,
  WEBHOOK_CONFIGURATION,
} from '../policy/namespace.ts';
import { parseBindAddress } from '../runtime/server/http.ts';
import { errorText } from '../runtime/observability/log.ts';
import { KubeClient } from '../runtime/client/client.ts';
import { rootLogger } from '../runtime/observability/log.ts';
import { Manager } from '../runtime/manager/manager.ts';
import {
  defaultMaxInFlightBytes,
  defaultMaxRequestBytes,
  webhookServerLimits,
  type WebhookCertificates,
  type WebhookServerOptions,
} from '../runtime/webhook/admission.ts';
import {
  WebhookRunnable,
  defaultWebhookRegistration,
  generatedCertificates,
  isLoopbackHost,
  parseWebhookRegistration,
  type WebhookRegistration,
  type WebhookSpec,
} from '../runtime/webhook/registration.ts';
import { capabilities } from '../capabilities.ts';
import { installCrds } from './install.ts';
import { DEFAULT_ADDRESSES } from './addresses.ts';
import { addUi, electedLeader, uiOptions } from './ui.ts';
import { logOptions, useLogOptions } from './log.ts';
import { commit, version } from './version.ts';
import { allowUnsupportedOption, checkKubernetesVersion } from './kubernetes-version.ts';
import { UnsupportedKubernetesError } from '../runtime/api/version.ts';
import { crdName } from '../runtime/api/meta.ts';
import { buildInfo } from '../runtime/observability/metrics.ts';
import {
  berthNamespaceFlag,
  contextOption,
  durationOption,
  kubeconfigOption,
  atLeast,
  wholeNumber,
} from '../command/flags.ts';

const limits = webhookServerLimits;

/**
 * Time for a deleted pod's endpoint to leave its Services (EndpointSlice, then kube-proxy), well
 * inside the default terminationGracePeriodSeconds (30) with the webhook server's own close after it.
 */
const defaultShutdownDelayMs = 5000;

// Over 80 lines: one declaration of run's options, read as the table `berth run --help` prints.
export function runCommand(): Command {
  const cmd = new Command('run')
    .description(SUMMARIES.run.description)
    .addOption(kubeconfigOption('kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or in-cluster)'))
    .addOption(contextOption())
    .addOption(
      // A management plane's capabilities (cells) run only when named: a cluster runs what it always ran.
      controllersOption(
        capabilities,
        'controllers to enable; a management plane names its own (--controllers cells)',
      ),
    )
    .option(
      '--metrics-bind-address <addr>',
      'address of /metrics ("0" turns it off)',
      DEFAULT_ADDRESSES.metrics,
    )
    .option(
      '--health-probe-bind-address <addr>',
      'address of /healthz and /readyz ("0" turns it off)',
      DEFAULT_ADDRESSES.health,
    )
    .option('--leader-elect', 'elect a leader on a Lease so that only one replica writes', false)
    .option('--leader-election-id <name>', 'name of the Lease', LEADER_ELECTION_ID)
    .addOption(durationOption('--lease-duration <duration>', 'leader lease duration', 15))
    .addOption(
      durationOption(
        '--renew-deadline <duration>',
        'how long the leader retries renewing before it gives up',
        10,
      ),
    )
    .addOption(
      durationOption('--retry-period <duration>', 'how often candidates and the leader act on the Lease', 2),
    )
    .addOption(durationOption('--resync-period <duration>', 'safety-net resync of every informer', 600))
    .option('--max-in-flight <n>', 'most API requests in flight at once (watches excepted)', Number, 64)
    .option(
      '--webhook-bind-address <addr>',
      'address of the admission webhook server ("0" turns webhooks off)',
      DEFAULT_ADDRESSES.webhook,
    )
    .addOption(
      wholeNumber(
        '--webhook-max-connections <n>',
        'connections the webhook server keeps; more are closed at once',
        limits.maxConnections,
      ),
    )
    .addOption(
      new Option(
        '--webhook-max-connections-per-address <n>',
        'connections the webhook server keeps from one source address (at most --webhook-max-connections); ' +
          'more are closed at once (default: half of --webhook-max-connections)',
      ).argParser(atLeast(1)),
    )
    .option(
      '--webhook-client-ca <file>',
      "PEM of the CA that signs the apiserver's client certificate for webhooks (its AdmissionConfiguration): " +
        'a client without a certificate it signs is refused in the TLS handshake (default: none asked for)',
    )
    .addOption(
      wholeNumber(
        '--webhook-max-in-flight <n>',
        'admission requests served at once; more are answered 429 at once, so the apiserver applies ' +
          "the webhook's failurePolicy without waiting for its timeout",
        limits.maxInFlight,
      ),
    )
    .addOption(
      wholeNumber(
        '--webhook-max-in-flight-bytes <n>',
        'bytes of admission request bodies held at once (received, not yet answered); a request ' +
          'that would hold more is answered 429 at once',
        defaultMaxInFlightBytes,
      ),
    )
    .addOption(
      durationOption(
        '--webhook-header-timeout <duration>',
        "a client's TLS handshake and request headers must arrive within this, or it is dropped",
        limits.headersTimeoutMs / 1000,
        1,
      ),
    )
    .addOption(
      durationOption(
        '--webhook-request-timeout <duration>',
        'a whole request, body included, must arrive within this, or the client is dropped',
        limits.requestTimeoutMs / 1000,
        1,
      ),
    )
    .addOption(
      durationOption(
        '--webhook-keep-alive-timeout <duration>',
        'idle connections are closed after this (keep it above the 90 s after which the apiserver closes them)',
        limits.keepAliveTimeoutMs / 1000,
        1,
      ),
    )
    .addOption(
      wholeNumber(
        '--webhook-max-requests-per-connection <n>',
        'a connection is closed after this many requests, spreading the apiserver over replicas (0: never)',
        limits.maxRequestsPerConnection,
        0,
      ),
    )
    .addOption(
      wholeNumber(
        '--webhook-max-request-bytes <n>',
        'larger admission requests are answered 413',
        defaultMaxRequestBytes,
      ),
    )
    .option(
      '--webhook-cert-dir <dir>',
      'serving certificate: tls.crt, tls.key and optional ca.crt (a cert-manager Secret), reloaded when ' +
        'they change (default: the shared Secret of --webhook-cert-secret)',
    )
    .option(
      '--webhook-configuration <name>',
      'the Mutating- and ValidatingWebhookConfiguration Berth registers into, which the install creates empty ' +
        '(Berth may patch them by name, not create any)',
      WEBHOOK_CONFIGURATION,
    )
    .option(
      '--webhook-cert-secret <name>',
      "a Secret in Berth's namespace where Berth keeps the webhook CA and serving certificate, shared by " +
        'every replica and renewed before they expire (default: berth-webhook-cert when registered by ' +
        'Service; registered by URL, a CA and certificate generated at start)',
    )
    .addOption(
      new Option(
        '--webhook-register <mode>',
        'how the apiserver reaches the webhooks: url=https://HOST:{port} ({port}: the bound port), ' +
          'service=NAMESPACE/NAME[:PORT], or none (registered by someone else) (default: ' +
          'url=https://127.0.0.1:{port} on a loopback bind address, else service=<POD_NAMESPACE or ' +
          `${NAMESPACE}>/berth-webhook)`,
      ).argParser((v) => {
        try {
          return parseWebhookRegistration(v);
        } catch (e) {
          throw new InvalidArgumentError(errorText(e));
        }
      }),
    )
    .addOption(
      durationOption(
        '--shutdown-delay <duration>',
        'on SIGTERM, /readyz fails and the webhooks are served this long before the server closes, so ' +
          'that the pod leaves its Service first (0: close at once) (default: ' +
          `${defaultShutdownDelayMs / 1000}s when the webhook server binds a non-loopback address, else 0)`,
        undefined,
      ),
    )
    .option(
      '--install-crds',
      "install or upgrade Berth's CRDs before starting (needs permission to write CRDs, which the " +
        'generated role grants only with `berth manifests --install-crds`)',
      false,
    )
    .addOption(allowUnsupportedOption());
  for (const opt of logOptions()) cmd.addOption(opt);
  for (const opt of uiOptions(DEFAULT_ADDRESSES.ui)) cmd.addOption(opt);
  for (const c of capabilities) for (const opt of c.options?.() ?? []) cmd.addOption(opt);
  berthNamespaceFlag(
    cmd,
    "Berth's namespace: its Lease and its webhook certificate's Secret, and a namespace policies leave alone unless they name it",
    berthNamespace(),
    ['--leader-election-namespace'],
  );
  return cmd.action(async (o) => {
    useLogOptions(o);
    buildInfo.set({ version: version(), node_version: process.version, commit: commit() }, 1);
    const client = KubeClient.fromFile(o.kubeconfig, {
      maxInFlight: o.maxInFlight,
      userAgent: 'berth',
      ...(o.context !== undefined ? { context: o.context } : {}),
    });
    await checkRunVersion(client, o.allowUnsupportedKubernetes);
    const enabled = runningCapabilities(capabilities, o);
    if (o.installCrds) {
      // Without the CRDs, the capabilities that need them idle and say so; everything else still runs.
      await installCrds(client, (s) => rootLogger.info(s)).catch((e: unknown) =>
        rootLogger.error({ err: errorText(e) }, 'could not install the CRDs (--install-crds)'),
      );
    }
    const manager = new Manager({
      client,
      crdOwners: Object.fromEntries(enabled.flatMap((c) => c.kinds.map((r) => [crdName(r), c.name]))),
      metricsBindAddress: o.metricsBindAddress,
      healthBindAddress: o.healthProbeBindAddress,
      resyncMs: o.resyncPeriod * 1000,
      shutdownDelayMs: shutdownDelayMs(o),
      ...(o.leaderElect
        ? {
            leaderElection: {
              namespace: o.berthNamespace,
              name: o.leaderElectionId,
              identity: `${process.env['POD_NAME'] ?? hostname()}_${process.pid}`,
              leaseDurationMs: o.leaseDuration * 1000,
              renewDeadlineMs: o.renewDeadline * 1000,
              retryPeriodMs: o.retryPeriod * 1000,
            },
          }
        : {}),
    });
    const kit = new PolicyKit(manager);
    const ctx: CapabilityContext = {
      manager,
      kit,
      options: o,
      berthNamespace: o.berthNamespace,
    };
    // Every capability's reserved keys, enabled or not: a gate enabled tomorrow must not find them taken.
    for (const c of capabilities) if (c.keys) kit.keys.declare(c.name, c.keys);
    const webhooks: WebhookSpec[] = [];
    for (const c of enabled) webhooks.push(...((await c.setup(ctx)).webhooks ?? []));
    const webhookClient = addWebhooks(manager, client, webhooks, o, ctx.berthNamespace);
    addUi(manager, o, enabled, electedLeader(manager));
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => void manager.stop(0));
    await manager.start();
    rootLogger.info({ controllers: enabled.map((c) => c.name) }, 'berth is running');
    process.exitCode = await manager.done;
    webhookClient?.close();
  });
}

/**
 * The apiserver's version, read once before anything starts: outside the supported range Berth
 * refuses to start. An apiserver that does not answer yet is no verdict: the manager waits for it.
 */
async function checkRunVersion(client: KubeClient, allow: boolean): Promise<void> {
  try {
    const v = await checkKubernetesVersion(client, allow, (s) => rootLogger.warn(s));
    const emulates = v.emulationMinor ? { emulates: `${v.emulationMajor}.${v.emulationMinor}` } : {};
    rootLogger.info({ kubernetes: v.gitVersion, ...emulates }, 'apiserver version');
  } catch (e) {
    if (e instanceof UnsupportedKubernetesError) throw e;
    rootLogger.warn({ err: errorText(e) }, "could not read the apiserver's version; not checked");
  }
}

/** --shutdown-delay in ms: by default none on loopback, where no Service sends the apiserver here. */
export function shutdownDelayMs(o: Record<string, unknown>): number {
  if (o['shutdownDelay'] !== undefined) return (o['shutdownDelay'] as number) * 1000;
  const bind = parseBindAddress(String(o['webhookBindAddress']));
  return bind && !isLoopbackHost(bind.host) ? defaultShutdownDelayMs : 0;
}

/** The webhook server's limits, from `berth run`'s parsed --webhook-* flags. */
export function webhookServerOptions(
  o: Record<string, unknown>,
): Pick<WebhookServerOptions, 'maxRequestBytes' | 'maxInFlightBytes' | 'limits' | 'clientCa'> {
  const seconds = (key: string) => (o[key] as number) * 1000;
  const clientCa = o['webhookClientCa'] as string | undefined;
  const maxConnections = o['webhookMaxConnections'] as number;
  return {
    maxRequestBytes: o['webhookMaxRequestBytes'] as number,
    maxInFlightBytes: o['webhookMaxInFlightBytes'] as number,
    // Read at start: a new CA is served after a restart.
    ...(clientCa ? { clientCa: readFileSync(clientCa, 'utf8') } : {}),
    limits: {
      maxConnections,
      maxConnectionsPerAddress:
        (o['webhookMaxConnectionsPerAddress'] as number | undefined) ?? Math.ceil(maxConnections / 2),
      maxInFlight: o['webhookMaxInFlight'] as number,
      headersTimeoutMs: seconds('webhookHeaderTimeout'),
      requestTimeoutMs: seconds('webhookRequestTimeout'),
      keepAliveTimeoutMs: seconds('webhookKeepAliveTimeout'),
      maxRequestsPerConnection: o['webhookMaxRequestsPerConnection'] as number,
    },
  };
}

/** Serves and registers the capabilities' webhooks; returns the client that registers them. */
function addWebhooks(
  manager: Manager,
  client: KubeClient,
  specs: WebhookSpec[],
  o: Record<string, unknown>,
  berthNamespace: string,
): KubeClient | undefined {
  if (specs.length === 0) return undefined;
  const bind = parseBindAddress(String(o['webhookBindAddress']));
  if (!bind) {
    rootLogger.info({ webhooks: specs.map((s) => s.name) }, 'webhooks are off (--webhook-bind-address 0)');
    return undefined;
  }
  const registration =
    (o['webhookRegister'] as WebhookRegistration | undefined) ??
    defaultWebhookRegistration(bind.host, berthNamespace);
  const dir = o['webhookCertDir'] as string | undefined;
  const caFile = dir && path.join(dir, 'ca.crt');
  const secretName =
    (o['webhookCertSecret'] as string | undefined) ??
    (registration.mode === 'service' ? WEBHOOK_CERT_SECRET : undefined);
  // The manager fences its own clients to the leader; every replica registers (and may renew the
  // shared certificate), so this one is unfenced.
  const webhookClient = new KubeClient(client.access, { userAgent: 'berth-webhooks' });
  const generated = generatedCertificates(registration);
  const certificates: WebhookCertificates = dir
    ? {
        kind: 'files',
        certFile: path.join(dir, 'tls.crt'),
        keyFile: path.join(dir, 'tls.key'),
        ...(caFile && existsSync(caFile) ? { caFile } : {}),
      }
    : secretName
      ? { ...generated, kind: 'secret', client: webhookClient, namespace: berthNamespace, name: secretName }
      : generated;
  manager.addRunnable(
    new WebhookRunnable({
      client: webhookClient,
      server: { host: bind.host, port: bind.port, certificates, ...webhookServerOptions(o) },
      registration,
      specs,
      berthNamespace,
      // The name Berth's generated role lets it patch (resourceNames).
      configName: String(o['webhookConfiguration'] ?? WEBHOOK_CONFIGURATION),
    }),
  );
  return webhookClient;
}
