// Unit tests of the run view's model: agent-ls/runEvent notifications folded into runs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { RunEvent, Runs, figures, instructionsLabel, rememberedLabel, taskState, testsLabel, worktreeElsewhere } from '../src/runs';

const ev = (iteration: number, role: string, type: string, data: Record<string, unknown> = {}): RunEvent => ({
  runId: 'run_1',
  iteration,
  role,
  type,
  data,
});

test('a two-iteration run folds into its iterations, patches, steps and tests in order', () => {
  const runs = new Runs();
  const events = [
    ev(0, 'agent', 'intent', { goal: 'fix the failing tests' }),
    ev(0, 'tests', 'test_result', { state: 'failed', passed: 1, failed: 2 }),
    ev(1, 'agent', 'iteration', { n: 1, task: null }),
    ev(1, 'coder', 'token', { text: 'calc.py\n' }),
    ev(1, 'coder', 'token', { text: '<<<<<<< SEARCH' }),
    ev(1, 'coder', 'model_call', { model: 'm', usage: { input_tokens: 10, output_tokens: 5 }, duration_ms: 1200, tokens_total: 15, cost_usd_total: 0.001 }),
    ev(1, 'agent', 'patch', { files: ['calc.py'], diff: '--- a/calc.py', review: { protected: [], findings: [{ path: 'calc.py', line: 3, risk: 'spawns_process' }] } }),
    ev(1, 'user', 'approval', { accepted: true }),
    ev(1, 'agent', 'step', { step: 7, files: ['calc.py'] }),
    ev(1, 'tests', 'test_result', { state: 'failed', passed: 2, failed: 1, duration_ms: 80 }),
    ev(1, 'reflector', 'reflection', { report: 'still wrong', next_step: 'sum' }),
    ev(2, 'agent', 'iteration', { n: 2 }),
    ev(2, 'agent', 'patch', { files: ['calc.py'], diff: '--- b', review: {} }),
    ev(2, 'user', 'approval', { accepted: true }),
    ev(2, 'agent', 'step', { step: 8, files: ['calc.py'] }),
    ev(2, 'tests', 'test_result', { state: 'passed', passed: 3, failed: 0 }),
    ev(2, 'agent', 'finished', { status: 'done', answer: 'done: the tests pass' }),
  ];
  for (const e of events) runs.add(e);
  const run = runs.get('run_1')!;
  assert.equal(run.goal, 'fix the failing tests');
  assert.equal(run.status, 'done');
  assert.deepEqual(run.iterations.map((i) => i.n), [1, 2]);
  const [first, second] = run.iterations;
  assert.equal(first.patches[0].step, 7);
  assert.deepEqual(first.patches[0].notes, ['calc.py:3: spawns process']);
  assert.equal(first.streamed, '', 'the streamed text gives way to the patch');
  assert.equal(first.tokens, 15);
  assert.equal(first.reflection?.report, 'still wrong');
  assert.equal(second.patches[0].step, 8);
  assert.equal(testsLabel(second.tests!), 'tests passed: 3 passed');
  assert.equal(testsLabel(run.baseline!), 'tests failed: 1 passed, 2 failed');
  assert.equal(figures(run.tokens, run.costUsd), '15 tokens · $0.0010');

  runs.add({ ...ev(0, 'user', 'undo', { step: 7 }) });
  assert.equal(first.patches[0].undone, true);
  runs.add({ ...ev(0, 'user', 'redo', { step: 7 }) });
  assert.equal(first.patches[0].undone, false);
});

test('streamed text shows while the model answers; an environment problem names the fix', () => {
  const runs = new Runs();
  runs.add(ev(1, 'coder', 'token', { text: 'hello ' }));
  runs.add(ev(1, 'coder', 'token', { text: 'world' }));
  assert.equal(runs.current()?.iterations[0].streamed, 'hello world');
  assert.equal(
    testsLabel({ state: 'error', passed: null, failed: null, durationMs: 1, environment: 'install pytest' }),
    'tests did not run: install pytest',
  );
  assert.equal(figures(12345, null), '12.3k tokens');
});

test('only the latest runs are kept', () => {
  const runs = new Runs(2);
  for (const id of ['a', 'b', 'c']) runs.add({ ...ev(0, 'agent', 'intent', { goal: id }), runId: id });
  assert.deepEqual(runs.runs.map((r) => r.id), ['c', 'b']);
});

test('plan tasks move from pending to in progress to done or failed', () => {
  const runs = new Runs();
  runs.add(ev(0, 'planner', 'plan', { tasks: [{ id: 'T1', title: 'a' }, { id: 'T2', title: 'b' }] }));
  const run = runs.current()!;
  assert.deepEqual([taskState(run, 'T1'), taskState(run, 'T2')], ['pending', 'pending']);
  runs.add(ev(1, 'agent', 'iteration', { n: 1, task: 'T1 a' }));
  assert.deepEqual([taskState(run, 'T1'), taskState(run, 'T2')], ['in progress', 'pending']);
  runs.add(ev(1, 'reflector', 'reflection', { task_id: 'T1', passed: true, report: 'ok', next_step: '' }));
  runs.add(ev(2, 'agent', 'iteration', { n: 2, task: 'T2 b' }));
  assert.deepEqual([taskState(run, 'T1'), taskState(run, 'T2')], ['done', 'in progress']);
  runs.add(ev(2, 'agent', 'finished', { status: 'failed', answer: 'budget' }));
  assert.deepEqual([taskState(run, 'T1'), taskState(run, 'T2')], ['done', 'failed']);
});

test('the tools the coder called are listed in order, a failed one marked', () => {
  const runs = new Runs();
  runs.add(ev(1, 'coder', 'tool_call', { name: 'grep', arguments: { pattern: 'def net' } }));
  runs.add(ev(1, 'tools', 'tool_result', { name: 'grep', is_error: false }));
  runs.add(ev(1, 'coder', 'tool_call', { name: 'read_file', arguments: { path: '../x', start_line: 3 } }));
  runs.add(ev(1, 'tools', 'tool_result', { name: 'read_file', is_error: true }));
  assert.deepEqual(runs.current()?.iterations[0].tools, ['grep def net', 'read_file ../x 3 (failed)']);
});

test("a run's end brings its checkpoint, branch and commit, and a rollback's undo events mark its steps", () => {
  const runs = new Runs();
  runs.add(ev(0, 'agent', 'intent', { goal: 'fix' }));
  runs.add(ev(1, 'agent', 'patch', { files: ['calc.py'], diff: '--- a', review: {} }));
  runs.add(ev(1, 'agent', 'step', { step: 3, files: ['calc.py'] }));
  runs.add(ev(0, 'agent', 'finished', { status: 'done', answer: 'ok' }));
  runs.add(ev(0, 'agent', 'checkpoint', { commit: 'abcdef0123', left_out: [] }));
  assert.equal(runs.get('run_1')?.checkpoint, 'abcdef0123');
  const run = runs.finished({ run_id: 'run_1', status: 'done', checkpoint: 'abcdef0123', branch: null, commit: null });
  assert.equal(run.checkpoint, 'abcdef0123');
  assert.equal(run.branch, undefined);
  assert.equal(run.status, 'done');
  runs.add(ev(0, 'agent', 'undo', { step: 3, redo: false }));
  assert.equal(run.iterations[0].patches[0].undone, true);
  // A run this window did not follow still gets a row, for its actions.
  const other = runs.finished({ run_id: 'run_2', status: 'failed', checkpoint: '1234567' });
  assert.equal(runs.get('run_2'), other);
  assert.equal(other.checkpoint, '1234567');
});

test('a run in a worktree this window does not have open is elsewhere; one it has open is not', () => {
  const w = '/src/app/.agent-ls/worktrees/fix-the-failing-tests';
  const done = { run_id: 'run_1', status: 'done', worktree: w, branch: 'agent/fix-the-failing-tests' };
  assert.equal(worktreeElsewhere(done, ['/src/app']), w);
  assert.equal(worktreeElsewhere(done, [w]), undefined);
  assert.equal(worktreeElsewhere(done, [`${w}/sub`]), undefined);
  assert.equal(worktreeElsewhere(done, [`${w}-2`]), w);
  assert.equal(worktreeElsewhere({ run_id: 'run_2', status: 'done', worktree: null }, ['/src/app']), undefined);
  assert.equal(worktreeElsewhere({ run_id: 'run_3', status: 'done' }, []), undefined);
});

test('records remembered from earlier runs show on the run, grouped by the run they came from', () => {
  const runs = new Runs();
  runs.add(ev(0, 'agent', 'intent', { goal: 'fix the failing tests' }));
  const run = runs.get('run_1')!;
  assert.equal(rememberedLabel(run), null);
  runs.add(ev(0, 'agent', 'memory', { query: 'assertionerror', used: [] }));
  assert.equal(rememberedLabel(run), null, 'a search that found nothing says nothing');
  runs.add(ev(0, 'agent', 'memory', {
    query: 'assertionerror calc',
    used: [
      { id: 'run_a-2', run_id: 'run_a', score: 0.03, bytes: 200 },
      { id: 'run_b-1', run_id: 'run_b', score: 0.02, bytes: 180 },
      { id: 'run_a-1', run_id: 'run_a', score: 0.01, bytes: 150 },
    ],
  }));
  assert.equal(rememberedLabel(run), 'remembered from run run_a (run_a-2, run_a-1), run run_b (run_b-1)');
  assert.equal(run.remembered?.[1].score, 0.02);
});

test('the instruction files a run used show with their bytes, and a nested one joins later', () => {
  const runs = new Runs();
  runs.add(ev(0, 'agent', 'intent', { goal: 'fix the failing tests' }));
  const run = runs.get('run_1')!;
  assert.equal(instructionsLabel(run), null);
  runs.add(ev(0, 'agent', 'context', { agent: 'build', instructions: [{ path: 'AGENTS.md', bytes: 2048 }] }));
  assert.equal(instructionsLabel(run), 'instructions: AGENTS.md 2.0 KB');
  runs.add(ev(1, 'agent', 'instructions', {
    files: [{ path: 'AGENTS.md', bytes: 300, cut_bytes: 1748 }, { path: 'sdk/go/AGENTS.md', bytes: 900 }],
    cut: 'the instruction files exceed 1200 bytes: AGENTS.md was cut',
  }));
  assert.equal(instructionsLabel(run), 'instructions: AGENTS.md 300 B (1.7 KB cut), sdk/go/AGENTS.md 900 B');
  assert.equal(run.instructionsCut, 'the instruction files exceed 1200 bytes: AGENTS.md was cut');
});
