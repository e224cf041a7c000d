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
