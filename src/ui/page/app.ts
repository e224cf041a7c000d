// The page: fetches the server's JSON snapshots, and again for the sections an event of /api/stream
// names. Every value from the cluster goes into the DOM as text (textContent, text nodes), never
// as markup; the server's Content-Security-Policy forbids inline script besides.
import type {
  ConditionView,
  NodePage,
  NodeRow,
  PoliciesSnapshot,
  PodsSnapshot,
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

async function get<T>(path: string): Promise<T> {
  const res = await fetch(path);
  const body = (await res.json()) as T & { error?: string };
  if (!res.ok) throw new Error(body.error ?? `${res.status}`);
  return body;
}

/** A link that shows what `berth explain` says of the object. */
function explainLink(kind: string, name: string, namespace?: string): HTMLElement {
  const a = el('a', 'object', namespace ? `${namespace}/${name}` : name);
  a.addEventListener('click', () => void explain(kind, name, namespace));
  return a;
}

let explainAsked = 0;

async function explain(kind: string, name: string, namespace?: string): Promise<void> {
  const q = new URLSearchParams({ kind, name, ...(namespace ? { namespace } : {}) });
  // Only the last object asked about is shown: an earlier answer that comes later is dropped.
  const asked = ++explainAsked;
  $('explain').hidden = false;
  $('explain-title').textContent = `berth explain ${kind} ${namespace ? `${namespace}/` : ''}${name}`;
  $('explain-text').textContent = 'asking...';
  let text: string;
  try {
    text = (await get<{ lines: string[] }>(`/api/explain?${q}`)).lines.join('\n');
  } catch (e) {
    text = `could not explain: ${(e as Error).message}`;
  }
  if (asked === explainAsked) $('explain-text').textContent = text;
}

const conditions = (cs: ConditionView[]) =>
  el(
    'div',
    undefined,
    ...cs.map((c) =>
      el(
        'div',
        c.status === 'True' ? undefined : 'held',
        `${c.type}=${c.status} ${c.reason}${c.message ? `: ${c.message}` : ''}`,
      ),
    ),
  );

// Nodes: the server filters and pages, so 5,000 nodes cost the page one page of rows.
const PAGE = 100;
const filter = { text: '', pool: '', arch: '', held: false, offset: 0 };
/** The latest nodes request: an answer to an older one (another filter) is dropped. */
let nodesAsked = 0;

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

function options(id: string, values: string[], selected: string): void {
  const select = $<HTMLSelectElement>(id);
  const first = select.options[0]!;
  select.replaceChildren(
    first,
    ...values.map((v) => Object.assign(el('option', undefined, v), { value: v })),
  );
  select.value = selected;
}

async function loadNodes(): Promise<void> {
  const q = new URLSearchParams({
    text: filter.text,
    pool: filter.pool,
    arch: filter.arch,
    held: String(filter.held),
    offset: String(filter.offset),
    limit: String(PAGE),
  });
  const asked = ++nodesAsked;
  const p = await get<NodePage & { synced: boolean }>(`/api/nodes?${q}`);
  if (asked !== nodesAsked) return;
  filter.offset = p.offset;
  fill('node-rows', p.rows.map(nodeRow), p.synced ? 'no node matches' : 'reading the nodes...', 6);
  $('node-count').textContent = `${p.matched} of ${p.total}`;
  $('page').textContent = p.matched ? `${p.offset + 1}-${p.offset + p.rows.length} of ${p.matched}` : '';
  $<HTMLButtonElement>('prev').disabled = p.offset === 0;
  $<HTMLButtonElement>('next').disabled = p.offset + p.rows.length >= p.matched;
  options('f-pool', p.pools, filter.pool);
  options('f-arch', p.archs, filter.arch);
}

async function loadPolicies(): Promise<void> {
  const p = await get<PoliciesSnapshot>('/api/policies');
  $('missing').textContent = p.missing.length ? `Not installed (berth install): ${p.missing.join(', ')}` : '';
  fill(
    'policy-rows',
    p.policies.map((r) =>
      el(
        'tr',
        undefined,
        cell(r.kind),
        cell(r.namespace ? `${r.namespace}/${r.name}` : r.name),
        cell(...Object.entries(r.counts).map(([k, v]) => tag(`${k} ${v}`))),
        cell(conditions(r.conditions)),
      ),
    ),
    'no policy',
    4,
  );
  fill(
    'event-rows',
    p.events.map((e) =>
      el(
        'tr',
        undefined,
        cell(e.time),
        cell(e.regarding),
        cell(e.reason),
        cell(e.note),
        cell(String(e.count)),
      ),
    ),
    'no Warning event in the last hour',
    5,
  );
}

async function loadPods(): Promise<void> {
  const p = await get<PodsSnapshot>('/api/pods');
  fill(
    'pod-rows',
    p.pods.map((h) =>
      el('tr', undefined, cell(explainLink('pod', h.name, h.namespace)), cell(h.gate), cell(h.reason)),
    ),
    'Berth holds no pod',
    3,
  );
  const held = p.heldNodes.map((n) =>
    el('li', undefined, explainLink('node', n.name), `: ${n.waiting.join('; ')}`),
  );
  $('held-nodes').replaceChildren(...(held.length ? held : [el('li', 'note', 'none')]));
}

async function loadWorkloads(): Promise<void> {
  const w = await get<WorkloadsSnapshot>('/api/workloads');
  fill(
    'workload-rows',
    w.workloads.map((d) =>
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
              i.ready === 'True' ? undefined : 'held',
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
  $('local-cell').textContent = `This cluster runs ${w.localInstances} instances.`;
  const cities = w.cities.map((c) =>
    el(
      'li',
      undefined,
      el('strong', undefined, c.city || 'no city'),
      c.locations.length ? ` (${c.locations.join('; ')})` : '',
      ...c.cells.map((x) =>
        el(
          'div',
          x.ready === 'True' ? undefined : 'held',
          el('span', 'object', x.name),
          ` ${{ True: 'reachable', False: 'unreachable' }[x.reachable] ?? 'not probed yet'}, ${x.ready === 'True' ? 'Ready' : `not Ready: ${x.reason}${x.message ? ` (${x.message})` : ''}`}${x.cordoned ? ', cordoned' : ''}${x.serverVersion ? `, ${x.serverVersion}` : ''}`,
          ...x.workloads.map((w) =>
            el(
              'div',
              w.reason ? 'held' : 'note',
              'Workload ',
              explainLink('workload', w.name, w.namespace),
              ` (${w.placement}): ${w.ready} / ${w.desired} Ready${w.reason ? `, ${w.reason}` : ''}`,
            ),
          ),
        ),
      ),
    ),
  );
  $('cells').replaceChildren(
    ...(cities.length ? cities : [el('li', 'note', 'no Cell joined (berth cells join adds one)')]),
  );
}

const loaders: Record<string, () => Promise<void>> = {
  nodes: loadNodes,
  policies: loadPolicies,
  pods: loadPods,
  workloads: loadWorkloads,
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

function start(): void {
  let typing: number | undefined;
  $('f-text').addEventListener('input', (e) => {
    clearTimeout(typing);
    typing = window.setTimeout(() => {
      filter.text = (e.target as HTMLInputElement).value;
      filter.offset = 0;
      load(['nodes']);
    }, 150);
  });
  for (const [id, key] of [
    ['f-pool', 'pool'],
    ['f-arch', 'arch'],
  ] as const)
    $(id).addEventListener('change', (e) => {
      filter[key] = (e.target as HTMLSelectElement).value;
      filter.offset = 0;
      load(['nodes']);
    });
  $('f-held').addEventListener('change', (e) => {
    filter.held = (e.target as HTMLInputElement).checked;
    filter.offset = 0;
    load(['nodes']);
  });
  $('node-filter').addEventListener('submit', (e) => e.preventDefault());
  $('prev').addEventListener(
    'click',
    () => ((filter.offset = Math.max(0, filter.offset - PAGE)), load(['nodes'])),
  );
  $('next').addEventListener('click', () => ((filter.offset += PAGE), load(['nodes'])));
  $('explain-close').addEventListener('click', () => ($('explain').hidden = true));

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
}

start();
