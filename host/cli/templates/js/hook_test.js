// The hook's own tests, run natively: `node --test` in this folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { decide } from './logic.js';

test('blocks secret files', () => {
  assert.ok(decide({ path: 'keys.secret' }).block);
});

test('rewrites ./ paths', () => {
  assert.deepEqual(decide({ filePath: './a.txt' }), { rewrite: { filePath: 'a.txt' } });
});

test('allows the rest', () => {
  assert.deepEqual(decide({ path: 'a.txt' }), {});
});
