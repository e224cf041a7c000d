// User text in messages: bounded and escaped, so that a runaway or hostile value cannot make a
// runaway message or forge log lines. Every capability quotes what its users wrote through these.

/** Most characters of user text a message quotes. */
export const QUOTE_MAX = 64;

// C0 and C1 controls, DEL, line and paragraph separators, and bidirectional overrides (which can
// make a log line read differently from what it holds).
// eslint-disable-next-line no-control-regex -- finding control characters is the point
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const hex = (c: string): string => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** User text for a message: a JSON string of at most `max` characters of it, control characters escaped. */
export function quote(s: string, max = QUOTE_MAX): string {
  const cut = s.length > max ? `${s.slice(0, max)}…` : s;
  return JSON.stringify(cut).replace(UNSAFE, hex);
}

/**
 * `s` with control characters escaped but no quotes added, cut to `max` characters: for paths and
 * names in messages, and what another cluster says (a cell's version) where a terminal shows it.
 */
export const escapeControl = (s: string, max = Infinity): string =>
  (s.length > max ? `${s.slice(0, max)}…` : s).replace(UNSAFE, hex);
