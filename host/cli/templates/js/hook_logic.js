// The hook's rule, free of host imports so `node --test` can run it.

/** `{block: reason}`, `{rewrite: args}` or `{}` (allow) for a call's arguments. */
export function decide(args) {
  const key = 'path' in args ? 'path' : 'filePath';
  const path = args[key];
  if (typeof path !== 'string') return {};
  if (path.endsWith('.secret')) return { block: `${path} is a .secret file; {{name}} keeps tools away from those` };
  // The next hook, the permission check and the tool see the rewritten call.
  if (path.startsWith('./')) return { rewrite: { ...args, [key]: path.slice(2) } };
  return {};
}
