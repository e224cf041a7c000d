// The sandbox's processes, one entry each: the binary it runs, its arguments, the port it is known
// by and its health check; and the configuration files the control plane reads.
import { writeFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify as toYaml } from 'yaml';
import { berthRunArgs } from './berth.ts';
import { httpRequest, httpsGet, httpsStatus } from './net.ts';
import { KWOK_ANNOTATION } from './nodes.ts';
import { registryInfo } from './registry.ts';
import { stagesYaml } from './stages.ts';
import type { Ports, ProcessName, State } from './state.ts';

/** The token service runs on the Node running the sandbox, from the file beside this one (.ts or .js). */
const TOKEN_SERVER = fileURLToPath(
  new URL(`./token-server${extname(fileURLToPath(import.meta.url))}`, import.meta.url),
);

export const SERVICE_CIDR = '10.96.0.0/16';
/** The `kubernetes` Service's address in SERVICE_CIDR, which the apiserver's certificate names. */
export const SERVICE_IP = '10.96.0.1';

/** The audit policy of `up({ audit: true })`: service accounts' requests at Metadata level, nothing else. */
const AUDIT_POLICY = {
  apiVersion: 'audit.k8s.io/v1',
  kind: 'Policy',
  omitStages: ['RequestReceived'],
  rules: [{ level: 'Metadata', userGroups: ['system:serviceaccounts'] }, { level: 'None' }],
};

/** The audit log kube-apiserver writes in the sandbox folder `dir` when started with `audit`. */
export const auditLogPath = (dir: string): string => join(dir, 'logs', 'audit.log');

/** The address of the sandbox's apiserver. */
export const serverOf = (ports: Ports): string => `https://127.0.0.1:${ports.apiserver}`;

/** Whether the apiserver of the sandbox in `dir` answers its readiness check. */
export async function apiserverReady(server: string, dir: string): Promise<boolean> {
  try {
    return (await httpsGet(`${server}/readyz`, join(dir, 'pki'), true)) === 'ok';
  } catch {
    return false;
  }
}

/** Writes the files the control plane reads besides its PKI: the scheduler's, kwok's stages and options, and the audit policy. */
export function writeProcessConfigs(dir: string, audit: boolean): void {
  writeFileSync(
    join(dir, 'scheduler.yaml'),
    toYaml({
      apiVersion: 'kubescheduler.config.k8s.io/v1',
      kind: 'KubeSchedulerConfiguration',
      clientConnection: { kubeconfig: join(dir, 'kubeconfig'), qps: 500, burst: 1000 },
      leaderElection: { leaderElect: false },
    }),
  );
  writeFileSync(join(dir, 'kwok-stages.yaml'), stagesYaml());
  writeFileSync(join(dir, 'kwok.yaml'), toYaml(KWOK_CONFIGURATION));
  if (audit) writeFileSync(join(dir, 'audit-policy.yaml'), toYaml(AUDIT_POLICY));
}

// kwok plays 4 pod stages at a time by default; each waits for the apiserver's answer, so on a
// busy sandbox of 5,000 nodes it played 25 pods a second and a new pod queued minutes behind a
// bulk create. The sandbox wants them at the apiserver's pace, and its 5,000 nodes' leases renewed
// by 16 workers rather than 4. kwok does not default a configuration it is given, so the rest
// are its defaults (v0.8.0), spelled out.
const KWOK_CONFIGURATION = {
  apiVersion: 'config.kwok.x-k8s.io/v1alpha1',
  kind: 'KwokConfiguration',
  options: {
    podPlayStageParallelism: 32,
    nodeLeaseParallelism: 16,
    nodePlayStageParallelism: 4,
    podsOnNodeSyncParallelism: 1,
    manageAllNodes: false,
    enableDebuggingHandlers: true,
    enableContentionProfiling: false,
    enableProfilingHandler: true,
    enablePodsOnNodeSyncListPager: true,
    enablePodsOnNodeSyncStreamWatch: false,
  },
};

interface Process {
  binary(st: State): string;
  /** Its arguments, given the sandbox's state and folder. */
  args(st: State, dir: string): string[];
  /** The port it is known by (whose listening `down` checks): the client port or the health port. */
  port(st: State): number;
  healthy(st: State, dir: string): Promise<boolean>;
}

const pki = (dir: string, f: string) => join(dir, 'pki', f);
/** The controller-manager and the scheduler ask the apiserver who calls them, as the admin. */
const delegatedAuth = (dir: string) => [
  `--authentication-kubeconfig=${join(dir, 'kubeconfig')}`,
  `--authorization-kubeconfig=${join(dir, 'kubeconfig')}`,
];
/** The controller-manager's and the scheduler's health, on their self-signed secure ports. */
const secureHealthz = async (port: number, dir: string) =>
  (await httpsGet(`https://127.0.0.1:${port}/healthz`, join(dir, 'pki'))) === 'ok';
const registryOf = (st: State, dir: string) =>
  registryInfo(join(dir, 'registry'), join(dir, 'pki'), st.registry!.ports);

export const PROCESS: Record<ProcessName, Process> = {
  etcd: {
    binary: (st) => st.binaries.etcd,
    args: ({ ports }, dir) => [
      '--name=berth',
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=http://127.0.0.1:${ports.etcdClient}`,
      `--advertise-client-urls=http://127.0.0.1:${ports.etcdClient}`,
      `--listen-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-cluster=berth=http://127.0.0.1:${ports.etcdPeer}`,
      // A sandbox trades durability across power loss for speed; its data is disposable.
      '--unsafe-no-fsync=true',
      '--quota-backend-bytes=8589934592',
      '--log-level=warn',
    ],
    port: (st) => st.ports.etcdClient,
    healthy: async ({ ports }) =>
      (await httpRequest(`http://127.0.0.1:${ports.etcdClient}/health`)).includes('"true"'),
  },
  'kube-apiserver': {
    binary: (st) => st.binaries.kubeApiserver,
    args: ({ ports, audit, profiling, emulatedVersion, webhookClientCa }, dir) => [
      `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
      '--bind-address=127.0.0.1',
      '--advertise-address=127.0.0.1',
      // Endpoints may not be loopback addresses: nothing in the sandbox uses the kubernetes Service.
      '--endpoint-reconciler-type=none',
      `--secure-port=${ports.apiserver}`,
      `--tls-cert-file=${pki(dir, 'apiserver.crt')}`,
      `--tls-private-key-file=${pki(dir, 'apiserver.key')}`,
      `--client-ca-file=${pki(dir, 'ca.crt')}`,
      '--authorization-mode=Node,RBAC',
      `--service-cluster-ip-range=${SERVICE_CIDR}`,
      '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
      `--service-account-signing-key-file=${pki(dir, 'sa.key')}`,
      `--service-account-key-file=${pki(dir, 'sa.pub')}`,
      '--allow-privileged=true',
      ...(webhookClientCa ? [`--admission-control-config-file=${join(dir, 'admission.yaml')}`] : []),
      // Room for benchmarks with thousands of nodes on one machine.
      '--max-requests-inflight=1600',
      '--max-mutating-requests-inflight=800',
      `--profiling=${profiling ?? false}`,
      ...(emulatedVersion ? [`--emulated-version=kube=${emulatedVersion}`] : []),
      '--v=1',
      ...(audit
        ? [
            `--audit-policy-file=${join(dir, 'audit-policy.yaml')}`,
            `--audit-log-path=${auditLogPath(dir)}`,
            // Whole lines in one file: a reader never sees half an event or a rotated file.
            '--audit-log-mode=blocking',
            '--audit-log-maxsize=0',
          ]
        : []),
    ],
    port: (st) => st.ports.apiserver,
    healthy: (st, dir) => apiserverReady(serverOf(st.ports), dir),
  },
  'kube-controller-manager': {
    binary: (st) => st.binaries.kubeControllerManager,
    args: ({ ports }, dir) => [
      `--kubeconfig=${join(dir, 'kubeconfig')}`,
      ...delegatedAuth(dir),
      `--root-ca-file=${pki(dir, 'ca.crt')}`,
      `--service-account-private-key-file=${pki(dir, 'sa.key')}`,
      '--leader-elect=false',
      '--bind-address=127.0.0.1',
      `--secure-port=${ports.controllerManager}`,
      '--kube-api-qps=500',
      '--kube-api-burst=1000',
      // kwok renews node leases every 30 s (lease duration 120 s); allow for a loaded machine.
      '--node-monitor-grace-period=180s',
      '--concurrent-daemonset-syncs=5',
      '--profiling=false',
      '--v=1',
    ],
    port: (st) => st.ports.controllerManager,
    healthy: ({ ports }, dir) => secureHealthz(ports.controllerManager, dir),
  },
  'kube-scheduler': {
    binary: (st) => st.binaries.kubeScheduler,
    args: ({ ports }, dir) => [
      `--config=${join(dir, 'scheduler.yaml')}`,
      ...delegatedAuth(dir),
      '--bind-address=127.0.0.1',
      `--secure-port=${ports.scheduler}`,
      '--v=1',
    ],
    port: (st) => st.ports.scheduler,
    healthy: ({ ports }, dir) => secureHealthz(ports.scheduler, dir),
  },
  kwok: {
    binary: (st) => st.binaries.kwok,
    args: ({ ports, binaries }, dir) => [
      `--kubeconfig=${join(dir, 'kubeconfig')}`,
      ...binaries.kwokStages.map((s) => `--config=${s}`),
      // Berth's own stages (stages.ts): failed pulls and crashing containers, by image host.
      `--config=${join(dir, 'kwok-stages.yaml')}`,
      `--config=${join(dir, 'kwok.yaml')}`,
      `--manage-nodes-with-annotation-selector=${KWOK_ANNOTATION}=fake`,
      `--server-address=127.0.0.1:${ports.kwok}`,
      '--node-ip=127.0.0.1',
      '--cidr=10.0.0.1/8',
      '--node-lease-duration-seconds=120',
      '--v=WARN',
    ],
    port: (st) => st.ports.kwok,
    healthy: async ({ ports }) =>
      (await httpRequest(`http://127.0.0.1:${ports.kwok}/healthz`)).trim() === 'ok',
  },
  registry: {
    binary: (st) => st.registry?.binary ?? '',
    args: (_, dir) => ['serve', join(dir, 'registry', 'config.yml')],
    port: (st) => st.registry?.ports.registry ?? 0,
    // Token auth guards even the base endpoint: its Bearer challenge is the registry's answer.
    healthy: async (st, dir) =>
      (await httpsStatus(`${registryOf(st, dir).url}/v2/`, join(dir, 'pki'))) === 401,
  },
  'registry-token': {
    binary: (st) => st.registry?.node ?? '',
    args: (_, dir) => [TOKEN_SERVER, join(dir, 'registry')],
    port: (st) => st.registry?.ports.token ?? 0,
    healthy: async (st, dir) =>
      (await httpsStatus(
        `${registryOf(st, dir).realm.replace(/\/token$/, '/healthz')}`,
        join(dir, 'pki'),
      )) === 200,
  },
  berth: {
    binary: (st) => st.berth?.node ?? '',
    args: ({ berth, webhookClientCa }) =>
      berthRunArgs(berth!.kubeconfig, berth!.ports, berth!.args, { webhookClientCa }),
    port: (st) => st.berth?.ports.health ?? 0,
    // Ready when /readyz answers 200 (any other answer rejects).
    healthy: async ({ berth }) => {
      await httpRequest(`http://127.0.0.1:${berth!.ports.health}/readyz`);
      return true;
    },
  },
};

/** Whether process `p` of the sandbox answers its health check (an error is not healthy). */
export async function healthy(p: ProcessName, st: State, dir: string): Promise<boolean> {
  try {
    return await PROCESS[p].healthy(st, dir);
  } catch {
    return false;
  }
}
