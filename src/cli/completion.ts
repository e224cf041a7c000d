// `berth completion bash|zsh`: a completion script written from the program itself (its commands
// and options), so it never lags behind them. zsh runs the bash script through bashcompinit, as
// many CLIs' zsh completion does.
import { SUMMARIES } from '../command/summaries.ts';
import { Argument, Command } from 'commander';

/** Every command path (`berth sandbox up`) with the words that may follow it: subcommands and options. */
export function completionWords(program: Command): Map<string, string[]> {
  const words = new Map<string, string[]>();
  const walk = (c: Command, path: string) => {
    const subs = c.commands.filter((s) => s.name() !== 'help');
    const flags = c.options
      .filter((o) => !o.hidden)
      .flatMap((o) => [o.short, o.long].filter((f): f is string => !!f));
    words.set(path, [...subs.flatMap((s) => [s.name(), ...s.aliases()]), ...flags, '--help']);
    for (const s of subs) for (const n of [s.name(), ...s.aliases()]) walk(s, `${path} ${n}`);
  };
  walk(program, program.name());
  return words;
}

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** The bash script: finds the deepest command path typed so far, and offers its words. */
export function bashCompletion(program: Command, commands: string[]): string {
  const words = completionWords(program);
  const entries = [...words].map(([path, w]) => `  [${quote(path)}]=${quote(w.join(' '))}`).join('\n');
  const name = program.name();
  return `# ${name} completion for bash: source <(${name} completion bash)
declare -A _berth_words=(
${entries}
)
_berth() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path=${quote(name)} i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    [[ -n "\${_berth_words["$path $w"]+x}" ]] && path="$path $w"
  done
  COMPREPLY=($(compgen -W "\${_berth_words[$path]}" -- "$cur"))
}
complete -F _berth ${commands.join(' ')}
`;
}

export function completionCommand(whole: () => Promise<Command>): Command {
  return new Command('completion')
    .description(SUMMARIES.completion.description)
    .addArgument(new Argument('<shell>').choices(['bash', 'zsh']))
    .action(async (shell: 'bash' | 'zsh') => {
      // For berth and for kubectl's plugin entry (kubectl-berth, run as `kubectl berth`).
      const script = bashCompletion(await whole(), ['berth', 'kubectl-berth']);
      process.stdout.write(
        shell === 'bash' ? script : `autoload -U +X bashcompinit && bashcompinit\n${script}`,
      );
    });
}
