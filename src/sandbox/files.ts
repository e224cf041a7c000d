// The sandbox's file helpers: kubeconfigs written whole, the end of a component's log, and what
// /proc says of a process.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';

/** Writes a kubeconfig aside and renames it: a process reading the file (another test, a Berth) never sees half of it. */
export function writeFileAtomic(file: string, text: string): void {
  const tmp = `${file}.${process.pid}`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}

/** The last lines of a component's log, without the flag dump that Kubernetes components start with. */
export function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8')
      .trimEnd()
      .split('\n')
      .filter((l) => !l.includes('] FLAG: --'))
      .slice(-lines)
      .join('\n');
  } catch {
    return '';
  }
}

export function isZombie(pid: number): boolean {
  try {
    return / Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\)/, ''));
  } catch {
    return true;
  }
}
