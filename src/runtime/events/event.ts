// The Event object (events.k8s.io/v1) and the pure helpers that name, key and bound it.
import type { KubeObject } from '../api/meta.ts';

export type EventType = 'Normal' | 'Warning';

export interface ObjectReference {
  apiVersion?: string;
  kind?: string;
  name: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
}

export interface EventSeries {
  count: number;
  lastObservedTime: string;
}

/** The fields of an events.k8s.io/v1 Event that Berth writes. */
export interface EventFields {
  eventTime: string;
  series?: EventSeries;
  reportingController: string;
  reportingInstance: string;
  action: string;
  reason: string;
  note: string;
  type: EventType;
  regarding: ObjectReference;
  related?: ObjectReference;
}

export type Event = KubeObject & EventFields;

/** The apiserver rejects longer notes. */
export const noteMaxBytes = 1024;

/** Cuts `note` to at most `maxBytes` of UTF-8 without splitting a character. */
export function truncateNote(note: string, maxBytes = noteMaxBytes): string {
  const bytes = Buffer.from(note, 'utf8');
  if (bytes.length <= maxBytes) return note;
  let end = maxBytes;
  // Back up over continuation bytes (10xxxxxx) to the start of the character that straddles the cut.
  while (end > 0 && (bytes[end]! & 0xc0) === 0x80) end--;
  return bytes.subarray(0, end).toString('utf8');
}

export function toReference(obj: KubeObject | ObjectReference): ObjectReference {
  if (!('metadata' in obj) || !obj.metadata) return obj as ObjectReference;
  const m = obj.metadata;
  const ref: ObjectReference = { apiVersion: obj.apiVersion, kind: obj.kind, name: m.name ?? '' };
  if (m.namespace) ref.namespace = m.namespace;
  if (m.uid) ref.uid = m.uid;
  if (m.resourceVersion) ref.resourceVersion = m.resourceVersion;
  return ref;
}

/** Identifies the object an event is about (not its version): the spam filter's key. */
export const objectKey = (ref: ObjectReference): string =>
  JSON.stringify([ref.apiVersion ?? '', ref.kind ?? '', ref.namespace ?? '', ref.name, ref.uid ?? '']);

/** Events with equal keys are isomorphic: occurrences of one series, recorded as one Event. */
export function seriesKey(e: {
  regarding: ObjectReference;
  related?: ObjectReference | undefined;
  type: string;
  reason: string;
  action: string;
  note: string;
  reportingController: string;
}): string {
  return JSON.stringify([
    objectKey(e.regarding),
    e.related ? objectKey(e.related) : '',
    e.type,
    e.reason,
    e.action,
    e.note,
    e.reportingController,
  ]);
}

/**
 * The name prefix for an Event about an object named `name`: Event names must be lowercase RFC
 * 1123 subdomains, which not every object name is (e.g. ClusterRole "system:node").
 */
export function eventNamePrefix(name: string): string {
  const labels = name
    .toLowerCase()
    .replace(/[^a-z0-9.-]/g, '-')
    .split('.')
    .map((l) => l.replace(/^-+|-+$/g, ''))
    .filter(Boolean);
  // Room for '.' and a 16-digit suffix within the 253 characters of a subdomain.
  return (
    labels
      .join('.')
      .slice(0, 236)
      .replace(/[-.]+$/, '') || 'event'
  );
}
