import { fstatSync } from 'node:fs';
import { pino, type Logger, type DestinationStream } from 'pino';

export type { Logger };

/** Paths pino blanks out wherever they appear in a log record: secrets never reach a log line. */
const REDACT = [
  'secret',
  '*.secret',
  'newSecret',
  '*.newSecret',
  'token',
  '*.token',
  'authorization',
  '*.authorization',
  'req.headers.authorization',
  'headers.authorization',
];

export interface LoggerOptions {
  /** Start each line with its syslog priority (`<4>` for warn...): see syslogPrefixWanted. */
  readonly syslogPrefix?: boolean;
}

/** The root logger: JSON lines on stdout (journald keeps them), or on `destination`. */
export function createLogger(level: string, destination?: DestinationStream, options: LoggerOptions = {}): Logger {
  const stream = destination ?? pino.destination({ dest: 1, sync: true });
  return pino(
    {
      name: 'hookrelay',
      level,
      redact: { paths: REDACT, censor: '[redacted]' },
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    options.syslogPrefix ? withSyslogPrefix(stream) : stream,
  );
}

/**
 * The syslog priority (RFC 5424 severity) of each pino level: what systemd-journald reads
 * from a `<N>` at the start of a line (SyslogLevelPrefix=yes, its default), so that
 * `journalctl -p warning` finds warnings and worse.
 */
export const SYSLOG_PRIORITY: Readonly<Record<number, number>> = { 10: 7, 20: 7, 30: 6, 40: 4, 50: 3, 60: 2 };

/**
 * A destination that writes each line behind its level's `<N>` prefix. pino tells a stream
 * that asks for it (the metadata symbol, as its multistream does) the level of the line it is
 * about to write.
 */
export function withSyslogPrefix(destination: DestinationStream): DestinationStream {
  const prefixed = {
    [pino.symbols.needsMetadataGsym]: true,
    lastLevel: 30,
    write(line: string): void {
      destination.write(`<${SYSLOG_PRIORITY[prefixed.lastLevel] ?? 6}>${line}`);
    },
  };
  return prefixed as DestinationStream;
}

/**
 * Whether the daemon's log lines should carry syslog priority prefixes: `on`, `off`, or
 * `auto`: when standard output (`fd`) is the stream systemd named in JOURNAL_STREAM
 * (`device:inode`), as systemd's documentation says to check; so a process that inherits the
 * variable but writes elsewhere (a pipe, a file) keeps plain JSON lines.
 */
export function syslogPrefixWanted(setting: 'auto' | 'on' | 'off', journalStream: string | null, fd = 1): boolean {
  if (setting !== 'auto') return setting === 'on';
  const match = journalStream === null ? null : /^(\d+):(\d+)$/.exec(journalStream.trim());
  if (match === null) return false;
  try {
    const st = fstatSync(fd, { bigint: true });
    return st.dev === BigInt(match[1]!) && st.ino === BigInt(match[2]!);
  } catch {
    return false;
  }
}

/**
 * What the daemon does with an exception nothing caught, or a promise rejection nothing
 * handled: one JSON line at fatal level (the error with its stack, and where it came from),
 * written synchronously, then exit 1, which the systemd unit restarts. The process is in an
 * unknown state by then, so nothing else is attempted; SQLite's WAL keeps every committed
 * transaction, and leases let what was in flight be attempted again.
 */
export function fatalHandler(log: Logger, exit: (code: number) => void = (code) => process.exit(code)) {
  return (err: unknown, origin: 'uncaughtException' | 'unhandledRejection'): void => {
    try {
      log.fatal({ err, origin }, origin === 'unhandledRejection' ? 'unhandled promise rejection; exiting' : 'uncaught exception; exiting');
      log.flush?.();
    } finally {
      exit(1);
    }
  };
}

/** Routes uncaught exceptions and unhandled rejections of this process to fatalHandler(log). */
export function logFatalErrors(log: Logger): void {
  const handle = fatalHandler(log);
  process.on('uncaughtException', (err, origin) => handle(err, origin));
  process.on('unhandledRejection', (reason) => handle(reason, 'unhandledRejection'));
}
