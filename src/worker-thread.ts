import { Worker, type WorkerOptions } from 'node:worker_threads';

/**
 * Starts the worker thread whose entry module is `entry`, given as the URL of its TypeScript
 * source next to the caller (`new URL('./x-worker.ts', import.meta.url)`). Built, that is the
 * compiled `.js` beside it. Under tsx (tests, scripts) a worker does not inherit the
 * TypeScript loader, so it registers tsx's before importing the entry.
 */
export function startWorker(entry: URL, options: WorkerOptions = {}): Worker {
  if (!entry.pathname.endsWith('.ts')) throw new Error(`worker entry ${entry.href} must name the .ts source`);
  const fromSources = import.meta.url.endsWith('.ts');
  if (!fromSources) return new Worker(new URL(entry.href.replace(/\.ts$/, '.js')), options);
  const tsx = import.meta.resolve('tsx/esm/api');
  const code = `import(${JSON.stringify(tsx)}).then((api) => { api.register(); return import(${JSON.stringify(entry.href)}); });`;
  return new Worker(code, { ...options, eval: true });
}
