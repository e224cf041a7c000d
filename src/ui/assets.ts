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
  <h1>Berth</h1>
  <nav>
    <a href="#nodes">Nodes</a> <a href="#policies">Policies</a> <a href="#pods">Pods</a>
    <a href="#workloads">Workloads</a>
  </nav>
  <span id="live" class="off">connecting</span>
</header>
<main>
  <section id="nodes">
    <h2>Nodes <small id="node-count"></small></h2>
    <form id="node-filter">
      <input id="f-text" type="search" placeholder="filter: name, label key=value, ...">
      <select id="f-pool"><option value="">every pool</option></select>
      <select id="f-arch"><option value="">every architecture</option></select>
      <label><input id="f-held" type="checkbox"> held by a startup gate</label>
    </form>
    <table>
      <thead><tr><th>Node</th><th>Pool</th><th>Arch</th><th>Startup gates</th><th>Set by Berth</th><th>Labels</th></tr></thead>
      <tbody id="node-rows"></tbody>
    </table>
    <div class="pager"><button id="prev">previous</button> <span id="page"></span> <button id="next">next</button></div>
  </section>
  <section id="policies">
    <h2>Policies</h2>
    <p id="missing" class="note"></p>
    <table>
      <thead><tr><th>Kind</th><th>Name</th><th>Counts</th><th>Conditions</th></tr></thead>
      <tbody id="policy-rows"></tbody>
    </table>
    <h3>Warning events of the last hour</h3>
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
    <h3>Cells by city</h3>
    <p class="note" id="local-cell"></p>
    <ul id="cells"></ul>
  </section>
  <aside id="explain" hidden>
    <h2 id="explain-title"></h2>
    <button id="explain-close">close</button>
    <pre id="explain-text"></pre>
  </aside>
</main>
</body>
</html>
`;

export const pageCss = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; }
header { display: flex; gap: 1.5em; align-items: center; padding: .5em 1em; background: #1d3557; color: #fff; position: sticky; top: 0; }
header a { color: #fff; } h1 { font-size: 1.2em; margin: 0; }
#live { margin-left: auto; font-size: .9em; } #live.off { color: #f4a261; }
main { padding: 0 1em 2em; } section { margin-top: 1.5em; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; vertical-align: top; padding: 2px 6px; border-bottom: 1px solid #ddd; }
th { background: #f1f1f1; } td { max-width: 40em; overflow-wrap: anywhere; }
.tag { display: inline-block; background: #eef; border-radius: 3px; padding: 0 4px; margin: 1px; font: 12px monospace; }
.tag.berth { background: #def7e3; } .held { color: #b00020; font-weight: bold; } .note { color: #666; }
a.object { cursor: pointer; color: #1d3557; text-decoration: underline; }
#explain { position: fixed; right: 1em; top: 3.5em; bottom: 1em; width: min(60em, 60vw); background: #fff; border: 1px solid #999; padding: 1em; overflow: auto; box-shadow: 0 2px 12px #0004; }
#explain pre { white-space: pre-wrap; font-size: 12px; }
form { margin: .5em 0; display: flex; gap: .5em; } #f-text { flex: 1; }
`;
