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

/** The root logger: JSON lines on stdout (journald keeps them), or on `destination`. */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      name: 'hookrelay',
      level,
      redact: { paths: REDACT, censor: '[redacted]' },
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    destination ?? pino.destination({ dest: 1, sync: true }),
  );
}
