// `berth install` and `berth run` read the apiserver's /version once, before writing anything, and
// refuse a Kubernetes outside the supported range (runtime/api/version.ts) unless told to go on.
import { Option } from 'commander';
import type { KubeClient } from '../runtime/client/client.ts';
import {
  supportedRange,
  unsupportedReason,
  UnsupportedKubernetesError,
  type ServerVersion,
} from '../runtime/api/version.ts';

export const allowUnsupportedOption = (): Option =>
  new Option(
    '--allow-unsupported-kubernetes',
    `go on against an apiserver outside the Kubernetes versions Berth is tested on (${supportedRange()}), with a warning`,
  ).default(false);

/**
 * The apiserver's version, checked: throws UnsupportedKubernetesError outside the range, or warns
 * (`warn`) when `allow`. The request's own failure (no cluster, refused) is the caller's.
 */
export async function checkKubernetesVersion(
  client: KubeClient,
  allow: boolean,
  warn: (s: string) => void,
): Promise<ServerVersion> {
  const v = await client.request<ServerVersion>('GET', '/version');
  const reason = unsupportedReason(v);
  if (reason && !allow)
    throw new UnsupportedKubernetesError(`${reason}: add --allow-unsupported-kubernetes to go on regardless`);
  if (reason) warn(`${reason}; going on (--allow-unsupported-kubernetes)`);
  return v;
}
