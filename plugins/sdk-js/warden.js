// The warden guest layer for JavaScript (componentize-js).
//
// A tool plugin exports `tool = tools({...})`, a hook plugin exports
// `hooks = hooks({...})`; arguments arrive as objects. Throw
// `InvalidArguments`, `Failed` or `Denied` to choose what the model is told;
// any other error is shown to the model as `Name: message`, and its stack
// goes to stderr, which the host keeps with the call (`warden trace`).
// There is no `node:fs` and no `process` in a component: `fs` and `env`
// below read granted files and variables over WASI. Each call runs in a
// fresh instance; top-level code runs once, when the component is built.

import * as host from 'warden:plugin/host@0.1.0';
import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';
import { getEnvironment } from 'wasi:cli/environment@0.2.12';

/** The arguments do not fit: say which and what would. */
export class InvalidArguments extends Error {
  get tag() { return 'invalid-arguments'; }
}
/** The tool ran and could not do the job: say why and what to do instead. */
export class Failed extends Error {
  get tag() { return 'failed'; }
}
/** Something the tool needed was refused. */
export class Denied extends Error {
  get tag() { return 'denied'; }
}

const LEVELS = ['debug', 'info', 'warn', 'error'];

/** Write a line to the host's log. */
export function log(level, message) {
  if (!LEVELS.includes(level)) throw new TypeError(`log level ${level} is not one of ${LEVELS.join(', ')}`);
  host.log(level, String(message));
}

/** Update the running call's title and metadata while it runs. */
export function progress(title, metadata = {}) {
  host.progress(title == null ? undefined : String(title), JSON.stringify(metadata));
}

/** Ask whoever is attached for a permission mid-call; throws `Denied` if refused. */
export function ask(permission, patterns, metadata = {}) {
  try {
    host.ask(permission, patterns, JSON.stringify(metadata));
  } catch (e) {
    throw new Denied(String(e && e.payload !== undefined ? e.payload : e));
  }
}

function normalize(path) {
  const out = [];
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') { if (out.length === 0) return null; out.pop(); } else out.push(part);
  }
  return '/' + out.join('/');
}

function context(c) {
  const directory = c.directory;
  return {
    sessionId: c.sessionId, messageId: c.messageId, callId: c.callId, agent: c.agent, directory,
    /** `path` as an absolute path inside the working directory, or `InvalidArguments`. */
    resolve(path) {
      if (typeof path !== 'string' || path.trim() === '') {
        throw new InvalidArguments('the path is empty; give a file path relative to the working directory');
      }
      const base = normalize(directory) ?? '/';
      const full = normalize(path.startsWith('/') ? path : `${base}/${path}`);
      if (full === null || (full !== base && !full.startsWith(base === '/' ? '/' : base + '/'))) {
        throw new InvalidArguments(`'${path}' is outside the working directory ${base}; only paths inside it can be used`);
      }
      return full;
    },
    log, progress, ask,
  };
}

// --- files and environment ------------------------------------------------

function wasiError(e, path) {
  const code = e && e.payload !== undefined ? e.payload : e;
  const err = new Error(`${path}: ${code}`);
  err.code = code;
  return err;
}

/** The granted directory holding `path`, and the path relative to it. */
function preopen(path) {
  const full = normalize(path);
  let best = null;
  for (const [dir, at] of getDirectories()) {
    const root = normalize(at) ?? '/';
    const inside = full === root || full.startsWith(root === '/' ? '/' : root + '/');
    if (inside && (best === null || root.length > best[1].length)) best = [dir, root];
  }
  if (best === null) {
    const err = new Error(`${path}: not in a granted directory (the operator grants directories with --dir)`);
    err.code = 'access';
    throw err;
  }
  const rel = full.slice(best[1].length).replace(/^\/+/, '');
  return [best[0], rel === '' ? '.' : rel];
}

function open(path, flags = {}) {
  const [dir, rel] = preopen(path);
  try {
    return dir.openAt({ symlinkFollow: true }, rel, flags, { read: true });
  } catch (e) {
    throw wasiError(e, path);
  }
}

/** `fs.readFileSync(path)` gives bytes, `fs.readFileSync(path, 'utf8')` text; like node's. */
export const fs = {
  readFileSync(path, encoding) {
    const file = open(path);
    const chunks = [];
    let offset = 0n;
    for (;;) {
      let data, end;
      try {
        [data, end] = file.read(65536n, offset);
      } catch (e) {
        throw wasiError(e, path);
      }
      chunks.push(data);
      offset += BigInt(data.length);
      if (end || data.length === 0) break;
    }
    const bytes = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) { bytes.set(c, at); at += c.length; }
    return encoding ? new TextDecoder().decode(bytes) : bytes;
  },
  existsSync(path) {
    try { open(path); return true; } catch { return false; }
  },
  readdirSync(path) {
    const dir = open(path, { directory: true });
    try {
      const stream = dir.readDirectory();
      const names = [];
      for (let e = stream.readDirectoryEntry(); e; e = stream.readDirectoryEntry()) names.push(e.name);
      return names.sort();
    } catch (e) {
      throw wasiError(e, path);
    }
  },
};

/** The environment variables the operator granted, like node's `process.env`. */
export function env() {
  return Object.fromEntries(getEnvironment());
}

// --- exports ----------------------------------------------------------------

function report(e) {
  console.error(e && e.stack ? `${e.name}: ${e.message}\n${e.stack}` : String(e));
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}

/** The `tool` export from `{id: {description, parameters, execute(ctx, args)}}`;
 * `execute` returns text or `{output, title, metadata}`. */
export function tools(defs) {
  return {
    describe() {
      return Object.entries(defs).map(([id, d]) => ({
        id, description: d.description, parameters: JSON.stringify(d.parameters ?? { type: 'object', properties: {} }),
      }));
    },
    execute(ctx, tool, argumentsJson) {
      try {
        const def = defs[tool];
        if (!def) throw new InvalidArguments(`this plugin has no tool ${tool}; it has ${Object.keys(defs).join(', ')}`);
        let args;
        try { args = JSON.parse(argumentsJson || '{}'); } catch (e) { throw new InvalidArguments(`the arguments are not JSON: ${e.message}`); }
        if (args === null || typeof args !== 'object' || Array.isArray(args)) throw new InvalidArguments('the arguments must be a JSON object');
        const out = def.execute(context(ctx), args);
        const o = typeof out === 'string' ? { output: out } : out;
        return { output: String(o.output ?? ''), title: String(o.title ?? ''), metadata: JSON.stringify(o.metadata ?? {}) };
      } catch (e) {
        // A plain object thrown from an export is its `err` payload.
        if (e instanceof InvalidArguments || e instanceof Failed || e instanceof Denied) throw { tag: e.tag, val: e.message };
        throw { tag: 'failed', val: report(e) };
      }
    },
  };
}

function matches(patterns, tool) {
  return patterns.some((p) => new RegExp('^' + p.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.') + '$').test(tool));
}

/** Hook decisions a `before` function returns. */
export const allow = () => ({ tag: 'allow' });
export const block = (reason) => ({ tag: 'block', val: String(reason) });
export const rewrite = (args) => ({ tag: 'rewrite', val: JSON.stringify(args) });
export const askFirst = (reason) => ({ tag: 'ask', val: String(reason) });

/** The `hooks` export from `{before: {patterns, run(ctx, tool, args)}, after: {patterns, run(ctx, tool, args, output)}}`;
 * `after` returns a new output (text or `{output, title, metadata}`) or nothing to keep it. */
export function hooks({ before, after }) {
  return {
    describe() {
      return { before: before ? before.patterns ?? ['*'] : [], after: after ? after.patterns ?? ['*'] : [] };
    },
    before(ctx, tool, argumentsJson) {
      try {
        if (!before || !matches(before.patterns ?? ['*'], tool)) return allow();
        return before.run(context(ctx), tool, JSON.parse(argumentsJson || '{}')) ?? allow();
      } catch (e) {
        // The host decides what a failed hook means (fail closed unless fail_open).
        report(e);
        throw e;
      }
    },
    after(ctx, tool, argumentsJson, output) {
      try {
        if (!after || !matches(after.patterns ?? ['*'], tool)) return { tag: 'keep' };
        const current = { output: output.output, title: output.title, metadata: JSON.parse(output.metadata || '{}') };
        const out = after.run(context(ctx), tool, JSON.parse(argumentsJson || '{}'), current);
        if (out == null) return { tag: 'keep' };
        const o = typeof out === 'string' ? { ...current, output: out } : out;
        return { tag: 'rewrite', val: { output: String(o.output ?? ''), title: String(o.title ?? ''), metadata: JSON.stringify(o.metadata ?? {}) } };
      } catch (e) {
        report(e);
        throw e;
      }
    },
  };
}
