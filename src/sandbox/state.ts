// What a sandbox records of itself in its state.json: its ports, processes, binaries and the
// optional parts it runs (a registry, a Berth, the cells of a federation).
import type { BerthPorts } from './berth.ts';
import type { Binaries } from './build.ts';
import type { RegistryPorts } from './registry.ts';

export const PROCESSES = [
  'etcd',
  'kube-apiserver',
  'kube-controller-manager',
  'kube-scheduler',
  'kwok',
] as const;
/** The registry's processes, started only when asked for (`up({ registry: true })`), token service first. */
export const REGISTRY_PROCESSES = ['registry-token', 'registry'] as const;
/** Berth itself, started only when asked for (`startBerth`, a federation's cells); stopped first. */
export const BERTH_PROCESS = 'berth' as const;
export type ProcessName =
  (typeof PROCESSES)[number] | (typeof REGISTRY_PROCESSES)[number] | typeof BERTH_PROCESS;

export interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
  controllerManager: number;
  scheduler: number;
  kwok: number;
}

export interface State {
  name: string;
  kubernetesVersion: string;
  ports: Ports;
  pids: Partial<Record<ProcessName, number>>;
  binaries: Binaries;
  startedAt: string;
  registry?: { ports: RegistryPorts; binary: string; node: string };
  /** kube-apiserver writes an audit log (`up({ audit: true })`). */
  audit?: boolean;
  /** kube-apiserver serves /debug/pprof (`up({ profiling: true })`). */
  profiling?: boolean;
  /** kube-apiserver emulates this older minor (`up({ emulatedVersion: '1.34' })`). */
  emulatedVersion?: string;
  /** The Berth this sandbox runs (`startBerth`): node, its identity's kubeconfig, ports, its own flags. */
  berth?: { node: string; kubeconfig: string; ports: BerthPorts; args: string[] };
  /** The sandboxes this one is the management plane of, by city (a federation, federation.ts). */
  cells?: CellSandbox[];
  /**
   * The CA of the client certificate kube-apiserver presents to webhooks: set when it was started
   * presenting one (a sandbox started before it did presents none until it starts again).
   */
  webhookClientCa?: string;
}

/** A cell of a federation: the city it serves and the sandbox that runs it. */
export interface CellSandbox {
  city: string;
  sandbox: string;
}
