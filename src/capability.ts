// A capability plugs its controllers (and webhooks) into the manager. `berth run` enables them by
// name; each declares its flags, the CRDs it serves and the permissions it needs, so that the
// manifests (CRDs, RBAC) are generated from the same code that runs.
import type { Option } from 'commander';
import type { CustomResource } from './runtime/api/crd.ts';
import type { KubeClient } from './runtime/client/client.ts';
import type { Manager } from './runtime/manager/manager.ts';
import type { PolicyKit } from './policy/kit.ts';
import type { KeyDeclaration } from './policy/nodes/ownership.ts';
import type { PolicyRule } from './runtime/api/rbac.ts';
import type { KubeObject } from './runtime/api/meta.ts';
import type { WebhookServer } from './runtime/webhook/admission.ts';
import type { WebhookSpec } from './runtime/webhook/registration.ts';

export interface CapabilityContext {
  manager: Manager;
  /** What the policies of this manager share: key ownership and the node-write loop breaker. */
  kit: PolicyKit;
  /** Present when the webhook server is enabled. */
  webhooks: WebhookServer | undefined;
  /** The options of `berth run`, the capability's own flags included. */
  options: Record<string, unknown>;
  /** The namespace Berth runs in: policies leave it alone unless they name it. */
  berthNamespace: string;
}

export interface Capability {
  name: string;
  description: string;
  /** Flags of `berth run` that configure this capability. */
  options?: () => Option[];
  crds: CustomResource[];
  rbac: PolicyRule[];
  /**
   * Node keys it owns (its rank among owners, its reserved domains); its controller claims the keys
   * of its live policies. Another capability's policy that would write them is Invalid. None: the
   * capability owns no key exclusively (derived labels) and yields to every owner.
   */
  keys?: KeyDeclaration;
  setup(ctx: CapabilityContext): void | Promise<void>;
  /** Admission webhooks `berth run` serves and registers; collected after setup. */
  webhooks?(ctx: CapabilityContext): WebhookSpec[];
  /** Lines for `berth explain node`: what this capability does to the node, and why. */
  explainNode?(ctx: {
    client: KubeClient;
    node: KubeObject;
    options: Record<string, unknown>;
    berthNamespace: string;
  }): Promise<string[]>;
}
