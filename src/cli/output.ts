// `-o json|yaml` for the read-only commands: one structured result, printed as text by the
// command's own printer or as JSON or YAML for scripts and CI.
import { Option } from 'commander';
import { stringify } from 'yaml';

export type OutputFormat = 'text' | 'json' | 'yaml';

export const outputOption = (): Option =>
  new Option('-o, --output <format>', 'output format').choices(['text', 'json', 'yaml']).default('text');

/** Writes `result` to stdout in `format`, as `text` prints it when the format is text. */
export function printResult<T>(format: OutputFormat, result: T, text: (r: T) => string[]): void {
  const out =
    format === 'json'
      ? JSON.stringify(result, null, 2) + '\n'
      : format === 'yaml'
        ? stringify(result)
        : text(result).join('\n') + '\n';
  process.stdout.write(out);
}
