// The Examples section of each command's help, by the command's path. A unit test parses each
// example against the program (test/unit/cli/program.test.ts), so none goes stale, and checks that
// every command has one.

export const EXAMPLES: Record<string, string[]> = {
  '': ['berth explain node node-1', 'berth plan -f policy.yaml', 'berth plan --help'],
  run: [
    'berth run --kubeconfig ~/.kube/config',
    'berth run --leader-elect --controllers labels,gates --berth-namespace berth-system',
  ],
  install: ['berth install', 'berth install --crds-only --context staging'],
  manifests: [
    'berth manifests --workload-namespace shop,payments',
    'berth manifests --kind crds',
    'berth manifests --cell --controllers cells,federation',
  ],
  uninstall: ['berth uninstall --dry-run', 'berth uninstall --berth-namespace berth-system --keep-crds'],
  explain: [
    'berth explain node node-1',
    'berth explain pod shop/web-0',
    'berth explain nodelabelrule/gpu --node node-1',
  ],
  plan: [
    'berth plan -f policy.yaml',
    'berth plan -f policies/ -o json',
    'kubectl get nodelabelrule gpu -o yaml | berth plan --delete -f -',
  ],
  ui: ['berth ui --ui-bind-address 127.0.0.1:8088'],
  rules: ['berth rules test rules.yaml'],
  'rules test': ['berth rules test rules.yaml', 'berth rules test gpu'],
  gates: ['berth gates tolerate warmup -n kube-system'],
  'gates tolerate': [
    'berth gates tolerate warmup -n kube-system --dry-run=server',
    'berth gates tolerate warmup --gate warmup,drivers',
  ],
  agents: ['berth agents test placement.yaml'],
  'agents test': ['berth agents test placement.yaml', 'berth agents test'],
  arch: ['berth arch inspect registry.example/web:1'],
  'arch inspect': [
    'berth arch inspect registry.example/web:1',
    'berth arch inspect registry.example/web:1 --pull-secret secret.yaml',
  ],
  'arch clean': ['berth arch clean --dry-run', 'berth arch clean --force'],
  cells: ['berth cells list'],
  'cells join': [
    'berth cells join dfw-1 --kubeconfig dfw-1.kubeconfig --location DFW --namespaces shop --management-kubeconfig mgmt.kubeconfig',
  ],
  'cells list': ['berth cells list -o yaml'],
  sandbox: ['berth sandbox up --nodes 5', 'berth sandbox down'],
  'sandbox build': ['berth sandbox build --registry', 'berth sandbox build --kubernetes-version 1.35'],
  'sandbox up': [
    'berth sandbox up --nodes 5',
    'berth sandbox up --name old --kubernetes-version 1.35',
    'berth sandbox up --name fed --cells DFW,LHR',
  ],
  'sandbox down': ['berth sandbox down --purge'],
  'sandbox status': ['berth sandbox status -o json'],
  'sandbox kubeconfig': ['export KUBECONFIG=$(berth sandbox kubeconfig)'],
  'sandbox user': ['berth sandbox user alice --group dev'],
  completion: ['source <(berth completion bash)'],
  version: ['berth version'],
};

/**
 * The examples of a command by its path (`sandbox up`). `explain KIND` has its own, made from the
 * kind: a namespaced kind's (`namespaced`) name a namespace.
 */
export function examplesOf(path: string, namespaced: boolean): string[] {
  const given = EXAMPLES[path];
  if (given) return given;
  const [parent, kind] = path.split(' ');
  if (parent !== 'explain' || !kind) return [];
  return namespaced
    ? [`berth explain ${kind} shop/web`, `berth explain ${kind} web -n shop -o yaml`]
    : [`berth explain ${kind} example`, `berth explain ${kind} example -o yaml`];
}
