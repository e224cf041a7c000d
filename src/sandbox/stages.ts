// kwok Stages of Berth's own, beside the ones copied from kwok's module (build.ts): a pod whose
// image lives under one of two reserved hosts shows what a kubelet would report for an image that
// cannot be pulled or a container that keeps crashing, so that controllers reading only the Pod's
// status can be tested against real Pods. They are written into the sandbox's folder and passed
// with --config, so they change no component's build.
import { stringify as toYaml } from 'yaml';

/** Images under this host fail to pull: ErrImagePull, then ImagePullBackOff; the pod stays Pending. */
export const MISSING_IMAGE_HOST = 'missing.kwok.invalid';
/** Images under this host start, exit with code 1 and restart with a growing back-off: CrashLoopBackOff. */
export const CRASH_IMAGE_HOST = 'crash.kwok.invalid';

// kwok picks among matching stages only those of positive weight when there are any: kwok's own
// pod-ready (weight 0) also matches a Pending pod that is not Ready, and must lose to these.
const WEIGHT = 100;

/** A jq key that yields true for each container whose image is under `host`. */
const imageUnder = (host: string) => `.spec.containers.[] | .image | startswith("${host}/")`;
/** A jq key that yields the state (running, terminated, waiting) of each container under `host`. */
const stateUnder = (host: string) =>
  `.status.containerStatuses.[]? | select(.image | startswith("${host}/")) | .state | keys | .[0]`;
/** A jq key that yields the waiting reason of each container under `host`. */
const waitingUnder = (host: string) =>
  `.status.containerStatuses.[]? | select(.image | startswith("${host}/")) | .state.waiting.reason`;

const notDeleted = { key: '.metadata.deletionTimestamp', operator: 'DoesNotExist' };
const under = (host: string) => ({ key: imageUnder(host), operator: 'In', values: ['true'] });

// Go templates (kwok's renderer with sprig) over the Pod as JSON. Containers not under the host run
// and are ready, as the kubelet starts every container whose image it has.
const podAddresses = `
{{ $hostIPs := NodeIPsWith .spec.nodeName }}
{{ with $hostIPs }}
hostIP: {{ index . 0 | Quote }}
hostIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
{{ $podIPs := PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
{{ with $podIPs }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
startTime: {{ $now | Quote }}`;

/** The first status of a pod bound to a node: containers under `host` get `state`, the others run. */
const firstStatus = (host: string, phase: string, state: string) => `
{{ $now := Now }}
{{ $unready := list }}
{{ range .spec.containers }}{{ if hasPrefix "${host}/" .image }}{{ $unready = append $unready .name }}{{ end }}{{ end }}
{{ $why := printf "containers with unready status: [%s]" ( join " " $unready ) }}
conditions:
- { type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }} }
- { type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }} }
- { type: Ready, status: "False", reason: ContainersNotReady, message: {{ $why | Quote }}, lastTransitionTime: {{ $now | Quote }} }
- { type: ContainersReady, status: "False", reason: ContainersNotReady, message: {{ $why | Quote }}, lastTransitionTime: {{ $now | Quote }} }
containerStatuses:
{{ range .spec.containers }}
{{ if hasPrefix "${host}/" .image }}
- { name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, restartCount: 0, ${state} }
{{ else }}
- { name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, started: true, restartCount: 0, state: { running: { startedAt: {{ $now | Quote }} } } }
{{ end }}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
- { name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0, state: { terminated: { exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }} } } }
{{ end }}
phase: ${phase}
${podAddresses}`;

/**
 * A later status: every container status is kept as it is, except those under `host` in state
 * `from`, which `next` (a sprig expression over the status `$s`, returning the new status) replaces.
 * containerStatuses has no merge key, so the patch carries the whole list.
 */
const nextStatus = (host: string, from: string, next: string) => `
{{ $now := Now }}
{{ $pod := . }}
containerStatuses:
{{ range .status.containerStatuses }}
{{ if and ( hasPrefix "${host}/" .image ) ( hasKey .state "${from}" ) }}
{{ $s := deepCopy . }}
- {{ ${next} | toJson }}
{{ else }}
- {{ toJson . }}
{{ end }}
{{ end }}`;

interface StageStep {
  patch?: { subresource: 'status'; root: 'status'; template: string };
  event?: { type: 'Normal' | 'Warning'; reason: string; message: string };
}

const stage = (
  name: string,
  matchExpressions: object[],
  steps: StageStep[],
  delay?: { durationMilliseconds: number; durationFrom?: { jq: { expression: string } } },
) => ({
  apiVersion: 'kwok.x-k8s.io/v1alpha1',
  kind: 'Stage',
  metadata: { name },
  spec: {
    resourceRef: { apiGroup: 'v1', kind: 'Pod' },
    selector: { matchExpressions: [notDeleted, ...matchExpressions] },
    weight: WEIGHT,
    ...(delay ? { delay } : {}),
    steps,
  },
});

const status = (template: string): StageStep => ({
  patch: { subresource: 'status', root: 'status', template: template.trim() },
});

const M = MISSING_IMAGE_HOST;
const C = CRASH_IMAGE_HOST;

export const berthStages = [
  // The pull fails at once; the kubelet then backs off, reporting ImagePullBackOff with the last
  // pull's error (kubelet 1.35's message).
  stage(
    'berth-image-pull-error',
    [
      under(M),
      { key: '.status.phase', operator: 'In', values: ['Pending'] },
      { key: stateUnder(M), operator: 'DoesNotExist' },
    ],
    [
      status(
        firstStatus(
          M,
          'Pending',
          `state: { waiting: { reason: ErrImagePull, message: {{ printf "failed to pull and unpack image %q: %s: not found" .image .image | Quote }} } }`,
        ),
      ),
      { event: { type: 'Warning', reason: 'Failed', message: 'Error: ErrImagePull' } },
    ],
  ),
  stage(
    'berth-image-pull-backoff',
    [under(M), { key: waitingUnder(M), operator: 'In', values: ['ErrImagePull'] }],
    [
      status(
        nextStatus(
          M,
          'waiting',
          `set $s "state" ( dict "waiting" ( dict "reason" "ImagePullBackOff" "message" ( printf "Back-off pulling image %q: ErrImagePull: failed to pull and unpack image %q: %s: not found" .image .image .image ) ) )`,
        ),
      ),
      { event: { type: 'Normal', reason: 'BackOff', message: 'Back-off pulling image' } },
    ],
    { durationMilliseconds: 1000 },
  ),
  // Stays in ImagePullBackOff: matching (and winning over pod-ready) without writing anything.
  stage(
    'berth-image-pull-backoff-hold',
    [under(M), { key: waitingUnder(M), operator: 'In', values: ['ImagePullBackOff'] }],
    [],
  ),
  // The container starts (never ready: it exits before any readiness could pass) ...
  stage(
    'berth-crash-start',
    [under(C), { key: '.status.phase', operator: 'In', values: ['Pending'] }],
    [
      status(
        firstStatus(C, 'Running', `started: true, state: { running: { startedAt: {{ $now | Quote }} } }`),
      ),
    ],
  ),
  // ... exits with code 1 a second later ...
  stage(
    'berth-crash-exit',
    [under(C), { key: stateUnder(C), operator: 'In', values: ['running'] }],
    [
      status(
        nextStatus(
          C,
          'running',
          `set ( set $s "started" false ) "state" ( dict "terminated" ( dict "exitCode" 1 "reason" "Error" "startedAt" $s.state.running.startedAt "finishedAt" $now ) )`,
        ),
      ),
    ],
    { durationMilliseconds: 1000 },
  ),
  // ... the kubelet backs off ...
  stage(
    'berth-crash-backoff',
    [under(C), { key: stateUnder(C), operator: 'In', values: ['terminated'] }],
    [
      status(
        nextStatus(
          C,
          'terminated',
          `set ( set $s "lastState" $s.state ) "state" ( dict "waiting" ( dict "reason" "CrashLoopBackOff" "message" ( printf "back-off restarting failed container=%s pod=%s_%s(%s)" .name $pod.metadata.name $pod.metadata.namespace $pod.metadata.uid ) ) )`,
        ),
      ),
      { event: { type: 'Warning', reason: 'BackOff', message: 'Back-off restarting failed container' } },
    ],
  ),
  // ... and restarts it after 1, 2, 4, 8, 16, then 30 s (the kubelet's 10 s doubling to 5 min, at a tenth).
  stage(
    'berth-crash-restart',
    [under(C), { key: stateUnder(C), operator: 'In', values: ['waiting'] }],
    [
      status(
        nextStatus(
          C,
          'waiting',
          `set ( set ( set $s "started" true ) "restartCount" ( add1 $s.restartCount ) ) "state" ( dict "running" ( dict "startedAt" $now ) )`,
        ),
      ),
    ],
    {
      durationMilliseconds: 1000,
      durationFrom: {
        jq: {
          expression: `[.status.containerStatuses.[]? | select(.image | startswith("${C}/")) | .restartCount] | min | [1, 2, 4, 8, 16, 30][[., 5] | min] | "\\(.)s"`,
        },
      },
    },
  ),
];

/** The stages as one multi-document YAML file for kwok's --config. */
export const stagesYaml = (): string =>
  berthStages.map((s) => toYaml(s, { blockQuote: 'literal', lineWidth: 0 })).join('---\n');
