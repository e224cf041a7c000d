// The page: fetches the server's JSON snapshots, and again for the sections an event of /api/stream
// names. Every value from the cluster goes into the DOM as text (textContent, text nodes), never
// as markup; the server's Content-Security-Policy forbids inline script besides. What is shown
// (the tab, the filters, the object explained) lives in the address's hash, `#tab?key=value`, so
// every view can be linked to and back and forward walk through them.
import type {
  AboutSnapshot,
  CellRow,
  ConditionView,
  ExplainAnswer,
  ExplainView,
  NodePage,
  NodeRow,
  PoliciesSnapshot,
  PodsSnapshot,
  PlanView,
  PolicyRow,
  SubjectView,
  WorkloadsSnapshot,
} from '../types.ts';

type Child = Node | string | undefined;

/** An element with text or element children; strings become text nodes. */
function el(tag: string, cls?: string, ...children: Child[]): HTMLElement {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const c of children) if (c !== undefined) e.append(c);
  return e;
}

const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;
const cell = (...children: Child[]) => el('td', undefined, ...children);
const tag = (text: string, cls = 'tag') => el('span', cls, text);
const fill = (id: string, rows: Node[], empty: string, cols: number) => {
  const body = $(id);
  body.replaceChildren(
    ...(rows.length ? rows : [el('tr', 'note', Object.assign(cell(empty), { colSpan: cols }))]),
  );
};

async function get<T>(path: string, init?: RequestInit): Promise<T> {
  const res = await fetch(path, init);
  const body = (await res.json()) as T & { error?: string };
  if (!res.ok) throw new Error(body.error ?? `${res.status}`);
  return body;
}

// The state in the address: the tab, then its filters and `explain=kind/[namespace/]name`.
const TABS = ['nodes', 'policies', 'events', 'pods', 'workloads', 'cells', 'plan'];

function route(): { tab: string; q: URLSearchParams } {
  const h = location.hash.slice(1);
  const i = h.indexOf('?');
  const tab = i < 0 ? h : h.slice(0, i);
  return { tab: TABS.includes(tab) ? tab : 'nodes', q: new URLSearchParams(i < 0 ? '' : h.slice(i + 1)) };
}

/** The address of the current state with `changes` (an empty value drops its key). */
function hrefWith(changes: Record<string, string>): string {
  const { tab, q } = route();
  for (const [k, v] of Object.entries(changes))
    if (v) q.set(k, v);
    else q.delete(k);
  const s = q.toString();
  return `#${tab}${s ? `?${s}` : ''}`;
}

/** Goes to the state with `changes`: a new history entry, or the same one while typing. */
function change(changes: Record<string, string>, replace = false): void {
  const h = hrefWith(changes);
  if (h === location.hash) return;
  history[replace ? 'replaceState' : 'pushState'](null, '', h);
  apply();
}

/** A link to the current state with `changes`: followed in place, or opened elsewhere as an address. */
function link(text: string, changes: Record<string, string>): HTMLElement {
  const a = Object.assign(el('a', 'object', text), { href: hrefWith(changes) });
  a.addEventListener('click', (e) => {
    e.preventDefault();
    change(changes);
  });
  return a;
}

/** The kinds the server can explain (Kind → explain's name): the explain panel's hook. */
let explainable: Record<string, string> = {};

/** A link that shows what `berth explain` says of the object. */
const explainLink = (kind: string, name: string, namespace?: string): HTMLElement =>
  link(namespace ? `${namespace}/${name}` : name, {
    explain: [kind, namespace, name].filter(Boolean).join('/'),
  });

let explainAsked = 0;
/** The explain= value shown in the panel. */
let explained = '';

/** An object named "Kind NAME" or "Kind NAMESPACE/NAME": a link to explain it when the server can. */
function objectLink(kind: string, name: string): Child[] {
  const explainer = explainable[kind];
  return explainer ? [link(name, { explain: `${explainer}/${name}` })] : [name];
}

function subjectList(title: string, side: { shown: SubjectView[]; total: number }): Child[] {
  if (!side.total) return [];
  const more = side.total - side.shown.length;
  return [
    el('h3', undefined, `${title} ${side.total} ${side.shown[0]!.kind.toLowerCase()}(s)`),
    el(
      'ul',
      side.shown[0]!.in ? 'acts' : 'leaves',
      ...side.shown.map((s) =>
        el(
          'li',
          undefined,
          `${s.kind} `,
          ...objectLink(s.kind, s.name),
          ...s.why.map((w) => el('div', undefined, w)),
        ),
      ),
      more > 0 ? el('li', 'note', `+${more} more: berth explain -o json lists them all`) : undefined,
    ),
  ];
}

/** The explanation in parts: what is missing, conditions with since-when, counts, subjects. */
function explainParts(v: ExplainView): Child[] {
  return [
    v.missingCrds.length ? el('p', 'unknown', `CRDs not installed: ${v.missingCrds.join(', ')}`) : undefined,
    v.conditions
      ? v.conditions.length
        ? el(
            'table',
            'conditions',
            ...v.conditions.map((c) =>
              el('tr', c.tone, cell(c.type), cell(c.status), cell(c.reason), cell(c.since), cell(c.message)),
            ),
          )
        : el('p', 'note', 'no status yet (Berth not running, or not caught up)')
      : undefined,
    Object.keys(v.counts).length
      ? el('p', 'counts', ...Object.entries(v.counts).map(([k, n]) => tag(`${k} ${n}`)))
      : undefined,
    ...subjectList('Acts on', v.acts),
    ...subjectList('Leaves alone', v.leaves),
  ];
}

async function explain(target: string): Promise<void> {
  const [kind = '', ...rest] = target.split('/');
  const [namespace, name = ''] = rest.length > 1 ? rest : [undefined, rest[0]];
  // Only the last object asked about is shown: an earlier answer that comes later is dropped.
  const asked = ++explainAsked;
  $('explain').hidden = false;
  $('explain-title').textContent = `berth explain ${kind} ${namespace ? `${namespace}/` : ''}${name}`;
  $('explain-view').replaceChildren('asking...');
  let parts: Child[], lines: string[], text: string;
  try {
    const q = new URLSearchParams({ kind, name, ...(namespace ? { namespace } : {}) });
    const a = await get<ExplainAnswer>(`/api/explain?${q}`);
    [parts, lines, text] = [
      [el('h3', undefined, a.view.title), ...explainParts(a.view)],
      a.view.lines,
      a.lines.join('\n'),
    ];
  } catch (e) {
    text = `could not explain: ${(e as Error).message}`;
    [parts, lines] = [[el('p', 'bad', text)], []];
  }
  if (asked !== explainAsked) return;
  $('explain-view').replaceChildren(el('div', undefined, ...parts));
  $('explain-lines').textContent = lines.join('\n');
  $('explain-text').textContent = text;
}

const OP_CLASS = { '+': 'op-plus', '-': 'op-minus', '~': 'op-tilde', '!': 'op-bang' };

const notes = (cls: string, prefix: string, list: string[]) =>
  list.map((t) => el('div', cls, `${prefix}${t}`));

/** A plan as the view shows it: the exit code, errors and warnings first, then effects by object. */
function planParts(p: PlanView): Child[] {
  const counts = (title: string, by: Record<string, number>) =>
    Object.keys(by).length
      ? el('p', undefined, `${title}: `, ...Object.entries(by).map(([k, n]) => tag(`${k} ${n}`)))
      : undefined;
  return [
    el(
      'p',
      p.changes ? 'changes' : 'note',
      `exit code ${p.exitCode}: ${p.changes ? `${p.objects.length} object(s) would change` : 'no change'} (nothing was written)`,
    ),
    ...notes('error', 'error: ', p.errors),
    ...notes('warning', 'warning: ', p.warnings),
    p.evictions ? counts('Evictions by namespace', p.evictions.namespaces) : undefined,
    p.evictions ? counts('Evictions by PodDisruptionBudget', p.evictions.budgets) : undefined,
    ...p.objects.map(({ object, effects }) => {
      const [kind = '', name = ''] = object.split(' ');
      const box = el(
        'div',
        'planned',
        el('h3', undefined, `${kind} `, ...objectLink(kind, name)),
        el(
          'ul',
          undefined,
          ...effects.map((e) =>
            el(
              'li',
              undefined,
              el('span', `op ${OP_CLASS[e.op]}`, e.op),
              e.what,
              el('span', 'note', ` (${e.by})`),
            ),
          ),
        ),
      );
      box.dataset['object'] = object;
      return box;
    }),
    ...notes('unknown', 'unknown: ', p.unknown),
  ];
}

/** Plans the pasted file: the server runs `berth plan`; an older answer that comes later is dropped. */
let planAsked = 0;
async function plan(): Promise<void> {
  const asked = ++planAsked;
  const deleting = $<HTMLInputElement>('plan-delete').checked;
  $('plan-status').textContent = 'planning...';
  let parts: Child[];
  try {
    const p = await get<PlanView>(`/api/plan?delete=${deleting}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/yaml' },
      body: $<HTMLTextAreaElement>('plan-yaml').value,
    });
    parts = planParts(p);
  } catch (e) {
    parts = [el('div', 'error', `could not plan: ${(e as Error).message}`)];
  }
  if (asked !== planAsked) return;
  $('plan-status').textContent = deleting ? 'planned deleting them' : 'planned applying them';
  $('plan-result').replaceChildren(el('div', undefined, ...parts));
}

const conditions = (cs: ConditionView[]) =>
  el(
    'div',
    undefined,
    ...cs.map((c) =>
      el('div', c.tone, `${c.type}=${c.status} ${c.reason}${c.message ? `: ${c.message}` : ''}`),
    ),
  );

/** Fills a select with its fixed options (data-fixed) and `values`, the selected one kept even when absent. */
function options(id: string, values: string[], selected: string, label = (v: string) => v): void {
  const select = $<HTMLSelectElement>(id);
  const fixed = [...select.options].filter((o) => o.dataset['fixed'] !== undefined);
  const all = [...new Set([...values, selected])].filter((v) => v && !fixed.some((o) => o.value === v));
  select.replaceChildren(
    ...fixed,
    ...all.map((v) => Object.assign(el('option', undefined, label(v)), { value: v })),
  );
  select.value = selected;
}

// Nodes: the server filters and pages, so 5,000 nodes cost the page one page of rows.
const PAGE = 100;
/** The latest nodes request: an answer to an older one (another filter) is dropped. */
let nodesAsked = 0;
/** The node filter last asked for: a change of anything else does not ask again. */
let nodesQuery = '';

function nodeRow(r: NodeRow): HTMLElement {
  const gates = r.gates.map((g) =>
    el(
      'div',
      g.state.startsWith('Held') ? 'held' : undefined,
      `${g.gate}: ${g.state}${g.since ? ` since ${g.since}` : ''}`,
      ...(g.waiting.length
        ? g.waiting.map((w) => el('div', undefined, `waiting for ${w}`))
        : [el('div', undefined, g.why)]),
    ),
  );
  const derived = r.derived.map((d) =>
    tag(
      `${d.kind} ${d.key}${d.value ? `=${d.value}` : ''} (${d.by}${d.rule ? `, ${d.rule}` : ''})`,
      'tag berth',
    ),
  );
  const labels = Object.entries(r.labels).map(([k, v]) => tag(`${k}=${v}`));
  const row = el(
    'tr',
    undefined,
    cell(explainLink('node', r.name), r.ready ? '' : ' (not ready)', r.unschedulable ? ' (cordoned)' : ''),
    cell(r.pool),
    cell(r.arch),
    cell(...gates),
    cell(...derived),
    cell(...labels),
  );
  row.dataset['node'] = r.name;
  return row;
}

function nodeParams(q: URLSearchParams): string {
  return new URLSearchParams({
    text: q.get('text') ?? '',
    pool: q.get('pool') ?? '',
    arch: q.get('arch') ?? '',
    held: String(q.get('held') === '1'),
    offset: q.get('offset') ?? '0',
    limit: String(PAGE),
  }).toString();
}

async function loadNodes(): Promise<void> {
  const q = route().q;
  nodesQuery = nodeParams(q);
  const asked = ++nodesAsked;
  const p = await get<NodePage & { synced: boolean }>(`/api/nodes?${nodesQuery}`);
  if (asked !== nodesAsked) return;
  fill('node-rows', p.rows.map(nodeRow), p.synced ? 'no node matches' : 'reading the nodes...', 6);
  $('node-count').textContent = `${p.matched} of ${p.total}`;
  $('page').textContent = p.matched ? `${p.offset + 1}-${p.offset + p.rows.length} of ${p.matched}` : '';
  $<HTMLButtonElement>('prev').disabled = p.offset === 0;
  $<HTMLButtonElement>('next').disabled = p.offset + p.rows.length >= p.matched;
  $('prev').dataset['offset'] = String(Math.max(0, p.offset - PAGE));
  $('next').dataset['offset'] = String(p.offset + PAGE);
  options('f-pool', p.pools, q.get('pool') ?? '');
  options('f-arch', p.archs, q.get('arch') ?? '');
}

// The snapshots last read: filters and the header apply to them without asking again.
let policies: PoliciesSnapshot | undefined;
let pods: PodsSnapshot | undefined;
let workloads: WorkloadsSnapshot | undefined;

const fullName = (r: { namespace?: string; name: string }) =>
  r.namespace ? `${r.namespace}/${r.name}` : r.name;
/** " explain" after an object of a kind the server explains (by its kind name); nothing after any other. */
const explainBeside = (kind: string, object: string): Child[] => {
  const explainer = explainable[kind];
  return explainer ? [' ', link('explain', { explain: `${explainer}/${object}` })] : [];
};
const has = (text: string, part: string | null) => !part || text.toLowerCase().includes(part.toLowerCase());

/** True when the policy has a bad condition, of type `cond` unless it is 'bad' (any). */
const bad = (r: PolicyRow, cond: string) =>
  r.conditions.some((c) => c.tone === 'bad' && (cond === 'bad' || c.type === cond));

function showPolicies(): void {
  if (!policies) return;
  const q = route().q;
  const [kind, name, cond] = [q.get('kind') ?? '', q.get('name'), q.get('cond') ?? ''];
  $('missing').textContent = policies.missing.length
    ? `Not installed (berth install): ${policies.missing.join(', ')}`
    : '';
  const rows = policies.policies.filter(
    (r) => (!kind || r.kind === kind) && has(fullName(r), name) && (!cond || bad(r, cond)),
  );
  $('policy-count').textContent = `${rows.length} of ${policies.policies.length}`;
  options('p-kind', [...new Set(policies.policies.map((r) => r.kind))].sort(), kind);
  const types = policies.policies.flatMap((r) => r.conditions.map((c) => c.type));
  options('p-cond', [...new Set(types)].sort(), cond, (t) => `${t} is bad`);
  fill(
    'policy-rows',
    rows.map((r) =>
      el(
        'tr',
        undefined,
        cell(r.kind),
        cell(
          link(fullName(r), { kind: r.kind, name: fullName(r), cond: '' }),
          ...explainBeside(r.kind, fullName(r)),
        ),
        cell(...Object.entries(r.counts).map(([k, v]) => tag(`${k} ${v}`))),
        cell(conditions(r.conditions)),
      ),
    ),
    policies.policies.length ? 'no policy matches' : 'no policy',
    4,
  );
}

function showEvents(): void {
  if (!policies) return;
  const q = route().q;
  const [kind, name, reason] = [q.get('kind') ?? '', q.get('name'), q.get('reason') ?? ''];
  const all = policies.events;
  const rows = all.filter(
    (e) => (!kind || e.kind === kind) && has(e.regarding, name) && (!reason || e.reason === reason),
  );
  $('event-count').textContent = `${rows.length} of ${all.length}`;
  options('e-kind', [...new Set(all.map((e) => e.kind))].sort(), kind);
  options('e-reason', [...new Set(all.map((e) => e.reason))].sort(), reason);
  fill(
    'event-rows',
    rows.map((e) => {
      const object = e.kind ? e.regarding.slice(e.kind.length + 1) : e.regarding;
      return el(
        'tr',
        undefined,
        cell(e.time),
        cell(`${e.kind} `, link(object, { kind: e.kind, name: object }), ...explainBeside(e.kind, object)),
        cell(link(e.reason, { reason: e.reason })),
        cell(e.note),
        cell(String(e.count)),
      );
    }),
    all.length ? 'no event matches' : 'no Warning event in the last hour',
    5,
  );
}

function showPods(): void {
  if (!pods) return;
  fill(
    'pod-rows',
    pods.pods.map((h) =>
      el('tr', undefined, cell(explainLink('pod', h.name, h.namespace)), cell(h.gate), cell(h.reason)),
    ),
    'Berth holds no pod',
    3,
  );
  const held = pods.heldNodes.map((n) =>
    el('li', undefined, explainLink('node', n.name), `: ${n.waiting.join('; ')}`),
  );
  $('held-nodes').replaceChildren(...(held.length ? held : [el('li', 'note', 'none')]));
}

function showWorkloads(): void {
  if (!workloads) return;
  fill(
    'workload-rows',
    workloads.workloads.map((d) =>
      el(
        'tr',
        undefined,
        cell(explainLink('workloaddeployment', d.name, d.namespace)),
        cell(`${d.counts['readyReplicas'] ?? 0} / ${d.desired}`),
        // The rollout's progress: instances on the current template, as kubectl's UP-TO-DATE.
        cell(`${d.counts['updatedReplicas'] ?? 0} / ${d.desired}`),
        cell(conditions(d.conditions)),
        cell(
          ...d.instances.map((i) =>
            el(
              'div',
              i.tone,
              explainLink('instance', i.name, i.namespace),
              ` ${i.ready} ${i.reason}${i.quota ? ` (quota ${i.quota})` : ''}`,
            ),
          ),
        ),
      ),
    ),
    'no WorkloadDeployment',
    5,
  );
}

/** A cell's health: unreachable or not Ready is bad, not probed yet unknown. */
const health = (x: CellRow) =>
  x.reachable === 'False' || x.ready === 'False'
    ? 'bad'
    : x.reachable === 'True' && x.ready === 'True'
      ? 'good'
      : 'unknown';

const reach = (x: CellRow) => ({ True: 'reachable', False: 'unreachable' })[x.reachable] ?? 'not probed yet';

function cellBox(x: CellRow): HTMLElement {
  const [ready, desired] = x.workloads.reduce(([r, d], w) => [r + w.ready, d + w.desired], [0, 0]);
  const box = el(
    'div',
    `cell ${health(x)}`,
    explainLink('cell', x.name),
    el('span', 'count', ` ${ready}/${desired}`),
    ' instances Ready',
    el('div', undefined, `${reach(x)}, last contact ${x.lastContactTime || 'never'}`),
    el(
      'div',
      undefined,
      `${x.ready === 'True' ? 'Ready' : `not Ready: ${x.reason}${x.message ? ` (${x.message})` : ''}`}${x.cordoned ? ', cordoned' : ''}${x.serverVersion ? `, ${x.serverVersion}` : ''}`,
    ),
    ...x.workloads.map((w) =>
      el(
        'div',
        w.reason ? 'bad' : 'note',
        'Workload ',
        explainLink('workload', w.name, w.namespace),
        ` (${w.placement}): ${w.ready} / ${w.desired} Ready${w.reason ? `, ${w.reason}` : ''}`,
      ),
    ),
  );
  box.dataset['cell'] = x.name;
  return box;
}

function showCells(): void {
  if (!workloads) return;
  const only = route().q.get('unreachable') === '1';
  $('local-cell').textContent = `This cluster runs ${workloads.localInstances} instances.`;
  const cities = workloads.cities.flatMap((c) => {
    const cells = c.cells.filter((x) => !only || x.reachable === 'False');
    if (only && !cells.length) return [];
    const city = el(
      'div',
      'city',
      el('h3', undefined, c.city || 'no city'),
      ...c.locations.map((l) =>
        el('div', 'note', explainLink('location', l.name), l.where ? ` (${l.where})` : ''),
      ),
      ...cells.map(cellBox),
    );
    city.dataset['city'] = c.city;
    return [city];
  });
  $('cities').replaceChildren(
    ...(cities.length
      ? cities
      : [el('p', 'note', only ? 'no cell is unreachable' : 'no Cell joined (berth cells join adds one)')]),
  );
}

/** A count of the header: its number in words, red when there is any. */
function count(id: string, n: number | undefined, one: string, many: string): void {
  $(id).textContent = n === undefined ? '' : `${n} ${n === 1 ? one : many}`;
  $(id).className = n ? 'bad' : '';
}

function showCounts(): void {
  const cells = new Map(workloads?.cities.flatMap((c) => c.cells.map((x) => [x.name, x])));
  count(
    'c-invalid',
    policies && policies.policies.filter((r) => bad(r, 'Invalid')).length,
    'invalid policy',
    'invalid policies',
  );
  count('c-held', pods?.heldNodes.length, 'held node', 'held nodes');
  count('c-gated', pods?.pods.length, 'gated pod', 'gated pods');
  count(
    'c-unreachable',
    workloads && [...cells.values()].filter((x) => x.reachable === 'False').length,
    'unreachable cell',
    'unreachable cells',
  );
  count('c-missing', policies?.missing.length, 'missing CRD', 'missing CRDs');
}

async function loadAbout(): Promise<void> {
  const a = await get<AboutSnapshot>('/api/about');
  explainable = a.explainable;
  $('version').textContent = `v${a.version}`;
  const l = a.leader;
  $('leader').textContent =
    `leader: ${l.self ? 'this Berth' : l.holder || 'none'}${l.holder && l.self ? ` (${l.holder})` : ''}`;
  $('leader').title = l.note;
  $('controllers').textContent = `controllers: ${a.controllers.join(', ') || 'none'}`;
}

const loaders: Record<string, () => Promise<void>> = {
  about: async () => {
    await loadAbout();
    showPolicies();
    showEvents();
  },
  nodes: loadNodes,
  policies: async () => {
    policies = await get<PoliciesSnapshot>('/api/policies');
    showPolicies();
    showEvents();
    showCounts();
  },
  pods: async () => {
    pods = await get<PodsSnapshot>('/api/pods');
    showPods();
    showCounts();
  },
  workloads: async () => {
    workloads = await get<WorkloadsSnapshot>('/api/workloads');
    showWorkloads();
    showCells();
    showCounts();
  },
};

/** The stream's state and the sections whose last load failed: the header says the worst. */
let connected = false;
const failing = new Map<string, string>();

function showLive(): void {
  const [failed] = failing;
  $('live').textContent = !connected ? 'reconnecting' : failed ? `${failed[0]}: ${failed[1]}` : 'live';
  $('live').className = connected && !failed ? '' : 'off';
}

function load(sections: string[]): void {
  for (const s of sections)
    loaders[s]?.().then(
      () => failing.delete(s) && showLive(),
      (e: Error) => {
        failing.set(s, e.message);
        showLive();
      },
    );
}

/** Shows the state the address holds: the tab, the filters in their fields, the object explained. */
function apply(): void {
  const { tab, q } = route();
  for (const t of TABS) $(t).hidden = t !== tab;
  for (const a of $('tabs').querySelectorAll('a')) a.classList.toggle('on', a.hash === `#${tab}`);
  for (const [id, key] of [
    ['f-text', 'text'],
    ['p-name', 'name'],
    ['e-name', 'name'],
  ] as const) {
    const input = $<HTMLInputElement>(id);
    if (document.activeElement !== input) input.value = q.get(key) ?? '';
  }
  $<HTMLInputElement>('f-held').checked = q.get('held') === '1';
  // Before the stream's hello, which loads every section, one request would only race another.
  if (connected && tab === 'nodes' && nodeParams(q) !== nodesQuery) load(['nodes']);
  showPolicies();
  showEvents();
  showCells();
  const target = q.get('explain') ?? '';
  if (target !== explained) {
    explained = target;
    if (target) void explain(target);
    else $('explain').hidden = true;
  }
}

function start(): void {
  let typing: number | undefined;
  for (const [id, key] of [
    ['f-text', 'text'],
    ['p-name', 'name'],
    ['e-name', 'name'],
  ] as const)
    $(id).addEventListener('input', (e) => {
      clearTimeout(typing);
      const value = (e.target as HTMLInputElement).value;
      typing = window.setTimeout(() => change({ [key]: value, offset: '' }, true), 150);
    });
  for (const [id, key] of [
    ['f-pool', 'pool'],
    ['f-arch', 'arch'],
    ['p-kind', 'kind'],
    ['p-cond', 'cond'],
    ['e-kind', 'kind'],
    ['e-reason', 'reason'],
  ] as const)
    $(id).addEventListener('change', (e) =>
      change({ [key]: (e.target as HTMLSelectElement).value, offset: '' }),
    );
  $('f-held').addEventListener('change', (e) =>
    change({ held: (e.target as HTMLInputElement).checked ? '1' : '', offset: '' }),
  );
  for (const f of document.querySelectorAll('form')) f.addEventListener('submit', (e) => e.preventDefault());
  for (const id of ['prev', 'next'])
    $(id).addEventListener('click', () => change({ offset: $(id).dataset['offset'] ?? '' }));
  $('explain-close').addEventListener('click', () => change({ explain: '' }));
  $('plan-form').addEventListener('submit', () => void plan());
  $('plan-file').addEventListener('change', (e) => {
    const file = (e.target as HTMLInputElement).files?.[0];
    void file?.text().then((t) => ($<HTMLTextAreaElement>('plan-yaml').value = t));
  });
  // Links and back/forward change the hash; the page follows.
  window.addEventListener('hashchange', apply);

  const stream = new EventSource('/api/stream');
  // hello comes first on every (re)connection: whatever changed meanwhile is read again.
  stream.addEventListener('hello', () => {
    connected = true;
    showLive();
    load(Object.keys(loaders));
  });
  stream.addEventListener('change', (e) => load(JSON.parse((e as MessageEvent<string>).data) as string[]));
  stream.addEventListener('error', () => {
    connected = false;
    showLive();
  });
  apply();
}

start();
