// The Kubernetes minors Berth supports, and what an apiserver's /version says against them. The
// sandbox builds each supported minor (src/sandbox/build.ts); the README's table says what each
// capability needs of them, and the Helm chart's kubeVersion says the same range.

/** The oldest and the newest minor Berth is tested on: the three upstream supports. */
export const SUPPORTED_KUBERNETES = { oldest: 35, newest: 37 } as const;

/** `1.35`: a minor of Kubernetes 1 as Berth writes it. */
export const minorName = (minor: number): string => `1.${minor}`;

/** What `GET /version` answers (the fields Berth reads). */
export interface ServerVersion {
  major?: string;
  minor?: string;
  gitVersion?: string;
}

/**
 * The major and minor an apiserver reports: from gitVersion (`v1.37.2`, `v1.36.3-eks-4a8b2c`),
 * else from major and minor, which managed clusters suffix (`"minor": "36+"`).
 */
export function parseServerVersion(v: ServerVersion): { major: number; minor: number } | undefined {
  const git = /^v?(\d+)\.(\d+)/.exec(v.gitVersion ?? '');
  if (git) return { major: Number(git[1]), minor: Number(git[2]) };
  const major = /^(\d+)/.exec(v.major ?? '');
  const minor = /^(\d+)/.exec(v.minor ?? '');
  return major && minor ? { major: Number(major[1]), minor: Number(minor[1]) } : undefined;
}

/** The range as the docs write it: `1.35 to 1.37`. */
export const supportedRange = (): string =>
  `${minorName(SUPPORTED_KUBERNETES.oldest)} to ${minorName(SUPPORTED_KUBERNETES.newest)}`;

/** Why Berth will not run against an apiserver of this version; undefined when it is supported. */
export function unsupportedReason(v: ServerVersion): string | undefined {
  const parsed = parseServerVersion(v);
  const shown = v.gitVersion || `${v.major ?? '?'}.${v.minor ?? '?'}`;
  if (!parsed) return `the apiserver reports a version Berth cannot read (${shown})`;
  const { major, minor } = parsed;
  if (major === 1 && minor >= SUPPORTED_KUBERNETES.oldest && minor <= SUPPORTED_KUBERNETES.newest)
    return undefined;
  const older = major < 1 || (major === 1 && minor < SUPPORTED_KUBERNETES.oldest);
  return (
    `the apiserver runs Kubernetes ${shown}, ${older ? 'older' : 'newer'} than Berth supports ` +
    `(${supportedRange()}; README, "Supported Kubernetes versions")`
  );
}

/** Berth asked to run against an apiserver outside SUPPORTED_KUBERNETES (known by name: cli/errors.ts). */
export class UnsupportedKubernetesError extends Error {
  override name = 'UnsupportedKubernetesError';
}
