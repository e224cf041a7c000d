// Architecture-aware placement's pure decisions: how long a pod's review may wait at admission for
// the controller to read its new images, and which of them to ask for. No I/O: webhook.ts acts.
import type { PodImage } from './images.ts';

/**
 * Of the 2 s the apiserver gives a Berth pod webhook, what a review may spend waiting, for a new
 * namespace (NAMESPACE_WAIT_MS) and then for new images together: the rest is the round trip's.
 */
export const ADMISSION_BUDGET_MS = 1500;
/**
 * An image the controller did not read by its deadline is not waited for again for this long: a
 * registry that is slow costs the pods after it no wait (they are gated, as without one). One whose
 * read failed is in the state (`failed`) for as long, and ends the waits for it at once.
 */
export const INSPECT_MISS_MS = 30_000;
/** The wait of one review for its images not known yet. */
export interface ImageWait {
  /** When the images asked now were asked. */
  at: number;
  /** The images noted as asked now: never asked, or missed INSPECT_MISS_MS ago or more. */
  ask: PodImage[];
  /** The images the controller is hinted to read: those asked now, and every one pulled Always. */
  hinted: PodImage[];
  /** How long the review may wait (ms; 0 or less: not at all). */
  waitFor: number;
}

/**
 * The wait for `unknown` images: until the earliest of their deadlines (INSPECT_WAIT_MS from when
 * each was first asked: the pods that come meanwhile wait for the same one), within the review's
 * budget. A tag pulled Always is hinted for every pod: each needs a read answered since it came (the
 * controller's reads of one image share one request while it runs).
 */
export function imageWait(o: {
  unknown: readonly PodImage[];
  asked: ReadonlyMap<string, number>;
  now: number;
  arrived: number;
  waitMs: number;
}): ImageWait {
  const t = o.now;
  const ask = o.unknown.filter((i) => t - (o.asked.get(i.image) ?? -Infinity) >= INSPECT_MISS_MS);
  // The pod is placed only once all are known.
  const deadline = Math.min(
    ...o.unknown.map((i) => (ask.includes(i) ? t : o.asked.get(i.image)!) + o.waitMs),
  );
  return {
    at: t,
    ask,
    hinted: o.unknown.filter((i) => i.revalidate || ask.includes(i)),
    waitFor: Math.min(deadline, o.arrived + ADMISSION_BUDGET_MS) - t,
  };
}
