// The log flags of the long-running commands (run, ui).
import { Option } from 'commander';
import { LOG_FORMATS, setLogFormat, setLogLevel, type LogFormat } from '../runtime/observability/log.ts';

export function logOptions(): Option[] {
  return [
    new Option('--log-level <level>', 'log level')
      .choices(['debug', 'info', 'warn', 'error'])
      .default('info'),
    new Option('--log-format <format>', 'json: one JSON object a line; text: one readable line an entry')
      .choices(LOG_FORMATS)
      .default('json'),
  ];
}

/** Applies the parsed log flags to the process's logger. */
export function useLogOptions(o: { logLevel: string; logFormat: LogFormat }): void {
  setLogLevel(o.logLevel);
  setLogFormat(o.logFormat);
}
