// Unit tests of the diff detection, run with Node's test runner after an esbuild bundle.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isDiff, isLong, questionParts, questionRows } from '../src/messages';

test('a unified diff is recognised, a plain message is not', () => {
  assert.ok(isDiff('--- a/calc.py\n+++ b/calc.py\n@@ -4,2 +4,2 @@\n-    return a - b\n+    return a + b\n'));
  assert.ok(isDiff('calc.py\n@@ -1 +1 @@\n-x\n+y\n'));
  assert.ok(!isDiff('agent-ls: done: the tests pass after 1 iteration(s)'));
  assert.ok(!isDiff('agent-ls: could not undo step 3: calc.py was changed at line 5 --- sorry'));
});

test('an explanation of several lines is long, a one-line outcome is not', () => {
  assert.ok(isLong('agent-ls: add returns a - b.\n\nIt subtracts:\n- a\n- b\n'));
  assert.ok(isLong('x'.repeat(401)));
  assert.ok(!isLong('agent-ls: done: the tests pass after 1 iteration(s)'));
});

test('a question of several lines is a message and its detail; one line has no detail', () => {
  const q = 'agent-ls: fix: the reviewer says the patch is incorrect. Keep it?\n[P1] add subtracts — calc.py:5 (0.90)\n[P3] nit — calc.py:9 (0.80)';
  assert.deepEqual(questionParts(q), {
    message: 'agent-ls: fix: the reviewer says the patch is incorrect. Keep it?',
    detail: '[P1] add subtracts — calc.py:5 (0.90)\n[P3] nit — calc.py:9 (0.80)',
  });
  assert.deepEqual(questionParts('agent-ls: apply the change to calc.py?'), { message: 'agent-ls: apply the change to calc.py?' });
});

test("a question's picker starts on its first (safe) action and lists its lines, which answer nothing", () => {
  const rows = questionRows('[P1] add subtracts — calc.py:5 (0.90)\n\n… and 5 more (Show findings)', ['Keep', 'Roll back run', 'Show findings']);
  assert.deepEqual(rows, [
    { label: 'Keep', answer: 'Keep' },
    { label: 'Roll back run', answer: 'Roll back run' },
    { label: 'Show findings', answer: 'Show findings' },
    { label: 'the question', separator: true },
    { label: '[P1] add subtracts — calc.py:5 (0.90)' },
    { label: '… and 5 more (Show findings)' },
  ]);
  assert.deepEqual(questionRows('', ['Keep']), [{ label: 'Keep', answer: 'Keep' }]);
});
