// The apiserver's Warning response headers (RFC 7234 `299 - "text"`, as client-go reads them):
// deprecated APIs, fields dropped or unknown. Each text is logged the first time it comes and
// counted every time, as client-go's deduplicating warning writer does.
import { rootLogger } from '../observability/log.ts';
import { restMetrics } from '../observability/metrics.ts';

/** One warning: code, agent, quoted text (backslash escapes), an optional quoted date. */
const WARNING = /^\s*(\d{3})\s+(\S+)\s+"((?:[^"\\]|\\.)*)"(?:\s+"[^"]*")?\s*(?:,|$)/;

/** The texts of the 299 warnings in the Warning header values (a value may hold several). */
export function parseWarnings(values: readonly string[]): string[] {
  const texts: string[] = [];
  for (const value of values) {
    let rest = value;
    for (let m = WARNING.exec(rest); m; m = WARNING.exec(rest)) {
      if (m[1] === '299') texts.push(m[3]!.replace(/\\(.)/g, '$1'));
      rest = rest.slice(m[0].length);
    }
  }
  return texts;
}

/** Texts are logged once each, up to this many (an apiserver could send endless new ones), and cut. */
const MAX_TEXTS = 1000;
const MAX_TEXT = 512;

export class WarningLog {
  private readonly seen = new Set<string>();

  /** Counts each warning and returns those logged now: the texts not seen before. */
  note(host: string, values: readonly string[]): string[] {
    const fresh: string[] = [];
    for (const text of parseWarnings(values)) {
      restMetrics.warnings.inc({ host });
      const cut = text.length > MAX_TEXT ? `${text.slice(0, MAX_TEXT)}…` : text;
      if (this.seen.has(cut) || this.seen.size >= MAX_TEXTS) continue;
      this.seen.add(cut);
      fresh.push(cut);
      rootLogger.warn({ host, warning: cut }, 'the apiserver warned (logged once per text)');
    }
    return fresh;
  }
}

/** One log for the process: a text is news once, whichever client received it. */
export const apiWarnings = new WarningLog();
