// k8s-auto-labeller rule files: `<dir>/<namespace>/<label>` lists dependent label keys, one per line,
// and a node carrying any of them gets `<namespace>/<label>=true`. Parsing is pure, and so is what a
// scan leaves in force (settleScan); RuleDirSource watches the directory and delivers the compiled
// rules as a controller Source.
import { constants, watch, type FSWatcher } from 'node:fs';
import { open, readdir, realpath, stat } from 'node:fs/promises';
import { join, sep } from 'node:path';
import type { Source } from '../runtime/controller/controller.ts';
import { type EventHandler } from '../runtime/cache/informer.ts';
import type { KubeObject } from '../runtime/api/meta.ts';
import { ownedKeys } from '../runtime/api/fields.ts';
import { errorText } from '../runtime/observability/log.ts';
import { rootLogger, type Logger } from '../runtime/observability/log.ts';
import { validateLabelKey, validateLabelValue } from '../policy/match/selector.ts';
import { escapeControl, quote } from '../policy/text.ts';
import { keyErrors } from './decide/nodes.ts';
import { nodeRestrictionErrors } from './restriction.ts';
import { FIELD_MANAGER, type MatchTerm, type Rule } from './types.ts';

/** A problem with one rule file (or the directory), for logs and events: `file:line: message`. */
export interface FileError {
  file: string;
  line?: number;
  message: string;
}

// File names come from whoever writes the directory: escaped, so that one cannot forge a log line.
export const formatFileError = (e: FileError): string =>
  `${escapeControl(e.file)}${e.line === undefined ? '' : `:${e.line}`}: ${e.message}`;

/** Line errors reported per file: a file of garbage must not flood the log, one line per error. */
const MAX_LINE_ERRORS = 10;
/** Every node evaluates every term of every rule: a file's are bounded like a NodeLabelRule's. */
const MAX_DEPENDENT_LABELS = 1024;

/**
 * Compiles one rule file. A file with any invalid line yields no rule at all: applying the valid
 * lines alone would silently change what the file means (a typo would narrow the node set), while a
 * rejected file keeps the label where it was and says why.
 */
export function parseRuleFile(
  path: string,
  namespace: string,
  label: string,
  content: Buffer,
): { rule?: Rule; errors: FileError[] } {
  const errors: FileError[] = [];
  const output = `${namespace}/${label}`;
  // The same keys as a NodeLabelRule's outputs: none Kubernetes reserves (kubernetes.io, k8s.io).
  for (const problem of keyErrors('the label', output))
    errors.push({ file: path, message: `${problem} (from the path <namespace>/<label>)` });

  const text = textOf(path, content);
  if (typeof text !== 'string') {
    errors.push(text);
    return { errors };
  }

  const terms = new Map<string, MatchTerm>();
  let sawLine = false;
  let unshown = 0;
  const lineError = (line: number, message: string) => {
    if (errors.length < MAX_LINE_ERRORS) errors.push({ file: path, line, message });
    else unshown++;
  };
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim(); // also drops the '\r' of Windows line endings
    if (line === '' || line.startsWith('#')) return;
    sawLine = true;
    const eq = line.indexOf('=');
    // Berth extension: `key=value` requires that value; a bare key only requires presence.
    const key = eq < 0 ? line : line.slice(0, eq).trim();
    const value = eq < 0 ? undefined : line.slice(eq + 1).trim();
    const keyProblem = validateLabelKey(key);
    if (keyProblem) {
      lineError(i + 1, `${quote(key)} is not a valid label key: ${keyProblem}`);
      return;
    }
    const valueProblem = value === undefined ? undefined : validateLabelValue(value);
    if (valueProblem) {
      lineError(i + 1, `${quote(value ?? '')} is not a valid label value: ${valueProblem}`);
      return;
    }
    const term: MatchTerm =
      value === undefined
        ? { label: key, operator: 'Exists' }
        : { label: key, operator: 'In', values: [value] };
    terms.set(JSON.stringify(term), term);
  });
  if (unshown > 0) errors.push({ file: path, message: `and ${unshown} more invalid lines` });
  if (!sawLine)
    errors.push({ file: path, message: 'declares no dependent labels: list one label key per line' });
  if (terms.size > MAX_DEPENDENT_LABELS)
    errors.push({
      file: path,
      message: `declares ${terms.size} dependent labels; a rule file declares at most ${MAX_DEPENDENT_LABELS}`,
    });
  // Fields in a fixed order: RuleDirSource compares rules by their JSON.
  const rule: Rule = {
    name: fileRuleName(output),
    source: { kind: 'File', path },
    allOf: [],
    anyOf: [...terms.values()],
    labels: { [output]: 'true' },
    annotations: {},
    taints: [],
  };
  for (const message of nodeRestrictionErrors(
    rule,
    false,
    'or write it as a NodeLabelRule that acknowledges it',
  ))
    errors.push({ file: path, message });
  return errors.length > 0 ? { errors } : { rule, errors };
}

/** The file's text, or why it is none. */
function textOf(path: string, content: Buffer): string | FileError {
  const nul = content.indexOf(0);
  if (nul >= 0) {
    const line = content.subarray(0, nul).toString('latin1').split('\n').length;
    return { file: path, line, message: 'contains a NUL byte: not a text file' };
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(content);
  } catch {
    return { file: path, message: 'is not valid UTF-8 text' };
  }
}

const FILE_RULE = 'file:';
/** The rule a file's `<namespace>/<label>` path makes. */
const fileRuleName = (output: string): string => `${FILE_RULE}${output}`;

/**
 * Which rule files' label keys: one file's (`<namespace>/<label>`), a namespace directory's, or
 * (neither given) the whole directory's.
 */
export interface RuleScope {
  namespace?: string;
  label?: string;
}

const scopeId = (s: RuleScope): string => JSON.stringify([s.namespace, s.label]);

/** Whether `key` is a key a rule file in `scope` may own: every rule file's is `<namespace>/<label>`. */
export function inScope(scope: RuleScope, key: string): boolean {
  const slash = key.indexOf('/');
  if (slash < 0) return false;
  return (
    (scope.namespace === undefined || scope.namespace === key.slice(0, slash)) &&
    (scope.label === undefined || scope.label === key.slice(slash + 1))
  );
}

/**
 * `desired` with the labels that holds keep as they are on `node`: each label Berth's field manager
 * set to `true` (all that a rule file sets) under a held scope. The rule of a file Berth cannot
 * read may still want it, so it is not pruned; a rule that sets the key on this node decides it.
 */
export function keepHeld<T extends { labels: Record<string, string> }>(
  desired: T,
  holds: readonly RuleScope[],
  node: KubeObject,
): T {
  if (holds.length === 0) return desired;
  const labels = node.metadata?.labels ?? {};
  const held: Record<string, string> = {};
  for (const key of ownedKeys(node, FIELD_MANAGER, ['metadata', 'labels']))
    if (labels[key] === 'true' && holds.some((s) => inScope(s, key))) held[key] = 'true';
  return { ...desired, labels: { ...held, ...desired.labels } };
}

/**
 * The holds left once `rules` run beside them: a rule file's hold goes when a rule of the file's
 * name stands in for it (a candidate that fixes it); a directory's stays, as no rule makes a
 * directory readable.
 */
export function holdsBeside(holds: readonly Hold[], rules: readonly { name: string }[]): Hold[] {
  const names = new Set(rules.map((r) => r.name));
  return holds.filter(
    (h) => h.scope.label === undefined || !names.has(fileRuleName(`${h.scope.namespace}/${h.scope.label}`)),
  );
}

/** Larger than any list of label keys; stops a misdirected --label-dir from reading big files on every poll. */
const MAX_FILE_BYTES = 1 << 20;

// Dotfiles cover the ConfigMap volume's `..data` and `..<timestamp>` directories and editor swap files.
const ignored = (name: string): boolean => name.startsWith('.') || name.endsWith('~');

const fsReason = (e: unknown): string => {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'EACCES' || code === 'EPERM') return 'permission denied';
  if (code === 'ENOENT') return 'does not exist';
  if (code === 'ENOTDIR') return 'is not a directory';
  return errorText(e);
};

/** What reading one entry of the tree (a rule file, a namespace directory) found wrong. */
interface Reading {
  errors: FileError[];
  /** It was listed but is gone (ENOENT). */
  vanished: boolean;
}

/**
 * Runs one file-system call; a failure becomes an error on `file`, except ENOENT: a path that
 * vanished after its directory was listed (or a link left dangling mid-swap of a ConfigMap volume)
 * is marked vanished, a change in progress until a following scan finds it gone too.
 */
async function attempt<T>(
  op: Promise<T>,
  file: string,
  what: string,
  reading: Reading,
): Promise<T | undefined> {
  try {
    return await op;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') reading.vanished = true;
    else reading.errors.push({ file, message: `${what}: ${fsReason(e)}` });
    return undefined;
  }
}

/** A directory a scan read, by its real path and identity (device and inode): what to watch. */
export interface ScannedDir {
  path: string;
  id: string;
}

/**
 * A rule file, namespace directory or the directory itself that a scan could not use: there but
 * rejected or unreadable, or vanished mid-scan (ENOENT).
 */
export interface Unsettled {
  scope: RuleScope;
  /** Its path, for the note that says what stays. */
  file: string;
  /** Gone (ENOENT): a change in progress, such as a ConfigMap volume's `..data` swap, or a removal. */
  vanished: boolean;
}

export interface ScannedRuleDir {
  rules: Rule[];
  errors: FileError[];
  /** The directories read, to watch. */
  dirs: ScannedDir[];
  /** What the scan could not use: each keeps its last good rules (settleScan). */
  unsettled: Unsettled[];
}

const dirId = (st: { dev: number; ino: number }): string => `${st.dev}:${st.ino}`;

/**
 * Reads every rule file under `dir` (`dir/<namespace>/<label>`); sorted by rule name. Symbolic
 * links are followed only while they stay inside the directory (a ConfigMap volume's `..data`
 * layout does): one that leads out is an error naming the link, and nothing of its target is read.
 */
export async function scanRuleDir(dir: string): Promise<ScannedRuleDir> {
  let root: string;
  let namespaces: string[];
  const dirs: ScannedDir[] = [];
  try {
    root = await realpath(dir);
    dirs.push({ path: root, id: dirId(await stat(root)) });
    namespaces = await readdir(root);
  } catch (e) {
    const reason = fsReason(e);
    const vanished = (e as NodeJS.ErrnoException).code === 'ENOENT';
    const hint = vanished ? '; its rules apply once it is created' : '';
    return {
      rules: [],
      errors: [{ file: dir, message: `rule directory ${reason}${hint}` }],
      dirs,
      unsettled: [{ scope: {}, file: dir, vanished }],
    };
  }
  const scan = new RuleDirScan(dir, root, dirs);
  await Promise.all(namespaces.filter((n) => !ignored(n)).map((n) => scan.readNamespace(n)));
  return scan.result();
}

/** One scan of a rule directory whose root was read: what it found so far. */
class RuleDirScan {
  private readonly rules: Rule[] = [];
  private readonly errors: FileError[] = [];
  private readonly unsettled: Unsettled[] = [];
  private readonly dir: string;
  /** The directory's real path: links are followed only within it. */
  private readonly root: string;
  private readonly dirs: ScannedDir[];
  private readonly layout: string;

  constructor(dir: string, root: string, dirs: ScannedDir[]) {
    this.dir = dir;
    this.root = root;
    this.dirs = dirs;
    this.layout = `rule files go in ${join(dir, '<namespace>', '<label>')}, e.g. ${join(dir, 'accelerators', 'edgetpu')}`;
  }

  /** Sorted: rules by name, errors and unsettled entries by file. */
  result(): ScannedRuleDir {
    this.rules.sort(byName);
    this.errors.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : (a.line ?? 0) - (b.line ?? 0)));
    this.unsettled.sort((a, b) => (a.file < b.file ? -1 : a.file > b.file ? 1 : 0));
    return { rules: this.rules, errors: this.errors, dirs: this.dirs, unsettled: this.unsettled };
  }

  /** Where `path` really is, if that is inside the directory; otherwise an error on `path`. */
  private async inside(path: string, reading: Reading): Promise<string | undefined> {
    const real = await attempt(realpath(path), path, 'cannot read', reading);
    if (real === undefined) return undefined;
    if (real === this.root || real.startsWith(this.root + sep)) return real;
    reading.errors.push({
      file: path,
      message: 'is a symbolic link that leads out of the rule directory: only links within it are followed',
    });
    return undefined;
  }

  /**
   * An entry that is there but cannot be used, or that vanished, is unsettled (settleScan keeps its
   * last good rules or holds its keys, and the error says why): a typo, a scan that caught a file
   * half written, an unreadable directory or a swap in progress must not take a label off every node.
   */
  private settle(scope: RuleScope, file: string, reading: Reading): void {
    this.errors.push(...reading.errors);
    if (reading.errors.length > 0 || reading.vanished)
      this.unsettled.push({ scope, file, vanished: reading.errors.length === 0 });
  }

  async readNamespace(namespace: string): Promise<void> {
    const path = join(this.dir, namespace);
    const reading: Reading = { errors: [], vanished: false };
    const labels = await this.listNamespace(path, reading);
    this.settle({ namespace }, path, reading);
    await Promise.all(
      (labels ?? []).filter((n) => !ignored(n)).map((label) => this.readRule(namespace, label)),
    );
  }

  private async listNamespace(path: string, reading: Reading): Promise<string[] | undefined> {
    const real = await this.inside(path, reading);
    if (real === undefined) return;
    const st = await attempt(stat(real), path, 'cannot read', reading);
    if (!st) return;
    if (!st.isDirectory()) {
      // Not unsettled: no rule file can be in it.
      this.errors.push({ file: path, message: `is not in a namespace directory: ${this.layout}` });
      return;
    }
    this.dirs.push({ path: real, id: dirId(st) });
    return attempt(readdir(real), path, 'cannot read directory', reading);
  }

  private async readRule(namespace: string, label: string): Promise<void> {
    const file = join(this.dir, namespace, label);
    const reading: Reading = { errors: [], vanished: false };
    const rule = await this.readRuleFile(file, namespace, label, reading);
    if (rule) this.rules.push(rule);
    this.settle({ namespace, label }, file, reading);
  }

  private async readRuleFile(
    file: string,
    namespace: string,
    label: string,
    reading: Reading,
  ): Promise<Rule | undefined> {
    const errors = reading.errors;
    const real = await this.inside(file, reading);
    if (real === undefined) return;
    // The resolved path, opened without following a link put there since: what was checked is what is read.
    const handle = await attempt(
      open(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK),
      file,
      'cannot read',
      reading,
    );
    if (!handle) return;
    try {
      const st = await handle.stat();
      const problem = st.isDirectory()
        ? `is a directory: ${this.layout}`
        : !st.isFile()
          ? 'is not a regular file'
          : st.size > MAX_FILE_BYTES
            ? `is ${st.size} bytes; a rule file is at most ${MAX_FILE_BYTES}`
            : undefined;
      if (problem) {
        errors.push({ file, message: problem });
        return;
      }
      // One byte more than stat said: a file that grew since is noticed, and never read past the bound.
      const buf = Buffer.alloc(st.size + 1);
      let size = 0;
      for (let n = -1; n !== 0 && size < buf.length; size += n)
        n = (await handle.read(buf, size, buf.length - size, size)).bytesRead;
      if (size > st.size) {
        errors.push({ file, message: 'changed while being read; it is read again on its next change' });
        return;
      }
      const parsed = parseRuleFile(file, namespace, label, buf.subarray(0, size));
      errors.push(...parsed.errors);
      return parsed.rule;
    } catch (e) {
      errors.push({ file, message: `cannot read: ${fsReason(e)}` });
    } finally {
      await handle.close();
    }
  }
}

const byName = (a: { name: string }, b: { name: string }): number =>
  a.name < b.name ? -1 : a.name > b.name ? 1 : 0;

/** What a scan leaves in force, given what was in force before it. */
export interface SettledScan {
  /** The rules scanned and the last good rules of what is unsettled, sorted by name. */
  rules: Rule[];
  /** The scan's errors, then a note per unsettled entry saying what stays. */
  errors: FileError[];
  /** Scopes whose keys are not pruned: rejected with no last good rule, or an unreadable directory. */
  holds: RuleScope[];
  /** What vanished in this scan (scopeId), for the next to confirm. */
  vanished: Set<string>;
  /** Something vanished that the previous scan had: a following scan must tell a swap from a removal. */
  recheck: boolean;
}

/**
 * Settles a scan against what was in force before it. What is unsettled keeps its last good
 * rules; one with none (a file rejected since Berth started: a restart, a new leader) or a
 * directory (whose files Berth cannot see) holds back the pruning of its keys instead, so that
 * a label is not taken off every node (and the pods that select it with it) for a file Berth
 * could not read. ENOENT on one scan is a change in progress (a ConfigMap volume's `..data` swap);
 * on the following one too, or once no listing names the path, the path is gone and its rules go.
 */
export function settleScan(
  scan: Pick<ScannedRuleDir, 'rules' | 'errors' | 'unsettled'>,
  before: { rules: ReadonlyMap<string, { rule: Rule }>; vanished: ReadonlySet<string> },
): SettledScan {
  const rules = new Map(scan.rules.map((r) => [r.name, r]));
  const vanished = new Set(scan.unsettled.filter((u) => u.vanished).map((u) => scopeId(u.scope)));
  const holds: RuleScope[] = [];
  const notes: FileError[] = [];
  for (const u of scan.unsettled) {
    if (u.vanished && before.vanished.has(scopeId(u.scope))) continue;
    let kept = 0;
    for (const [name, { rule }] of before.rules) {
      if (rules.has(name) || !inScope(u.scope, name.slice(FILE_RULE.length))) continue;
      rules.set(name, rule);
      kept++;
    }
    // A directory may hold files that have no last good rule.
    const directory = u.scope.label === undefined;
    if (directory || kept === 0) holds.push(u.scope);
    if (!u.vanished) notes.push({ file: u.file, message: stays(u.scope, kept > 0) });
  }
  return {
    rules: [...rules.values()].sort(byName),
    errors: [...scan.errors, ...notes],
    holds,
    vanished,
    recheck: [...vanished].some((id) => !before.vanished.has(id)),
  };
}

/** The note on an unsettled entry that is there: what stays until it can be used again. */
function stays(scope: RuleScope, kept: boolean): string {
  if (scope.label !== undefined)
    return kept
      ? 'its last good rule stays in force until the file is fixed or removed'
      : `no good version of it has been read since Berth started: label ${escapeControl(`${scope.namespace}/${scope.label}`)} stays on the nodes where Berth set it, and is set on no other, until the file is fixed or removed`;
  const labels =
    scope.namespace === undefined
      ? 'the labels of rule files'
      : `the labels ${escapeControl(scope.namespace)}/*`;
  return `the last good rules under it stay in force, and ${labels} that Berth set stay where they are, until it can be read or is removed`;
}

export interface RuleDirSourceOptions {
  /** Delay from a file-system event to the rescan, which covers every event in between, ms. */
  debounceMs?: number;
  /** Period of the safety-net rescan that catches anything the watch missed, ms. */
  pollMs?: number;
  logger?: Logger;
  /** Called with all current errors whenever the set of errors changes (not on every rescan). */
  onErrors?(errors: FileError[]): void;
}

/** How often to rescan (and retry the watch) while the directory is missing or cannot be watched. */
const UNWATCHED_POLL_MS = 250;

/**
 * The rules of a rule directory as a controller Source: every change to the tree (a file written,
 * renamed or removed, a namespace directory added or removed, a ConfigMap volume's `..data` swapped)
 * triggers a rescan of the whole (small) tree, and the differences become add / update / delete events.
 */
export class RuleDirSource implements Source<Rule> {
  readonly dir: string;
  private readonly debounceMs: number;
  private readonly pollMs: number;
  private readonly onErrors: ((errors: FileError[]) => void) | undefined;
  private readonly log: Logger;
  private readonly handlers: EventHandler<Rule>[] = [];
  private current = new Map<string, { rule: Rule; json: string }>();
  private currentErrors: FileError[] = [];
  private errorsJson = '[]';
  private currentHolds: RuleScope[] = [];
  private holdsJson = '[]';
  private readonly holdHandlers: EventHandler<RuleScope[]>[] = [];
  /** What the last scan found vanished: gone again in the next, it is removed. */
  private vanished = new Set<string>();
  private synced = false;
  private syncWaiters: (() => void)[] = [];
  private running = false;
  private scanning: Promise<void> | undefined;
  private rescanAgain = false;
  /**
   * One watch per directory read, by real path, with the identity it was watched under: a deleted
   * and recreated directory needs a new watch.
   */
  private readonly watchers = new Map<string, { id: string; watcher: FSWatcher }>();
  /** Every directory of the last scan is watched; otherwise polling stands in. */
  private watched = false;
  private lastWatchError: string | undefined;
  private debounceTimer: NodeJS.Timeout | undefined;
  private pollTimer: NodeJS.Timeout | undefined;

  constructor(dir: string, opts: RuleDirSourceOptions = {}) {
    this.dir = dir;
    this.debounceMs = opts.debounceMs ?? 50;
    this.pollMs = opts.pollMs ?? 10_000;
    this.onErrors = opts.onErrors;
    this.log = (opts.logger ?? rootLogger).child({ ruleDir: dir });
  }

  /** Scans once (delivering an add per rule), then watches until stop(). */
  async start(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.requestScan();
    await this.scanning;
  }

  stop(): void {
    this.running = false;
    for (const path of [...this.watchers.keys()]) this.unwatch(path);
    clearTimeout(this.debounceTimer);
    clearTimeout(this.pollTimer);
    this.debounceTimer = this.pollTimer = undefined;
  }

  /** A handler added late first gets an add for every current rule, in the initial list, as with informers. */
  addEventHandler(h: EventHandler<Rule>): void {
    this.handlers.push(h);
    if (h.onAdd)
      for (const { rule } of this.current.values()) this.deliver(() => h.onAdd?.(rule, true), rule.name);
  }

  waitForSync(signal?: AbortSignal): Promise<void> {
    if (this.synced) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.syncWaiters.push(resolve);
      signal?.addEventListener('abort', () => reject(signal.reason), { once: true });
    });
  }

  /** Current rules, sorted by name. */
  rules(): Rule[] {
    return [...this.current.values()].map((e) => e.rule);
  }

  errors(): FileError[] {
    return [...this.currentErrors];
  }

  get(name: string): Rule | undefined {
    return this.current.get(name)?.rule;
  }

  /** Scopes whose labels are not pruned (keepHeld): their files are rejected or unreadable. */
  holds(): RuleScope[] {
    return [...this.currentHolds];
  }

  /** Changes of holds(), as a Source for Controller.watch: onUpdate(before, after) on each. */
  readonly holdChanges: Source<RuleScope[]> = {
    addEventHandler: (h) => void this.holdHandlers.push(h),
    waitForSync: (signal) => this.waitForSync(signal),
  };

  // Events that arrive while a scan runs ask for one more scan after it, so nothing is lost.
  private requestScan(): void {
    if (!this.running) return;
    if (this.scanning) {
      this.rescanAgain = true;
      return;
    }
    this.scanning = (async () => {
      // A change made between a directory's read and the start of its watch is seen by one more
      // scan; once per round, so that a watch that keeps failing cannot spin.
      let rescanForNewWatch = true;
      do {
        this.rescanAgain = false;
        try {
          if ((await this.rescan()) && rescanForNewWatch) {
            rescanForNewWatch = false;
            this.rescanAgain = true;
          }
        } catch (e) {
          this.log.error({ err: errorText(e) }, 'rescanning the rule directory failed');
        }
      } while (this.rescanAgain && this.running);
      this.scanning = undefined;
      this.schedulePoll();
    })();
  }

  private readonly scheduleRescan = (): void => {
    if (this.debounceTimer || !this.running) return;
    this.debounceTimer = setTimeout(() => {
      this.debounceTimer = undefined;
      this.requestScan();
    }, this.debounceMs).unref();
  };

  private schedulePoll(): void {
    clearTimeout(this.pollTimer);
    if (!this.running) return;
    const ms = this.watched ? this.pollMs : Math.min(this.pollMs, UNWATCHED_POLL_MS);
    this.pollTimer = setTimeout(() => this.requestScan(), ms).unref();
  }

  /** Rescans the tree and delivers the differences; true when a directory is newly watched. */
  private async rescan(): Promise<boolean> {
    const scan = await scanRuleDir(this.dir);
    if (!this.running) return false;
    const newWatch = this.rewatch(scan.dirs);
    const { rules, errors, holds, vanished, recheck } = settleScan(scan, {
      rules: this.current,
      vanished: this.vanished,
    });
    this.vanished = vanished;
    // Something vanished: the following scan, soon rather than at the next poll, tells a swap from a removal.
    if (recheck) this.scheduleRescan();

    const next = new Map<string, { rule: Rule; json: string }>();
    const added: Rule[] = [];
    const updated: [Rule, Rule][] = [];
    for (const rule of rules) {
      const json = JSON.stringify(rule);
      const prev = this.current.get(rule.name);
      if (prev?.json === json) {
        next.set(rule.name, prev);
        continue;
      }
      if (prev) updated.push([prev.rule, rule]);
      else added.push(rule);
      next.set(rule.name, { rule, json });
    }
    const deleted = [...this.current.values()].filter((e) => !next.has(e.rule.name)).map((e) => e.rule);
    this.current = next;
    const errorsJson = JSON.stringify(errors);
    const errorsChanged = errorsJson !== this.errorsJson;
    this.currentErrors = errors;
    this.errorsJson = errorsJson;
    const holdsBefore = this.currentHolds;
    const holdsJson = JSON.stringify(holds);
    const holdsChanged = holdsJson !== this.holdsJson;
    this.currentHolds = holds;
    this.holdsJson = holdsJson;

    // The first scan's rules are the initial list (the informers' first list).
    const initial = !this.synced;
    for (const h of this.handlers) {
      for (const r of added) this.deliver(() => h.onAdd?.(r, initial), r.name);
      for (const [a, b] of updated) this.deliver(() => h.onUpdate?.(a, b), b.name);
      for (const r of deleted) this.deliver(() => h.onDelete?.(r), r.name);
    }
    if (holdsChanged)
      for (const h of this.holdHandlers) this.deliver(() => h.onUpdate?.(holdsBefore, holds), 'holds');
    if (errorsChanged) {
      try {
        this.onErrors?.(errors);
      } catch (e) {
        this.log.error({ err: errorText(e) }, 'onErrors handler failed');
      }
    }
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncWaiters.splice(0)) w();
    }
    return newWatch;
  }

  private deliver(fn: () => void, rule: string): void {
    try {
      fn();
    } catch (e) {
      this.log.error({ err: errorText(e), rule }, 'event handler failed');
    }
  }

  /**
   * Watches each directory the scan read, and only those: the root and every namespace directory,
   * by real path. Node's recursive fs.watch is not used: on Linux it watches each file's inode, so
   * a file replaced by a rename (what editors and atomic writers do) is never heard from again.
   * A directory's own watch hears every change to its entries, whatever replaced them.
   */
  private rewatch(dirs: ScannedDir[]): boolean {
    const wanted = new Map(dirs.map((d) => [d.path, d.id]));
    for (const [path, w] of this.watchers) if (wanted.get(path) !== w.id) this.unwatch(path);
    let added = false;
    for (const [path, id] of wanted) {
      if (this.watchers.has(path)) continue;
      try {
        const watcher = watch(path, { persistent: false }, this.scheduleRescan);
        watcher.on('error', (e) => {
          this.watchFailed(e);
          if (this.watchers.get(path)?.watcher === watcher) this.unwatch(path);
          this.schedulePoll();
        });
        this.watchers.set(path, { id, watcher });
        added = true;
      } catch (e) {
        // Gone since the scan: its parent's watch has heard that already.
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') this.watchFailed(e);
      }
    }
    this.watched = wanted.size > 0 && wanted.size === this.watchers.size;
    return added;
  }

  // Logged once per distinct failure: while it lasts, polling retries every UNWATCHED_POLL_MS.
  private watchFailed(e: unknown): void {
    const err = errorText(e);
    if (err !== this.lastWatchError)
      this.log.warn({ err, pollMs: UNWATCHED_POLL_MS }, 'cannot watch the rule directory; polling');
    this.lastWatchError = err;
  }

  private unwatch(path: string): void {
    this.watchers.get(path)?.watcher.close();
    this.watchers.delete(path);
    this.watched = false;
  }
}

/** A rule file or directory Berth cannot use: the labels it set under it stay (keepHeld). */
export interface Hold {
  scope: RuleScope;
  /** The file or directory. */
  file: string;
  /** Why it cannot be used. */
  errors: FileError[];
}

/**
 * What Berth holds for the rule directory a scan read, decided as the controller decides it
 * (settleScan). Settled twice, as the controller's recheck does: a path that vanished is gone, not
 * a swap in progress. Only the running Berth knows the last good rules, so a rejected file holds.
 */
export function holdsOf(scan: Pick<ScannedRuleDir, 'rules' | 'errors' | 'unsettled'>): Hold[] {
  const first = settleScan(scan, { rules: new Map(), vanished: new Set() });
  const { holds } = settleScan(scan, { rules: new Map(), vanished: first.vanished });
  const held = (u: Unsettled) =>
    holds.some((s) => s.namespace === u.scope.namespace && s.label === u.scope.label);
  return scan.unsettled.filter(held).map((u) => ({
    scope: u.scope,
    file: u.file,
    errors: scan.errors.filter((e) => e.file === u.file),
  }));
}
