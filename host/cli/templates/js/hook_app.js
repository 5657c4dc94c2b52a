// {{name}}: a warden before hook in JavaScript. Build with `warden plugin build`,
// install with `warden plugin add .`.
// npm packages: add them to package.json's "dependencies" and import them
// by name; `plugin build` installs them and bundles them in (esbuild). Node's
// built-ins (node:fs, process) are not in a component: use warden.js's fs and env.
import { hooks as defineHooks, allow, block, rewrite } from './warden.js';
import { decide } from './logic.js';

export const hooks = defineHooks({
  before: {
    patterns: ['*'],
    run(ctx, tool, args) {
      const d = decide(args);
      if (d.block) return block(d.block);
      if (d.rewrite) return rewrite(d.rewrite);
      return allow();
    },
  },
});
