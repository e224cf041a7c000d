// Go's path.Match (filepath.Match on Linux), ported as Go writes it: the pattern is read in chunks
// (a run of `*`, then literals, `?` and classes up to the next `*`), and each chunk is matched at
// the leftmost place it fits, never revisited. A glob has no alternation, so the leftmost fit of a
// chunk is as good as any later one, and the match costs at most pattern × name steps: no
// backtracking, whatever a pull secret's key holds (a RegExp of `*a*a*a*…b` took minutes).

/** `sep`: the character `*` and `?` never match (Go's `/`); undefined: they match any. */
export interface GlobOptions {
  sep?: string;
}

/**
 * Whether `name` matches `pattern`: `*` any run, `?` one character, `[...]` a class with `^`
 * negation and ranges, `\` escapes. A bad pattern matches nothing (Go returns ErrBadPattern, which
 * the kubelet takes as no match). Characters are Unicode code points, as Go's runes.
 */
export function globMatch(pattern: string, name: string, options: GlobOptions = {}): boolean {
  const p = [...pattern];
  const n = [...name];
  const sep = options.sep;
  let pi = 0;
  let ni = 0;
  while (pi < p.length) {
    let star = false;
    while (p[pi] === '*') {
      star = true;
      pi++;
    }
    const end = chunkEnd(p, pi);
    const chunk = p.slice(pi, end);
    pi = end;
    if (star && chunk.length === 0) return sep === undefined || !n.slice(ni).includes(sep);
    const last = pi >= p.length;
    // The chunk here, or (after a star) at each later place the star can reach.
    let found = false;
    for (let at = ni; at <= n.length; at++) {
      if (at > ni && (!star || n[at - 1] === sep)) break;
      const t = matchChunk(chunk, n, at, sep);
      if (t === 'bad') return false;
      if (t !== undefined && (!last || t === n.length)) {
        ni = t;
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  return ni === n.length;
}

/** Where the chunk starting at `i` ends: at the next `*` outside a class (an escaped one is literal). */
function chunkEnd(p: string[], i: number): number {
  let inClass = false;
  for (; i < p.length; i++) {
    if (p[i] === '\\' && i + 1 < p.length) i++;
    else if (p[i] === '[') inClass = true;
    else if (p[i] === ']') inClass = false;
    else if (p[i] === '*' && !inClass) break;
  }
  return i;
}

/**
 * Matches a chunk (no `*`) at the start of n[at..]: where the name goes on, undefined when it does
 * not match, 'bad' for a malformed pattern. The whole chunk is read even after a mismatch, so that
 * a bad pattern is always told (Go checks the rest of a pattern before answering false).
 */
function matchChunk(
  chunk: string[],
  n: string[],
  at: number,
  sep: string | undefined,
): number | 'bad' | undefined {
  let ok = true;
  let i = 0;
  let ni = at;
  while (i < chunk.length) {
    const c = chunk[i]!;
    if (c === '[') {
      const cls = readClass(chunk, i + 1);
      if (cls === undefined) return 'bad';
      i = cls.next;
      const r = n[ni];
      if (ok && r !== undefined && cls.matches(r) !== cls.negated) ni++;
      else ok = false;
    } else if (c === '?') {
      i++;
      if (ok && n[ni] !== undefined && n[ni] !== sep) ni++;
      else ok = false;
    } else {
      if (c === '\\') {
        i++;
        if (i >= chunk.length) return 'bad';
      }
      if (ok && n[ni] === chunk[i]) ni++;
      else ok = false;
      i++;
    }
  }
  return ok ? ni : undefined;
}

/**
 * A class after its `[`: undefined when malformed (empty, unclosed, `-` or `]` unescaped where a
 * character belongs). As in Go, a range whose ends are reversed is well-formed and holds nothing.
 */
function readClass(
  chunk: string[],
  start: number,
): { negated: boolean; matches: (r: string) => boolean; next: number } | undefined {
  let i = start;
  const negated = chunk[i] === '^';
  if (negated) i++;
  const ranges: Array<[number, number]> = [];
  // Go's getEsc: one character, perhaps escaped, with more of the chunk after it.
  const char = (): number | undefined => {
    let c = chunk[i];
    if (c === undefined || c === '-' || c === ']') return undefined;
    if (c === '\\') c = chunk[++i];
    i++;
    return c === undefined || i >= chunk.length ? undefined : cp(c);
  };
  while (!(chunk[i] === ']' && ranges.length > 0)) {
    const lo = char();
    if (lo === undefined) return undefined;
    let hi = lo;
    if (chunk[i] === '-') {
      i++;
      const h = char();
      if (h === undefined) return undefined;
      hi = h;
    }
    ranges.push([lo, hi]);
  }
  const matches = (r: string) => ranges.some(([lo, hi]) => lo <= cp(r) && cp(r) <= hi);
  return { negated, matches, next: i + 1 };
}

const cp = (c: string): number => c.codePointAt(0)!;
