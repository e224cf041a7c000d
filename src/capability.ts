// The contract between `berth` and a capability. A capability states only what is its own: its flags,
// its CRDs and permissions, the node keys it owns, its CLI commands, where it runs, and a setup that
// builds its controllers and returns what they serve. Manifests (CRDs, RBAC) are generated from the
// same declarations that run. The list of capabilities is beside this file (capabilities.ts).
import { InvalidArgumentError, Option, type Command } from 'commander';
import { commaList } from './command/flags.ts';
import type { PolicyKit } from './policy/kit.ts';
import { KeyOwnership, type KeyClaim, type KeyDeclaration } from './policy/nodes/ownership.ts';
import type { CustomResource } from './runtime/api/crd.ts';
import type { KubeObject, ResourceRef } from './runtime/api/meta.ts';
import type { DeclaredRule } from './runtime/api/rbac.ts';
import type { KubeClient } from './runtime/client/client.ts';
import type { Manager } from './runtime/manager/manager.ts';
import type { WebhookSpec } from './runtime/webhook/registration.ts';
import type { Focus, Said } from './policy/explain.ts';
import type { PlanContext, PlanPart } from './policy/plan.ts';
import { keepAnnotations, type CachedAnnotation, type SlimNode, type SlimPod } from './policy/slim.ts';
import type { Informer } from './runtime/cache/informer.ts';
import type { InformerRequest } from './runtime/cluster/cluster.ts';
import type { CellWorkload, CityRow, Derived, GateRow, WorkloadRow } from './ui/types.ts';

/**
 * Where a capability runs: in the one cluster whose nodes it places on (`cluster`), in the management
 * plane that fans policies out to cells (`management`), or in a cell that runs what the management
 * plane sent (`cell`). Manifests and RBAC are generated per role.
 */
export type Role = 'cluster' | 'management' | 'cell';

export interface CapabilityContext {
  manager: Manager;
  /** What the policies of this manager share: key ownership and the node-write loop breaker. */
  kit: PolicyKit;
  /** The options of `berth run`, the capability's own flags included. */
  options: Record<string, unknown>;
  /** The namespace Berth runs in: policies leave it alone unless they name it. */
  berthNamespace: string;
}

/** What a capability's setup serves besides its controllers (which it adds to the manager itself). */
export interface Served {
  /** Admission webhooks `berth run` serves and registers. */
  webhooks?: WebhookSpec[];
}

/** What `berth explain` gives a capability: the object asked about, and the flags Berth runs with. */
export interface ExplainContext {
  client: KubeClient;
  object: KubeObject;
  options: Record<string, unknown>;
  berthNamespace: string;
  /**
   * Who owns which node keys, as a running Berth finds it (clusterKeyOwnership): read from the API
   * once per explanation, when first asked for. A policy that would write a key another capability
   * owns is refused by its controller, so explain must say so too.
   */
  keys?: () => Promise<KeyOwnership>;
  /** The one node or pod asked about (`--node`, `--pod`), for a policy kind. */
  focus?: Focus;
}

/** What a capability's commands may ask of the others. */
export interface CommandContext {
  /** What a management plane does in each cell: every capability's cellRbac (cellRules). */
  cellRules(): DeclaredRule[];
}

/** What `berth uninstall` gives a capability. */
export interface UninstallContext {
  client: KubeClient;
  /** Berth's namespace. */
  namespace: string;
  /** Says what changed (or, in a dry run, would change), one line each. */
  say: (line: string) => void;
  dryRun: boolean;
  /** The CRDs and Berth's objects stay for a later install (`--keep-crds`): what they refer to stays too. */
  keepCrds: boolean;
}

/** A kind of the capability's own that `berth explain <name> NAMESPACE/NAME` explains. */
export interface ExplainKind {
  /** The subcommand: the kind's singular name in lower case (`instance`). */
  name: string;
  aliases?: string[];
  resource: ResourceRef;
  description: string;
  /** What it acts on: `--node` or `--pod` asks about one of them. */
  subjects?: keyof Focus;
  /** Show its status conditions (with since-when) and counts as they are. */
  status?: true;
  explain(ctx: ExplainContext): Promise<Said>;
}

/** A section of the page, which a change of cached objects may alter. */
export type PageSection = 'nodes' | 'policies' | 'pods' | 'workloads';

/** How the page caches one of a capability's kinds (PageHooks.kinds). */
export interface PageKind {
  /** The informer's request when a controller caches the kind otherwise: one cache serves both. */
  cache?: InformerRequest<KubeObject>;
  /** The sections a change of its objects may alter; a policy's by default: policies, nodes and pods. */
  sections?: PageSection[];
  /** Not a row of the policies list (Instances: each under its WorkloadDeployment). */
  unlisted?: true;
}

/** What the page gives a capability's view: its caches, made by the page on the manager. */
export interface PageContext {
  /** The page's informer of one of the capability's kinds (its CRD or its ref). */
  informer(of: { kind: string }): Informer<KubeObject>;
  /** The pods on a node, from the pod informer every capability shares. */
  podsOn(node: string): SlimPod[];
}

/** What a capability shows on the page, read from its caches when the page asks (PageHooks.view). */
export interface PageView {
  /** Its gates that select the node, with their standing and what the node waits for. */
  nodeGates?(node: SlimNode, now: number): GateRow[];
  /** Whether a pod's change may alter a node's row now (a gate's requirements read pods). */
  readsPods?(): boolean;
  /** Where the keys its field manager owns on a node come from: a rule's name, asked key by key. */
  keySource?: {
    fieldManager: string;
    of(node: SlimNode): (kind: Derived['kind'], key: string) => string | undefined;
  };
  /** What it says of a pod its scheduling gate holds, by gate name. */
  heldPods?: Record<string, (pod: SlimPod) => string>;
  /** Its rows of the workloads section. */
  workloads?(): WorkloadRow[];
  /** Its objects that run in this cluster, counted in the workloads section. */
  localInstances?(): number;
  /** Its objects' shares per cell (cell name → shares), shown under each cell of the map. */
  cellShares?(): Map<string, CellWorkload[]>;
  /** The map of cells by city, each cell with the shares the views gave (cellShares). */
  cities?(shares: Map<string, CellWorkload[]>): CityRow[];
}

/** What the page (`berth ui`, `berth run --ui-bind-address`) reads of a capability. */
export interface PageHooks {
  /** Its kinds the page caches otherwise than as a policy, by kind name. */
  kinds?: Record<string, PageKind>;
  view(ctx: PageContext): PageView;
}

/**
 * A capability as every `berth` command reads it, for every capability: its name, flags, CRDs,
 * permissions and keys. What runs (setup, explain, plan, the page, commands, uninstall) is a member
 * that imports its module (setup.ts, explain.ts, plan.ts, view.ts, cli.ts) when called: a Berth
 * that does not run a capability holds only this descriptor of it.
 */
export interface Capability {
  name: string;
  description: string;
  /** The roles it runs in. */
  roles: Role[];
  /** Flags of `berth run` that configure this capability. */
  options?: () => Option[];
  /** Its kinds (types.ts): what names them is known without building their schemas. */
  kinds: ResourceRef[];
  /**
   * Its CRDs, built from their zod schemas (crd.ts) when a command installs or prints them: a
   * command that does not, and a Berth that does not run the capability, builds none of them.
   */
  crds(): Promise<CustomResource[]>;
  /**
   * Of its kinds, those only a namespace's `admin` writes (a budget, as Kubernetes' ResourceQuota is
   * not the `edit` role's to change): the aggregated `edit` role reads them, `admin` writes them.
   */
  adminKinds?: ResourceRef[];
  /** The rules its controllers need (`why` on a grant a run may not exercise: see DeclaredRule). */
  rbac: DeclaredRule[];
  /** Permissions it needs only in Berth's own namespace (a Role there), such as reading its Secrets. */
  namespaceRbac?: DeclaredRule[];
  /**
   * Permissions it needs in users' namespaces, granted only in those the install names
   * (RbacOptions.pullSecretNamespaces; `*` for all): reading the Secrets pods there name.
   */
  userNamespaceRbac?: DeclaredRule[];
  /**
   * Permissions it needs in the namespaces that run workloads, granted only in those the install
   * names (RbacOptions.workloadNamespaces; `*` for all): writing Pods, which run as any
   * ServiceAccount of their namespace, and creating the Instances that make them.
   */
  workloadNamespaceRbac?: DeclaredRule[];
  /**
   * What a management plane running it does in each cell, with the cell's kubeconfig: the role
   * that kubeconfig needs there (`berth manifests --cell`), and what `berth cells join` compares
   * the kubeconfig's grants with.
   */
  cellRbac?: DeclaredRule[];
  /**
   * Node keys it owns (its rank among owners, its reserved domains); its controller claims the keys
   * of its live policies. Another capability's policy that would write them is Invalid. None: the
   * capability owns no key exclusively (derived labels) and yields to every owner.
   */
  keys?: KeyDeclaration;
  /**
   * The annotations its controllers read from cached pods and the other objects tenants write
   * (owners, namespaces, events): the slim caches keep only those every capability declares
   * (policy/slim.ts; nodes keep all theirs).
   */
  annotations?: CachedAnnotation[];
  /**
   * The live claims of its policies as listed from the API, the same its controller keeps on
   * `kit.keys`, for `berth explain` (which has no controller). `keys` already holds the claims of
   * the capabilities that outrank it: a policy whose keys they own claims nothing.
   */
  keyClaims?(client: KubeClient, keys: KeyOwnership): Promise<KeyClaim[]>;
  /** Its own `berth` subcommands (dry runs, helpers), loaded when `berth` runs one of them. */
  commands?: (ctx: CommandContext) => Promise<Command[]>;
  /** Builds its controllers on the manager; returns what they serve. */
  setup(ctx: CapabilityContext): Served | Promise<Served>;
  /** Lines for `berth explain pod`: what this capability does (or will do) to the pod, and why. */
  explainPod?(ctx: ExplainContext): Promise<string[]>;
  /** Lines for `berth explain node`: what this capability does to the node, and why. */
  explainNode?(ctx: ExplainContext): Promise<string[]>;
  /** `berth plan` of its kinds, by kind name: what applying (or deleting) these objects would do. */
  plan?: Record<string, (ctx: PlanContext) => Promise<PlanPart>>;
  /**
   * Kinds of its `plan` planned even when the change holds no object of them, because a flag of
   * `berth plan` names local files of them (labels: k8s-auto-labeller rule files, `--rule-file`).
   */
  planFromFlags?(options: Record<string, unknown>): string[];
  /** Its own kinds `berth explain` explains. */
  explainKinds?: ExplainKind[];
  /**
   * What the page shows of it besides its policies' rows (counts, conditions), which every kind
   * gets: loaded when the page starts, for the capabilities it shows.
   */
  page?: () => Promise<PageHooks>;
  /**
   * `berth uninstall`, run once Berth is gone and no object of Berth's kinds is left: takes off what the
   * capability still has on other objects (keys its controllers had not pruned yet when Berth stopped,
   * records on pods). Its finalizers have released the rest while Berth ran.
   */
  uninstall?(ctx: UninstallContext): Promise<void>;
}

/**
 * Who owns which node keys, read from the API as a Berth running `controllers` finds them: every
 * capability's declaration (`berth run` makes them all, enabled or not), then the live claims of
 * the running ones, in rank order, since what a capability claims depends on what outranks it.
 */
export async function clusterKeyOwnership(
  all: Capability[],
  client: KubeClient,
  controllers: readonly string[],
): Promise<KeyOwnership> {
  const keys = new KeyOwnership();
  for (const c of all) if (c.keys) keys.declare(c.name, c.keys);
  const claiming = all
    .filter((c) => c.keys && c.keyClaims && controllers.includes(c.name))
    .sort((a, b) => a.keys!.rank - b.keys!.rank);
  for (const c of claiming) keys.claim(c.name, await c.keyClaims!(client, keys));
  return keys;
}

/** The capabilities, once the slim caches keep the annotations they declare (Capability.annotations). */
export function declaringAnnotations(all: Capability[]): Capability[] {
  keepAnnotations(all.flatMap((c) => c.annotations ?? []));
  return all;
}

/** The capabilities a cluster runs when `--controllers` is not given; a management plane names its own. */
export const clusterControllers = (all: Capability[]): string[] =>
  all.filter((c) => c.roles.includes('cluster')).map((c) => c.name);

/**
 * `--controllers`: the capabilities `berth run` runs. The dry runs (explain, plan) take it
 * too, so that they count the key claims of exactly the capabilities that Berth runs.
 */
export function controllersOption(
  all: Capability[],
  description: string,
  defaults = clusterControllers(all),
): Option {
  const names = all.map((c) => c.name);
  // A list flag as every list flag (listOption): repeatable, comma-separated.
  return new Option(
    '--controllers <names>',
    `${description} (${names.join(', ')}; repeat the flag, or separate with commas)`,
  )
    .default(defaults, defaults.join(','))
    .argParser((v, previous: string[]) => {
      const named = (previous === defaults ? [] : previous).concat(commaList(v));
      const unknown = named.filter((n) => !names.includes(n));
      if (unknown.length)
        throw new InvalidArgumentError(
          `unknown controllers: ${unknown.join(', ')} (known: ${names.join(', ')})`,
        );
      return named;
    });
}

/** `--controllers` of the read-only commands: the capabilities of the Berth they are run against. */
export const dryRunControllersOption = (all: Capability[]): Option =>
  controllersOption(all, 'the controllers Berth runs with: only their policies claim keys');

/** --controllers of a dry run's options (controllersOption); a cluster's when the command has none. */
export const controllersOf = (all: Capability[], options: Record<string, unknown>): string[] =>
  (options['controllers'] as string[] | undefined) ?? clusterControllers(all);

/** The capabilities of `--controllers` (controllersOf), in `all`'s order. */
export const runningCapabilities = (all: Capability[], options: Record<string, unknown>): Capability[] => {
  const names = controllersOf(all, options);
  return all.filter((c) => names.includes(c.name));
};

/** What a management plane running `caps` does in each cell, with the cell's kubeconfig. */
export const cellRules = (caps: Capability[]): DeclaredRule[] => caps.flatMap((c) => c.cellRbac ?? []);

/** Every capability's own `berth` subcommands, each given what it may ask of the others. */
export async function capabilityCommands(all: Capability[]): Promise<Command[]> {
  const ctx: CommandContext = {
    cellRules: () => cellRules(all),
  };
  return (await Promise.all(all.map((c) => c.commands?.(ctx) ?? []))).flat();
}

/** The page hooks of the capabilities the page shows (Capability.page), loaded, by capability name. */
export async function capabilityPages(shown: Capability[]): Promise<Map<string, PageHooks>> {
  const loaded = await Promise.all(shown.map(async (c) => [c.name, await c.page?.()] as const));
  return new Map(loaded.flatMap(([name, page]) => (page ? [[name, page] as const] : [])));
}
