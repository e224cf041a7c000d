// JSON logs through pino. Child loggers carry the controller and object keys, so one grep finds
// everything Berth did to one object.
import { pino, type Logger } from 'pino';

export type { Logger };

export const rootLogger: Logger = pino({
  level: process.env['BERTH_LOG_LEVEL'] ?? 'info',
  base: { app: 'berth' },
  timestamp: pino.stdTimeFunctions.isoTime,
});

export function setLogLevel(level: string): void {
  rootLogger.level = level;
}

/** An error's message for a log field or a condition. */
export const errorText = (e: unknown): string => (e instanceof Error ? e.message : String(e));

const throttleMs = 60_000;

/**
 * Warnings of what can come in floods (requests refused, Events dropped): at most one line a minute
 * per key, with `count`, how many times it happened since the last line. A flood of bad requests
 * must not become one of logs.
 */
export class ThrottledLog {
  private readonly log: Logger;
  private readonly last = new Map<string, { at: number; count: number }>();

  constructor(log: Logger) {
    this.log = log;
  }

  warn(key: string, fields: Record<string, unknown>, msg: string): void {
    const now = Date.now();
    const last = this.last.get(key);
    if (last && now - last.at < throttleMs) {
      last.count++;
      return;
    }
    this.last.set(key, { at: now, count: 0 });
    this.log.warn({ ...fields, count: (last?.count ?? 0) + 1 }, msg);
  }
}
