// The tool's own tests, run natively: `node --test` in this folder.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { count } from './logic.js';

test('counts lines and words', () => {
  assert.deepEqual(count('a.txt', 'one two\nthree\n'), { lines: 2, words: 3 });
});

test('an empty file is an error', () => {
  assert.throws(() => count('empty.txt', '  \n'), /empty.txt is empty/);
});
