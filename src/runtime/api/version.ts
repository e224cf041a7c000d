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
  /** Set by an apiserver run with `--emulated-version` (KEP-4330): the APIs and features it serves. */
  emulationMajor?: string;
  emulationMinor?: string;
}

const leadingNumber = (s: string | undefined): number | undefined => {
  const m = /^(\d+)/.exec(s ?? '');
  return m ? Number(m[1]) : undefined;
};

/** The emulated major and minor, when the apiserver says it emulates an older Kubernetes. */
function emulated(v: ServerVersion): { major: number; minor: number } | undefined {
  const major = leadingNumber(v.emulationMajor);
  const minor = leadingNumber(v.emulationMinor);
  return major !== undefined && minor !== undefined ? { major, minor } : undefined;
}

/**
 * The major and minor whose APIs an apiserver serves: the one it emulates (`--emulated-version`: a
 * 1.37 binary emulating 1.34 serves 1.34's APIs and features), else from gitVersion (`v1.37.2`,
 * `v1.36.3-eks-4a8b2c`), else from major and minor, which managed clusters suffix (`"minor": "36+"`).
 */
export function parseServerVersion(v: ServerVersion): { major: number; minor: number } | undefined {
  const emulation = emulated(v);
  if (emulation) return emulation;
  const git = /^v?(\d+)\.(\d+)/.exec(v.gitVersion ?? '');
  if (git) return { major: Number(git[1]), minor: Number(git[2]) };
  const major = leadingNumber(v.major);
  const minor = leadingNumber(v.minor);
  return major !== undefined && minor !== undefined ? { major, minor } : undefined;
}

/** How the docs and errors name what an apiserver runs: `v1.37.2`, or `1.34 (emulated by v1.37.2)`. */
function shownVersion(v: ServerVersion): string {
  const binary = v.gitVersion || `${v.major ?? '?'}.${v.minor ?? '?'}`;
  const emulation = emulated(v);
  return emulation ? `${emulation.major}.${emulation.minor} (emulated by ${binary})` : binary;
}

/** The range as the docs write it: `1.35 to 1.37`. */
export const supportedRange = (): string =>
  `${minorName(SUPPORTED_KUBERNETES.oldest)} to ${minorName(SUPPORTED_KUBERNETES.newest)}`;

/** Why Berth will not run against an apiserver of this version; undefined when it is supported. */
export function unsupportedReason(v: ServerVersion): string | undefined {
  const parsed = parseServerVersion(v);
  const shown = shownVersion(v);
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
