/**
 * The shape of src/, read as text (issue 28): no file over 500 lines, imports that only run down
 * the layers of the README's "Project layout", no import cycles, and no backend folder of the
 * store (src/store/sqlite/, src/store/pg/) imported from outside src/store/ but by `hookrelay db`.
 *
 * Every import counts, `import type` included: a type import still ties one module to another
 * (the line-batch/line-splitter cycle was two of them). The checks are pure functions of a
 * { path: text } map, so the last group runs each of them on a tree with a planted violation.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { describe, test } from 'node:test';

const ROOT = join(import.meta.dirname, '..');
const MAX_LINES = 500;

type Sources = ReadonlyMap<string, string>;

/** Every .ts file under src/, by its path from the repository root ('src/feed/line-batch.ts'). */
function readSources(): Sources {
  const sources = new Map<string, string>();
  for (const entry of readdirSync(join(ROOT, 'src'), { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts')) continue;
    const path = posix.join(posix.relative(ROOT, entry.parentPath).split('\\').join('/'), entry.name);
    sources.set(path, readFileSync(join(ROOT, path), 'utf8'));
  }
  return sources;
}

/** Lines of a file as an editor counts them (a last newline ends the last line, it does not start one). */
function lineCount(text: string): number {
  if (text === '') return 0;
  return text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
}

function longFiles(sources: Sources): string[] {
  return [...sources].filter(([, text]) => lineCount(text) > MAX_LINES).map(([path, text]) => `${path}: ${lineCount(text)} lines`);
}

// What names another module of ours: a static import or re-export (`import ... from`, `export ...
// from`, a bare `import '...'`; over several lines too), a dynamic `import('...')` with a literal,
// and a worker's entry module, `new URL('./x.ts', import.meta.url)` (see worker-thread.ts). One on a
// comment line (`//`, or ` * ` inside a block comment) is an example, not an import.
const SPECIFIERS = [
  /^\s*(?:import|export)\b[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/gm,
  /^\s*import\s*['"]([^'"]+)['"]/gm,
  /\bimport\(\s*['"]([^'"]+)['"]\s*\)/g,
  /\bnew URL\(\s*['"]([^'"]+\.ts)['"]\s*,\s*import\.meta\.url\s*\)/g,
];

function onCommentLine(text: string, at: number): boolean {
  const line = text.slice(text.lastIndexOf('\n', at) + 1, at);
  return /^\s*(\/\/|\/?\*)/.test(line);
}

/** The files of ours that `path` imports (paths from the root), each once. */
function importsOf(path: string, text: string): string[] {
  const found = new Set<string>();
  for (const pattern of SPECIFIERS) {
    for (const match of text.matchAll(pattern)) {
      const specifier = match[1]!;
      if (!specifier.startsWith('.') || onCommentLine(text, match.index)) continue;
      found.add(posix.normalize(posix.join(posix.dirname(path), specifier)));
    }
  }
  return [...found];
}

function importGraph(sources: Sources): Map<string, string[]> {
  return new Map([...sources].map(([path, text]) => [path, importsOf(path, text)]));
}

/**
 * The layers, lowest first, as the code stands (README "Project layout"). A file may import its
 * own layer and any layer of a lower rank; layers of one rank are peers that never import each
 * other. cli/ sits above relay.ts: `hookrelay serve` starts the composition root, which imports no
 * command. The store's two backends are one layer with its boundary here; who may import them is
 * the backend rule below.
 */
const LAYERS: ReadonlyArray<{ readonly name: string; readonly rank: number; readonly holds: (path: string) => boolean }> = [
  { name: 'domain', rank: 0, holds: (p) => p.startsWith('src/domain/') },
  // Leaf utilities: the root logger, the version, the worker-thread starter.
  { name: 'foundation', rank: 1, holds: (p) => p === 'src/log.ts' || p === 'src/version.ts' || p === 'src/worker-thread.ts' },
  { name: 'config', rank: 2, holds: (p) => p.startsWith('src/config/') },
  { name: 'store', rank: 3, holds: (p) => p.startsWith('src/store/') },
  { name: 'services', rank: 4, holds: (p) => p.startsWith('src/services/') },
  { name: 'feed', rank: 5, holds: (p) => p.startsWith('src/feed/') },
  { name: 'dispatch', rank: 5, holds: (p) => p.startsWith('src/dispatch/') },
  { name: 'api', rank: 5, holds: (p) => p.startsWith('src/api/') },
  { name: 'metrics', rank: 5, holds: (p) => p.startsWith('src/metrics/') },
  // The OpenTelemetry SDK's setup (the spans themselves are started by feed, dispatch and api, through a Tracer).
  { name: 'tracing', rank: 5, holds: (p) => p.startsWith('src/tracing/') },
  { name: 'relay', rank: 6, holds: (p) => p === 'src/relay.ts' || p.startsWith('src/relay/') },
  { name: 'cli', rank: 7, holds: (p) => p === 'src/cli.ts' || p.startsWith('src/cli/') },
];

function layerOf(path: string) {
  return LAYERS.find((l) => l.holds(path));
}

function unlayered(sources: Sources): string[] {
  return [...sources.keys()].filter((path) => layerOf(path) === undefined);
}

/** Imports that run up a layer or sideways to a peer, as 'from -> to (layer -> layer)'. */
function layerViolations(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const violations: string[] = [];
  for (const [from, targets] of graph) {
    const a = layerOf(from);
    for (const to of targets) {
      const b = layerOf(to);
      if (a === undefined || b === undefined || a === b || b.rank < a.rank) continue;
      violations.push(`${from} -> ${to} (${a.name} -> ${b.name}${b.rank === a.rank ? ', a peer' : ', up'})`);
    }
  }
  return violations;
}

/** The import cycles: each strongly connected component of more than one file (or a file importing itself), sorted. */
function importCycles(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  // Tarjan's algorithm, iterative so that no depth of the graph can overflow the stack.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  let next = 0;
  for (const root of graph.keys()) {
    if (index.has(root)) continue;
    const work: Array<{ node: string; edge: number }> = [{ node: root, edge: 0 }];
    index.set(root, next);
    low.set(root, next++);
    stack.push(root);
    onStack.add(root);
    while (work.length > 0) {
      const frame = work[work.length - 1]!;
      const targets = (graph.get(frame.node) ?? []).filter((t) => graph.has(t));
      if (frame.edge < targets.length) {
        const to = targets[frame.edge++]!;
        if (!index.has(to)) {
          index.set(to, next);
          low.set(to, next++);
          stack.push(to);
          onStack.add(to);
          work.push({ node: to, edge: 0 });
        } else if (onStack.has(to)) {
          low.set(frame.node, Math.min(low.get(frame.node)!, index.get(to)!));
        }
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent !== undefined) low.set(parent.node, Math.min(low.get(parent.node)!, low.get(frame.node)!));
      if (low.get(frame.node) !== index.get(frame.node)) continue;
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== frame.node);
      if (component.length > 1 || targets.includes(frame.node)) cycles.push(component.sort());
    }
  }
  return cycles.sort((x, y) => x[0]!.localeCompare(y[0]!));
}

const BACKENDS = ['src/store/sqlite/', 'src/store/pg/'] as const;
/** `hookrelay db` (backup, check, copy) works on a backend's own files and connections. */
const BACKEND_IMPORTERS_OUTSIDE_STORE: ReadonlySet<string> = new Set(['src/cli/db.ts']);

/**
 * Imports of a backend folder from outside src/store/ (but by src/cli/db.ts), and of one backend
 * from the other: each backend is reached through the boundary.
 */
function backendLeaks(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const leaks: string[] = [];
  for (const [from, targets] of graph) {
    const own = BACKENDS.find((b) => from.startsWith(b));
    for (const to of targets) {
      const backend = BACKENDS.find((b) => to.startsWith(b));
      if (backend === undefined || backend === own) continue;
      if (own === undefined && (from.startsWith('src/store/') || BACKEND_IMPORTERS_OUTSIDE_STORE.has(from))) continue;
      leaks.push(`${from} -> ${to}`);
    }
  }
  return leaks;
}

/** Files outside src/store/ (cli/db.ts excepted, as above) that branch on which backend holds the data (they ask the Store what it can do instead: `shared`, `upkeep`, `shareWork`). */
function backendBranches(sources: Sources): string[] {
  const found: string[] = [];
  for (const [path, text] of sources) {
    if (path.startsWith('src/store/') || BACKEND_IMPORTERS_OUTSIDE_STORE.has(path)) continue;
    for (const m of text.matchAll(/\.backend\s*[!=]==|database\.url\s*[!=]==|database\.url\s*\?/g)) found.push(`${path}: ${m[0]}`);
  }
  return found;
}

const sources = readSources();
const graph = importGraph(sources);

describe('the shape of src/', () => {
  test('reads the tree (the checks below see every file and its imports)', () => {
    assert.ok(sources.size > 100, `only ${sources.size} files found under src/`);
    assert.ok(graph.get('src/feed/stream-reader.ts')!.includes('src/feed/batch-pipeline.ts'));
    // A worker's entry module is an edge too.
    assert.ok(graph.get('src/feed/line-parser.ts')!.includes('src/feed/parse-worker.ts'));
    // Every import resolves to a file: a missed or mangled path would hide an edge.
    const unresolved = [...graph].flatMap(([from, targets]) => targets.filter((t) => !sources.has(t)).map((t) => `${from} -> ${t}`));
    assert.deepEqual(unresolved, []);
  });

  test(`no file is over ${MAX_LINES} lines`, () => {
    assert.deepEqual(longFiles(sources), []);
  });

  test('every file sits in a layer', () => {
    assert.deepEqual(unlayered(sources), []);
  });

  test('imports run down the layers: domain < foundation < config < store < services < {feed, dispatch, api, metrics, tracing} < relay < cli', () => {
    assert.deepEqual(layerViolations(graph), []);
  });

  test('no import cycles between files', () => {
    assert.deepEqual(importCycles(graph), []);
  });

  test('nothing outside src/store/ imports a backend folder, src/cli/db.ts excepted; the backends do not import each other', () => {
    assert.deepEqual(backendLeaks(graph), []);
  });

  test('nothing outside src/store/ branches on the backend, src/cli/db.ts excepted', () => {
    assert.deepEqual(backendBranches(sources), []);
  });
});

describe('the checks themselves find a planted violation', () => {
  const planted = (files: Record<string, string>): Sources => new Map(Object.entries(files));

  test('a branch on the backend outside the store', () => {
    const tree = planted({
      'src/relay.ts': "const shared = store.backend === 'postgres';\nif (config.database.url !== null) {}",
      'src/store/open.ts': "if (config.database.url !== null) {}",
    });
    assert.deepEqual(backendBranches(tree), ["src/relay.ts: .backend ===", 'src/relay.ts: database.url !==']);
  });

  test('a file over the limit, counted as an editor counts lines', () => {
    assert.equal(lineCount('a\nb\n'), 2);
    assert.equal(lineCount('a\nb'), 2);
    const tree = planted({ 'src/domain/ok.ts': 'x\n'.repeat(MAX_LINES), 'src/domain/long.ts': 'x\n'.repeat(MAX_LINES + 1) });
    assert.deepEqual(longFiles(tree), [`src/domain/long.ts: ${MAX_LINES + 1} lines`]);
  });

  test('every form of import is read', () => {
    const text = [
      "import { a } from '../domain/a.ts';",
      "import type {\n  B,\n  C,\n} from './b.ts';",
      "export { d } from './d.ts';",
      "export type * from './e.ts';",
      "import './f.ts';",
      "const g = await import('../g.ts');",
      "startWorker(new URL('./h-worker.ts', import.meta.url));",
      "import { readFileSync } from 'node:fs';",
      "const api = new URL('../../docs/openapi.json', import.meta.url);",
      " * started from `new URL('./example-worker.ts', import.meta.url)`",
      "// or `await import('./commented.ts')`",
    ].join('\n');
    assert.deepEqual(importsOf('src/feed/x.ts', text).sort(), ['src/domain/a.ts', 'src/feed/b.ts', 'src/feed/d.ts', 'src/feed/e.ts', 'src/feed/f.ts', 'src/feed/h-worker.ts', 'src/g.ts']);
  });

  test('an import up a layer, and one to a peer', () => {
    const tree = importGraph(
      planted({
        'src/domain/a.ts': "import { s } from '../services/s.ts';",
        'src/services/s.ts': "import { a } from '../domain/a.ts';",
        'src/feed/f.ts': "import type { D } from '../dispatch/d.ts';\nimport { s } from '../services/s.ts';",
        'src/dispatch/d.ts': '',
        'src/relay.ts': "import { f } from './feed/f.ts';",
      }),
    );
    assert.deepEqual(layerViolations(tree), ['src/domain/a.ts -> src/services/s.ts (domain -> services, up)', 'src/feed/f.ts -> src/dispatch/d.ts (feed -> dispatch, a peer)']);
    assert.deepEqual(unlayered(planted({ 'src/elsewhere/x.ts': '' })), ['src/elsewhere/x.ts']);
  });

  test('a cycle, type imports included, and a file importing itself', () => {
    const tree = importGraph(
      planted({
        'src/feed/line-batch.ts': "import type { LineSplitter } from './line-splitter.ts';",
        'src/feed/line-splitter.ts': "import type { LineBatch } from './line-batch.ts';",
        'src/feed/a.ts': "import { b } from './b.ts';",
        'src/feed/b.ts': "import { c } from './c.ts';",
        'src/feed/c.ts': "import { a } from './a.ts';",
        'src/feed/self.ts': "import { x } from './self.ts';",
        'src/feed/free.ts': "import { a } from './a.ts';",
      }),
    );
    assert.deepEqual(importCycles(tree), [['src/feed/a.ts', 'src/feed/b.ts', 'src/feed/c.ts'], ['src/feed/line-batch.ts', 'src/feed/line-splitter.ts'], ['src/feed/self.ts']]);
  });

  test('a backend imported from outside the store, or from the other backend', () => {
    const tree = importGraph(
      planted({
        'src/relay.ts': "import { openPgStore } from './store/pg/store.ts';",
        'src/cli/db.ts': "import { backup } from '../store/sqlite/backup.ts';",
        'src/store/open.ts': "import { openSqliteStore } from './sqlite/store.ts';\nimport { openPgStore } from './pg/store.ts';",
        'src/store/pg/store.ts': "import { x } from '../sqlite/store.ts';\nimport type { Store } from '../repos.ts';",
        'src/store/sqlite/store.ts': "import { y } from './db.ts';",
      }),
    );
    assert.deepEqual(backendLeaks(tree), ['src/relay.ts -> src/store/pg/store.ts', 'src/store/pg/store.ts -> src/store/sqlite/store.ts']);
  });
});

describe('no long function (Biome, biome.jsonc)', () => {
  /** A function of `lines` statements, each one line. */
  const fn = (name: string, lines: number) => `export function ${name}(): number {\n  let total = 0;\n${Array.from({ length: lines - 2 }, (_, i) => `  total += ${i};`).join('\n')}\n  return total;\n}\n`;

  test('the rule bites: over 80 lines in src/ or console/src/ is an error, 80 is not, the named exceptions are exempt', (t) => {
    // The repository's own configuration, on planted files in a directory of their own.
    const dir = mkdtempSync(join(tmpdir(), 'hookrelay-shape-'));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const config = readFileSync(join(ROOT, 'biome.jsonc'), 'utf8').replace('"vcs": { "enabled": true', '"vcs": { "enabled": false');
    writeFileSync(join(dir, 'biome.jsonc'), config.replace('./node_modules/@biomejs/biome/configuration_schema.json', join(ROOT, 'node_modules/@biomejs/biome/configuration_schema.json')));
    const files: Record<string, string> = {
      'src/feed/long.ts': fn('long', 81),
      'src/feed/fits.ts': fn('fits', 80),
      'console/src/long-view.ts': fn('longView', 81),
      'src/store/pg/feed-repo.ts': fn('createPgFeedRepo', 120),
      'test/long.test.ts': fn('longTest', 120),
    };
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(join(dir, posix.dirname(path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    const biome = join(ROOT, 'node_modules/.bin/biome');
    const run = spawnSync(biome, ['lint', '--max-diagnostics=50', '.'], { cwd: dir, encoding: 'utf8' });
    const output = `${run.stdout}${run.stderr}`;
    const flagged = [...output.matchAll(/^(\S+\.ts):\d+:\d+ lint\/complexity\/noExcessiveLinesPerFunction/gm)].map((m) => m[1]).sort();
    assert.deepEqual(flagged, ['console/src/long-view.ts', 'src/feed/long.ts'], output);
    assert.notEqual(run.status, 0);
  });
});

describe('test/ is laid out as src/ is', () => {
  /** Every test file, by its path from the repository root. */
  const testFiles = readdirSync(join(ROOT, 'test'), { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.test.ts'))
    .map((e) => posix.join(posix.relative(ROOT, e.parentPath).split('\\').join('/'), e.name));

  test('each test file sits in the folder of what it tests (src/<folder>/, or console/ for console/src/), an end-to-end one in test/e2e/ named *.e2e.test.ts; helpers are in test/helpers/', () => {
    const misplaced = testFiles.filter((path) => {
      if (path === 'test/code-shape.test.ts') return false;
      const [, folder, ...rest] = path.split('/');
      if (folder === 'e2e') return !path.endsWith('.e2e.test.ts') || rest.length !== 1;
      if (path.endsWith('.e2e.test.ts') || folder === 'helpers' || rest.length !== 1) return true;
      return !(folder === 'console' ? existsSync(join(ROOT, 'console', 'src')) : [...sources.keys()].some((p) => p.startsWith(`src/${folder}/`)));
    });
    assert.deepEqual(misplaced, []);
    assert.ok(testFiles.length > 90, `${testFiles.length} test files found`);
  });
});
