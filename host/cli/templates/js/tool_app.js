// {{name}}: a warden tool in JavaScript. Build with `warden plugin build`,
// install with `warden plugin add . --dir .:ro --env WARDEN_EXAMPLE_LABEL`.
// npm packages: add them to package.json's "dependencies" and import them
// by name; `plugin build` installs them and bundles them in (esbuild). Node's
// built-ins (node:fs, process) are not in a component: use warden.js's fs and env.
import { tools, fs, env, log, InvalidArguments } from './warden.js';
import { count } from './logic.js';

export const tool = tools({
  '{{tool_id}}': {
    description: 'Count the lines and words of a text file in the working directory.',
    parameters: {
      type: 'object',
      properties: { path: { type: 'string', description: 'The file, relative to the working directory.' } },
      required: ['path'],
      additionalProperties: false,
    },
    execute(ctx, args) {
      if (typeof args.path !== 'string') {
        throw new InvalidArguments('`path` must be a string: the file to count, relative to the working directory');
      }
      const full = ctx.resolve(args.path); // refuses paths outside the working directory
      const text = fs.readFileSync(full, 'utf8'); // only granted directories are there
      const { lines, words } = count(args.path, text);
      const label = env().WARDEN_EXAMPLE_LABEL ?? 'no label: WARDEN_EXAMPLE_LABEL is not granted';
      log('info', `counted ${args.path}`);
      return { output: `${args.path}: ${lines} lines, ${words} words (${label})`, title: args.path, metadata: { lines, words } };
    },
  },
});
