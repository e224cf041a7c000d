// What `berth --help` says of each top-level command: its term in the list and its description.
// Each command's module declares its description from here, and program.ts lists them without
// loading a module (a test checks each term against what commander makes of its command).
export const SUMMARIES = {
  run: { term: 'run [options]', description: 'Run the Berth controller manager' },
  install: {
    term: 'install [options]',
    description:
      'Install (or upgrade) the CRDs with server-side apply, and wait until they are served; create the ' +
      "webhook configurations Berth registers into, and the admission policy that bounds Berth's Pod patches",
  },
  manifests: {
    term: 'manifests [options]',
    description: 'Print the generated manifests as YAML (CRDs and RBAC come from the same code that runs)',
  },
  uninstall: {
    term: 'uninstall [options]',
    description:
      "The last step of uninstalling, once Berth's objects are deleted and Berth is removed: takes off what " +
      'Berth still has on nodes and pods, deletes its webhook configurations, certificate Secret, Lease and CRDs',
  },
  explain: { term: 'explain [kind/name]', description: 'Explain what Berth does to an object, and why' },
  plan: {
    term: 'plan [options]',
    description:
      "Show what applying Berth's objects would do now (nodes labelled, tainted, held; pods evicted, gated; instances granted), " +
      'or with --delete what deleting them would undo. Writes nothing. Exit code 0: no change, 2: changes, 1: error.',
  },
  ui: {
    term: 'ui [options]',
    description: "Serve Berth's read-only web page alone: informers and the page, no controller",
  },
  rules: { term: 'rules', description: 'Derived node label rules' },
  gates: { term: 'gates', description: 'Startup gates: helpers for NodeStartupGates' },
  agents: { term: 'agents', description: 'Agent placement: helpers for AgentPlacements' },
  arch: { term: 'arch', description: 'Architecture-aware placement: helpers for ArchPlacements' },
  cells: { term: 'cells', description: 'Cells of a management plane: join them, list them' },
  sandbox: {
    term: 'sandbox',
    description:
      'A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) ' +
      'with kwok nodes, built from Go modules.',
  },
  completion: {
    term: 'completion <shell>',
    description: 'Print a shell completion script (bash or zsh): source <(berth completion bash)',
  },
  version: { term: 'version [options]', description: "Print Berth's version" },
} as const;
