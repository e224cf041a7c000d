// The page's fixed markup and style (no cluster data: page/app.ts fills it with textContent).

export const pageHtml = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Berth</title>
<link rel="stylesheet" href="/style.css">
<script type="module" src="/app.js"></script>
</head>
<body>
<header>
  <div class="bar">
    <h1>Berth <small id="version"></small></h1>
    <nav id="tabs">
      <a href="#nodes">Nodes</a> <a href="#policies">Policies</a> <a href="#events">Events</a>
      <a href="#pods">Pods</a> <a href="#workloads">Workloads</a> <a href="#cells">Cells</a>
      <a href="#plan">Plan</a>
    </nav>
    <span id="live" class="off">connecting</span>
  </div>
  <div id="summary">
    <span id="leader"></span> <span id="controllers"></span>
    <span id="counts">
      <a id="c-invalid" href="#policies?cond=Invalid"></a> <a id="c-held" href="#nodes?held=1"></a>
      <a id="c-gated" href="#pods"></a> <a id="c-unreachable" href="#cells?unreachable=1"></a>
      <a id="c-missing" href="#policies"></a>
    </span>
  </div>
</header>
<main>
  <section id="nodes">
    <h2>Nodes <small id="node-count"></small></h2>
    <form id="node-filter">
      <input id="f-text" type="search" placeholder="filter: name, label key=value, ...">
      <select id="f-pool"><option value="" data-fixed>every pool</option></select>
      <select id="f-arch"><option value="" data-fixed>every architecture</option></select>
      <label><input id="f-held" type="checkbox"> held by a startup gate</label>
    </form>
    <table>
      <thead><tr><th>Node</th><th>Pool</th><th>Arch</th><th>Startup gates</th><th>Set by Berth</th><th>Labels</th></tr></thead>
      <tbody id="node-rows"></tbody>
    </table>
    <div class="pager"><button id="prev">previous</button> <span id="page"></span> <button id="next">next</button></div>
  </section>
  <section id="policies">
    <h2>Policies <small id="policy-count"></small></h2>
    <p id="missing" class="note"></p>
    <form id="policy-filter">
      <select id="p-kind"><option value="" data-fixed>every kind</option></select>
      <input id="p-name" type="search" placeholder="name">
      <select id="p-cond"><option value="" data-fixed>any condition</option><option value="bad" data-fixed>a condition is bad</option></select>
    </form>
    <table>
      <thead><tr><th>Kind</th><th>Name</th><th>Counts</th><th>Conditions</th></tr></thead>
      <tbody id="policy-rows"></tbody>
    </table>
  </section>
  <section id="events">
    <h2>Warning events of the last hour <small id="event-count"></small></h2>
    <form id="event-filter">
      <select id="e-kind"><option value="" data-fixed>every kind</option></select>
      <input id="e-name" type="search" placeholder="object">
      <select id="e-reason"><option value="" data-fixed>every reason</option></select>
    </form>
    <table>
      <thead><tr><th>Last seen</th><th>Object</th><th>Reason</th><th>Note</th><th>Count</th></tr></thead>
      <tbody id="event-rows"></tbody>
    </table>
  </section>
  <section id="pods">
    <h2>Pods Berth holds</h2>
    <table>
      <thead><tr><th>Pod</th><th>Scheduling gate</th><th>Reason</th></tr></thead>
      <tbody id="pod-rows"></tbody>
    </table>
    <h3>Nodes held by startup gates (pods that do not tolerate the gate wait for them)</h3>
    <ul id="held-nodes"></ul>
  </section>
  <section id="workloads">
    <h2>Workloads</h2>
    <table>
      <thead><tr><th>WorkloadDeployment</th><th>Ready / desired</th><th>Rollout (up-to-date)</th><th>Conditions</th><th>Instances</th></tr></thead>
      <tbody id="workload-rows"></tbody>
    </table>
  </section>
  <section id="cells">
    <h2>Cells by city</h2>
    <p class="note" id="local-cell"></p>
    <div id="cities"></div>
  </section>
  <section id="plan">
    <h2>Plan a change</h2>
    <p class="note">What applying (or deleting) Berth's objects would do to the cluster as it is now:
    <code>berth plan -f</code>, run by this page with the flags its Berth runs with. Nothing is
    written: the page reads the cluster and shows the plan; apply the file yourself.</p>
    <form id="plan-form">
      <textarea id="plan-yaml" rows="12" placeholder="paste YAML: NodeLabelRule, NodeStartupGate, AgentPlacement, ArchPlacement, Workload, Quota..." spellcheck="false"></textarea>
      <div class="row">
        <input id="plan-file" type="file" accept=".yaml,.yml,.json">
        <label><input id="plan-delete" type="checkbox"> plan deleting these objects (--delete)</label>
        <button id="plan-run" type="submit">plan</button>
      </div>
    </form>
    <p id="plan-status"></p>
    <div id="plan-result"></div>
  </section>
  <aside id="explain" hidden>
    <h2 id="explain-title"></h2>
    <button id="explain-close">close</button>
    <div id="explain-view"></div>
    <pre id="explain-lines"></pre>
    <details><summary>as <code>berth explain</code> prints it</summary><pre id="explain-text"></pre></details>
  </aside>
</main>
</body>
</html>
`;

export const pageCss = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { background: #1d3557; color: #fff; position: sticky; top: 0; padding: .4em 1em; }
.bar { display: flex; gap: 1.5em; align-items: center; } header a { color: #fff; }
h1 { font-size: 1.2em; margin: 0; } h1 small { font-weight: normal; opacity: .8; }
nav a { padding: 0 .3em; } nav a.on { background: #fff; color: #1d3557; border-radius: 3px; }
#summary { display: flex; gap: 1.5em; flex-wrap: wrap; font-size: .9em; margin-top: .2em; }
#counts a { margin-right: .8em; } #counts a.bad { color: #ffb3b3; font-weight: bold; }
#live { margin-left: auto; font-size: .9em; } #live.off { color: #f4a261; }
main { padding: 0 1em 2em; } section { margin-top: 1em; } section[hidden] { display: none; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; vertical-align: top; padding: 2px 6px; border-bottom: 1px solid #ddd; }
th { background: #f1f1f1; } td { max-width: 40em; overflow-wrap: anywhere; }
.tag { display: inline-block; background: #eef; border-radius: 3px; padding: 0 4px; margin: 1px; font: 12px monospace; }
.tag.berth { background: #def7e3; } .note, .good { color: #666; }
.bad, .held { color: #b00020; } .unknown { color: #b36b00; }
a.object { cursor: pointer; color: #1d3557; text-decoration: underline; }
#explain { position: fixed; right: 1em; top: 5em; bottom: 1em; width: min(60em, 60vw); background: #fff; border: 1px solid #999; padding: 1em; overflow: auto; box-shadow: 0 2px 12px #0004; }
#explain pre { white-space: pre-wrap; font-size: 12px; }
#explain h3 { font-size: 1em; margin: .8em 0 .2em; } #explain li div { color: #555; }
#explain .conditions td:not(:last-child) { white-space: nowrap; overflow-wrap: normal; }
#plan-form { flex-direction: column; } #plan-yaml { width: 100%; font: 12px monospace; }
#plan-form .row { display: flex; gap: 1em; align-items: center; }
.op { font: bold 13px monospace; padding-right: .5em; } .op-plus { color: #2a7d2e; } .op-minus, .op-bang { color: #b00020; } .op-tilde { color: #b36b00; }
.warning { background: #fff3cd; border-left: 4px solid #e9a23b; padding: .2em .5em; margin: .2em 0; }
.error { background: #fde2e4; border-left: 4px solid #b00020; padding: .2em .5em; margin: .2em 0; }
form { margin: .5em 0; display: flex; gap: .5em; } #f-text, #p-name, #e-name { flex: 1; }
#cities { display: grid; grid-template-columns: repeat(auto-fill, minmax(16em, 1fr)); gap: .8em; }
.city { border: 1px solid #ccc; border-radius: 6px; padding: .5em; } .city h3 { margin: 0; font-size: 1.3em; }
.cell { border-left: 6px solid #999; margin-top: .4em; padding: .2em .5em; background: #f7f7f7; }
.cell.good { border-color: #2a9d8f; color: inherit; } .cell.bad { border-color: #b00020; color: inherit; } .cell.unknown { border-color: #e9a23b; color: inherit; }
.count { font-size: 1.2em; font-weight: bold; }
`;
