// Logs through pino, as JSON (a line an object, the level by name) or as text for a terminal.
// Child loggers carry the controller and object keys, so one grep finds everything Berth did to one
// object.
import { createRequire } from 'node:module';
import { pino, type Logger } from 'pino';
import type * as PinoPretty from 'pino-pretty';

export type { Logger };

export const LOG_FORMATS = ['json', 'text'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

// One destination whichever the format, written synchronously: a crash loses no line already logged.
const stdout = pino.destination({ dest: 1, sync: true });
const toStdout = (line: string) => void stdout.write(line);
const text = (): ((line: string) => void) => {
  // Loaded only for text: JSON, the default, needs none of it (about 1 MB resident in each thread).
  const { prettyFactory } = createRequire(import.meta.url)('pino-pretty') as typeof PinoPretty;
  const pretty = prettyFactory({
    colorize: false,
    singleLine: true,
    translateTime: 'SYS:standard',
    ignore: 'app',
  });
  return (line) => toStdout(pretty(line));
};
let format: LogFormat = 'json';
let write: (line: string) => void = toStdout;

export const rootLogger: Logger = pino(
  {
    level: process.env['BERTH_LOG_LEVEL'] ?? 'info',
    base: { app: 'berth' },
    timestamp: pino.stdTimeFunctions.isoTime,
    // "level":"info" rather than pino's 30: what log pipelines and people read.
    formatters: { level: (label) => ({ level: label }) },
  },
  { write: (line: string) => write(line) },
);

export function setLogLevel(level: string): void {
  rootLogger.level = level;
}

/** json (the default), or text: one readable line an entry (pino-pretty, in this thread). */
export function setLogFormat(f: LogFormat): void {
  format = f;
  write = f === 'text' ? text() : toStdout;
}

export const logFormat = (): LogFormat => format;

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
