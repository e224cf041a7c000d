// Bounded RE2 programs for InRegexp: RE2 semantics as Kubernetes and node-feature-discovery match
// (no backreferences, no lookaround, linear time), a bound on each program and on all of one rule's,
// and each expression's programs compiled once and kept with it.
import { createRequire } from 'node:module';
import type { RE2JS } from 're2js';
import { escapeControl, quote } from '../text.ts';
import type { MatchExpression } from './requirement.ts';

/**
 * The most RE2 instructions one InRegexp value, and all of a rule's together, may compile to.
 * Within these, RE2's DFA keeps its states for a 1024-character input, so a match costs
 * microseconds once warm and tens of milliseconds cold; a larger program (`\pL{990}`) makes it
 * fall back to the NFA: half a second per match.
 */
export const REGEXP_PROGRAM_MAX = 250;
export const RULE_REGEXP_PROGRAM_MAX = 1000;

/**
 * An upper bound on the RE2 program size of a pattern, without compiling it (compiling is linear
 * in the program, which counted repetition can make ~150 times the pattern's length: seconds for
 * the JavaScript RE2). Every character counts once; a group counts its branches; a repetition
 * counts its operand once per allowed copy. Over-counting only moves a pattern towards the limit.
 * One scan (long: every syntax case moves the same cursor and group stack, so they stay in one loop).
 */
export function programSizeBound(pattern: string): number {
  interface Level {
    done: number; // branches closed by `|`
    branch: number; // the open branch
    last: number; // the size of the branch's last atom, which a repetition multiplies
  }
  const stack: Level[] = [];
  let cur: Level = { done: 0, branch: 0, last: 0 };
  const atom = (size: number) => {
    cur.branch += size;
    cur.last = size;
  };
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '\\' && pattern[i + 1] === 'Q') {
      // \Q…\E quotes literally: one instruction per character, no syntax inside.
      const end = pattern.indexOf('\\E', i + 2);
      const stop = end < 0 ? pattern.length : end + 2;
      cur.branch += stop - i;
      cur.last = 1;
      i = stop - 1;
    } else if (c === '\\') {
      i++;
      atom(1);
    } else if (c === '[') {
      // A class is one instruction; `]` first (or after `^`) is literal, `[:alpha:]` nests.
      let j = i + 1;
      if (pattern[j] === '^') j++;
      if (pattern[j] === ']') j++;
      for (; j < pattern.length && pattern[j] !== ']'; j++) {
        if (pattern[j] === '\\') j++;
        else if (pattern[j] === '[' && pattern[j + 1] === ':') {
          const end = pattern.indexOf(':]', j + 2);
          if (end > 0) j = end + 1;
        }
      }
      atom(1);
      i = j;
    } else if (c === '(') {
      // Group prefixes and flags compile to nothing: (?:, (?i-s:, (?P<name>, (?<name>; (?i) opens no group.
      const prefix = /^\(\?(?:[a-zA-Z-]*:|P?<[^>]{0,64}>|[a-zA-Z-]*\))/.exec(pattern.slice(i, i + 72))?.[0];
      if (prefix?.endsWith(')')) {
        i += prefix.length - 1;
        continue;
      }
      stack.push(cur);
      cur = { done: 0, branch: 0, last: 0 };
      i += (prefix?.length ?? 1) - 1;
    } else if (c === ')' && stack.length > 0) {
      const size = cur.done + cur.branch + 2;
      cur = stack.pop()!;
      atom(size);
    } else if (c === '|') {
      cur.done += cur.branch + 1;
      cur.branch = cur.last = 0;
    } else if (c === '{') {
      const m = /^\{(\d{1,7})(,(\d{0,7}))?\}/.exec(pattern.slice(i, i + 18));
      if (!m) {
        atom(1);
        continue;
      }
      // x{n,m}: m copies of x, each past the n-th optional (one more instruction); x{n,}: n copies
      // and a starred one (a split and a jump more).
      const open = m[2] !== undefined && !m[3];
      const copies = Math.max(Number(m[1]), m[3] ? Number(m[3]) : 0) + (open ? 1 : 0);
      // RE2 keeps an empty instruction for x{0}, and its repetitions count it.
      const size = copies === 0 ? 1 : copies * (cur.last + 1) + (open ? 2 : 0);
      cur.branch += size - cur.last;
      cur.last = size;
      i += m[0].length - 1;
    } else if (c === '*' || c === '+' || c === '?') {
      // A split and a jump around the operand, at most.
      cur.branch += 2;
      cur.last += 2;
    } else atom(1);
  }
  while (stack.length > 0) {
    const size = cur.done + cur.branch + 2;
    cur = stack.pop()!;
    atom(size);
  }
  return cur.done + cur.branch + 3; // a program starts and ends with bookkeeping instructions
}

// re2js is loaded with the first pattern compiled: a Berth whose rules match no InRegexp never
// needs it (its source and tables, about 1 MB resident).
let re2: typeof RE2JS | undefined;
const loadRe2 = (): typeof RE2JS =>
  (re2 ??= (createRequire(import.meta.url)('re2js') as { RE2JS: typeof RE2JS }).RE2JS);

// Compiled once per expression object: a rule's expressions live as long as the rule, and so do
// their programs (and the DFA states RE2 caches in them).
const compiled = new WeakMap<MatchExpression, RE2JS[]>();

/**
 * Compiles a regular expression with RE2 semantics (as Kubernetes and node-feature-discovery match
 * InRegexp); throws, saying why, when RE2 cannot run it or it compiles to more than
 * REGEXP_PROGRAM_MAX instructions, or more than the `left` of its rule's budget.
 */
export function compileRegexp(source: string, left = RULE_REGEXP_PROGRAM_MAX): RE2JS {
  const budget = Math.min(REGEXP_PROGRAM_MAX, left);
  // A bound well above the budget: the estimate over-counts, so it only stops the hopeless ones.
  const bound = programSizeBound(source);
  if (bound > 10 * budget) throw new Error(tooLarge(`an estimated ${bound}`, left));
  let re: RE2JS;
  try {
    re = loadRe2().compile(source);
  } catch (e) {
    const why = escapeControl((e as Error).message).slice(0, 200);
    const hint = /Perl syntax|escape sequence|named capture/.test(why)
      ? ' (RE2 syntax, as Kubernetes and node-feature-discovery use: no backreferences or lookaround)'
      : '';
    throw new Error(`${why}${hint}`, { cause: e });
  }
  if (re.programSize() > budget) throw new Error(tooLarge(String(re.programSize()), left));
  return re;
}

const tooLarge = (size: string, left: number): string =>
  `compiles to ${size} RE2 instructions; one value may have at most ${REGEXP_PROGRAM_MAX}, and all of a rule's at most ${RULE_REGEXP_PROGRAM_MAX}` +
  `${left < RULE_REGEXP_PROGRAM_MAX ? ` (${left} left)` : ''}: simplify it (fewer or smaller counted repetitions)`;

/** The programs of an InRegexp expression, compiled on first use (regexpErrors checked its values). */
export function regexpsOf(e: MatchExpression): RE2JS[] {
  let res = compiled.get(e);
  if (!res) {
    res = (e.values ?? []).map((v) => compileRegexp(v));
    compiled.set(e, res);
  }
  return res;
}

/**
 * Checks the InRegexp values of a rule's expressions within the rule's budget of
 * RULE_REGEXP_PROGRAM_MAX instructions and keeps their programs for matching; the reasons each
 * failing expression has.
 */
export function regexpErrors<E extends MatchExpression>(expressions: E[]): Map<E, string[]> {
  const errors = new Map<E, string[]>();
  let left = RULE_REGEXP_PROGRAM_MAX;
  // Compiling is the cost to bound here, refused programs included: once the estimates of what was
  // compiled pass ten budgets, the rest is not even tried (64 values in each of 96 terms could be).
  // A pattern refused on its estimate alone costs a scan of its text, and counts nothing.
  let effort = 10 * RULE_REGEXP_PROGRAM_MAX;
  for (const e of expressions) {
    if (e.operator !== 'InRegexp') continue;
    const res: RE2JS[] = [];
    const problems: string[] = [];
    for (const v of e.values ?? []) {
      const bound = programSizeBound(v);
      if (bound <= 10 * Math.min(REGEXP_PROGRAM_MAX, left)) effort -= bound;
      if (effort < 0) {
        problems.push(
          `too many or too large regular expressions in one rule: at most ${RULE_REGEXP_PROGRAM_MAX} RE2 instructions in all`,
        );
        errors.set(e, problems);
        return errors;
      }
      try {
        const re = compileRegexp(v, left);
        left -= re.programSize();
        res.push(re);
      } catch (err) {
        problems.push(`bad regular expression ${quote(v)}: ${(err as Error).message}`);
      }
    }
    if (problems.length) errors.set(e, problems);
    else compiled.set(e, res);
  }
  return errors;
}
