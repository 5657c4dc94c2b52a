// The tool's logic, free of host imports so `node --test` can run it.

/** Lines and words of `text`; an empty file is an error the model sees. */
export function count(path, text) {
  if (text.trim() === '') throw new Error(`${path} is empty; there is nothing to count`);
  return { lines: (text.match(/\n/g) ?? []).length, words: text.split(/\s+/).filter(Boolean).length };
}
