//! The run view's model: the server's `agent-ls/runEvent` notifications folded into runs,
//! iterations and steps, and the labels the tree shows. Pure (no `vscode` import), so it is
//! unit-tested with Node's own test runner; every decision stays in the server, this only
//! arranges what it reported.

/** One `agent-ls/runEvent` (docs/lsp-extensions.md). */
export interface RunEvent {
  runId: string;
  iteration: number;
  role: string;
  type: string;
  data: Record<string, unknown>;
}

export interface Patch {
  files: string[];
  diff: string;
  /** What the review found: protected files and risky constructs, one line each. */
  notes: string[];
  accepted?: boolean;
  /** The history step the applied change became, for undo. */
  step?: number;
  undone?: boolean;
}

export interface Tests {
  state: string;
  passed: number | null;
  failed: number | null;
  durationMs: number | null;
  environment: string | null;
}

export interface Iteration {
  n: number;
  task: string | null;
  patches: Patch[];
  tests?: Tests;
  reflection?: { report: string; nextStep: string; taskId: string | null; passed: boolean | null };
  /** The tools the coder called, in order: "grep unsaved note", marked when one failed. */
  tools: string[];
  /** The model's text of the call in progress (or the last one), as it streamed. */
  streamed: string;
  tokens: number;
  modelMs: number;
}

export interface Run {
  id: string;
  goal: string;
  status: string | null;
  answer: string | null;
  /** Tests before the first change. */
  baseline?: Tests;
  plan: { id: string; title: string }[];
  iterations: Iteration[];
  evaluation?: { score: number; reason: string };
  tokens: number;
  costUsd: number | null;
  /** Records remembered from earlier runs that entered this run's prompts (docs/memory.md). */
  remembered?: { id: string; runId: string; score: number }[];
  /** The instruction files in the run's prompts (AGENTS.md and the like, docs/instructions.md),
   * with their bytes, and what the budget cut. */
  instructions?: { path: string; bytes: number; cutBytes: number }[];
  instructionsCut?: string;
  /** The git checkpoint taken before the run wrote, and its branch and commit. */
  checkpoint?: string;
  branch?: string;
  commit?: string;
}

/** What `agent-ls/runFinished` says of a run's git state. */
export interface Finished {
  run_id: string;
  status: string;
  checkpoint?: string | null;
  branch?: string | null;
  commit?: string | null;
  /** The worktree an isolated run worked in (git.isolation = "worktree"), else null. */
  worktree?: string | null;
}

/**
 * The worktree a finished run worked in, when this window does not have it open: the run's
 * edits are on disk there, not in this window's buffers, and its rollback, commit and pull
 * request are the worktree's. `undefined` for a run in (or below) an open folder.
 */
export function worktreeElsewhere(f: Finished, folders: string[], sep = '/'): string | undefined {
  const w = f.worktree;
  if (!w) return undefined;
  const open = folders.some((d) => d === w || d.startsWith(w + sep));
  return open ? undefined : w;
}

/** The runs, newest first, at most `keep`. */
export class Runs {
  runs: Run[] = [];
  constructor(private readonly keep = 10) {}

  get(id: string): Run | undefined {
    return this.runs.find((r) => r.id === id);
  }

  /** The run in progress, if any. */
  current(): Run | undefined {
    return this.runs.find((r) => r.status === null);
  }

  /** Takes a run's end from `agent-ls/runFinished`: its checkpoint, branch and commit. */
  finished(f: Finished): Run {
    let run = this.get(f.run_id);
    if (!run) {
      run = { id: f.run_id, goal: '', status: f.status, answer: null, plan: [], iterations: [], tokens: 0, costUsd: null };
      this.runs.unshift(run);
      this.runs.splice(this.keep);
    }
    run.status ??= f.status;
    run.checkpoint = f.checkpoint ?? run.checkpoint;
    run.branch = f.branch ?? run.branch;
    run.commit = f.commit ?? run.commit;
    return run;
  }

  /** Folds one event in; returns the run it changed. */
  add(e: RunEvent): Run {
    let run = this.get(e.runId);
    if (!run) {
      run = { id: e.runId, goal: '', status: null, answer: null, plan: [], iterations: [], tokens: 0, costUsd: null };
      this.runs.unshift(run);
      this.runs.splice(this.keep);
    }
    const d = e.data;
    const it = (): Iteration => iteration(run, e.iteration);
    switch (e.type) {
      case 'intent':
      case 'resumed':
        run.goal = str(d.goal) || run.goal;
        break;
      case 'plan':
        run.plan = (Array.isArray(d.tasks) ? d.tasks : []).map((t: Record<string, unknown>) => ({
          id: str(t.id),
          title: str(t.title),
        }));
        break;
      case 'iteration':
        it().task = d.task ? str(d.task) : null;
        break;
      case 'token':
        if (e.iteration > 0) {
          it().streamed += str(d.text);
        }
        break;
      case 'model_call': {
        run.tokens = num(d.tokens_total) ?? run.tokens;
        run.costUsd = num(d.cost_usd_total) ?? run.costUsd;
        if (e.iteration > 0) {
          const usage = (d.usage ?? {}) as Record<string, unknown>;
          it().tokens += (num(usage.input_tokens) ?? 0) + (num(usage.output_tokens) ?? 0);
          it().modelMs += num(d.duration_ms) ?? 0;
        }
        break;
      }
      case 'patch': {
        const review = (d.review ?? {}) as { protected?: [string, string][]; findings?: Record<string, unknown>[] };
        const notes = [
          ...(review.protected ?? []).map(([p, why]) => `protected ${p}: ${why}`),
          ...(review.findings ?? []).map((f) => `${str(f.path)}:${num(f.line) ?? 0}: ${str(f.risk).replace(/_/g, ' ')}`),
        ];
        it().patches.push({ files: (d.files as string[]) ?? [], diff: str(d.diff), notes });
        it().streamed = '';
        break;
      }
      case 'approval': {
        const p = last(it().patches);
        if (p) p.accepted = d.accepted === true;
        break;
      }
      case 'step': {
        const p = last(it().patches.filter((x) => x.accepted !== false)) ?? last(it().patches);
        if (p) p.step = num(d.step) ?? undefined;
        break;
      }
      case 'memory':
        run.remembered = (Array.isArray(d.used) ? d.used : []).map((u: Record<string, unknown>) => ({
          id: str(u.id),
          runId: str(u.run_id),
          score: num(u.score) ?? 0,
        }));
        break;
      case 'context':
      case 'instructions': {
        // The context names the files the run started with; an instructions event every file
        // once a nested one joined, or the budget cut one.
        const files = e.type === 'context' ? d.instructions : d.files;
        run.instructions = (Array.isArray(files) ? files : []).map((f: Record<string, unknown>) => ({
          path: str(f.path),
          bytes: num(f.bytes) ?? 0,
          cutBytes: num(f.cut_bytes) ?? 0,
        }));
        run.instructionsCut = d.cut ? str(d.cut) : run.instructionsCut;
        break;
      }
      case 'checkpoint':
        // Taken before the run's first write: the run can be rolled back from now on.
        run.checkpoint = str(d.commit) || run.checkpoint;
        break;
      case 'undo':
      case 'redo':
        for (const i of run.iterations) {
          for (const p of i.patches) {
            if (p.step === num(d.step)) p.undone = e.type === 'undo';
          }
        }
        break;
      case 'test_result': {
        const t: Tests = {
          state: str(d.state),
          passed: num(d.passed),
          failed: num(d.failed),
          durationMs: num(d.duration_ms),
          environment: d.environment ? str(d.environment) : null,
        };
        if (e.iteration > 0) it().tests = t;
        else run.baseline = t;
        break;
      }
      case 'reflection':
        it().reflection = {
          report: str(d.report ?? d.text),
          nextStep: str(d.next_step),
          taskId: d.task_id ? str(d.task_id) : null,
          passed: typeof d.passed === 'boolean' ? d.passed : null,
        };
        break;
      case 'tool_call': {
        const args = (d.arguments ?? {}) as Record<string, unknown>;
        const shown = Object.values(args).map((v) => (typeof v === 'string' ? v : JSON.stringify(v)));
        it().tools.push(`${str(d.name)} ${shown.join(' ')}`.trim());
        break;
      }
      case 'tool_result':
        if (d.is_error === true && it().tools.length > 0) {
          it().tools[it().tools.length - 1] += ' (failed)';
        }
        break;
      case 'evaluation':
        run.evaluation = { score: num(d.score) ?? 0, reason: str(d.reason) };
        break;
      case 'finished':
        run.status = str(d.status);
        run.answer = str(d.answer);
        break;
    }
    return run;
  }
}

/**
 * "remembered from run run_a (run_a-1, run_a-2), run run_b (run_b-1)" when earlier runs'
 * records entered the run's prompts, in the order memory ranked them; null when none did.
 */
export function rememberedLabel(r: Run): string | null {
  if (!r.remembered || r.remembered.length === 0) return null;
  const byRun = new Map<string, string[]>();
  for (const m of r.remembered) {
    byRun.set(m.runId, [...(byRun.get(m.runId) ?? []), m.id]);
  }
  const parts = [...byRun].map(([run, ids]) => `run ${run} (${ids.join(', ')})`);
  return `remembered from ${parts.join(', ')}`;
}

/**
 * "instructions: AGENTS.md 1.2 KB, sdk/AGENTS.md 300 B (200 B cut)" when instruction files
 * entered the run's prompts; null when none did.
 */
export function instructionsLabel(r: Run): string | null {
  if (!r.instructions || r.instructions.length === 0) return null;
  const size = (n: number) => (n >= 1024 ? `${(n / 1024).toFixed(1)} KB` : `${n} B`);
  const parts = r.instructions.map((f) => `${f.path} ${size(f.bytes)}${f.cutBytes > 0 ? ` (${size(f.cutBytes)} cut)` : ''}`);
  return `instructions: ${parts.join(', ')}`;
}

function iteration(run: Run, n: number): Iteration {
  let it = run.iterations.find((i) => i.n === n);
  if (!it) {
    it = { n, task: null, patches: [], tools: [], streamed: '', tokens: 0, modelMs: 0 };
    run.iterations.push(it);
    run.iterations.sort((a, b) => a.n - b.n);
  }
  return it;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : v === undefined || v === null ? '' : String(v);
}

function num(v: unknown): number | null {
  return typeof v === 'number' ? v : null;
}

function last<T>(xs: T[]): T | undefined {
  return xs[xs.length - 1];
}

export type TaskState = 'pending' | 'in progress' | 'done' | 'failed';

/**
 * A plan task's state as the events tell it: done once a reflection passed it, or once the run
 * succeeded after working on it; in progress while the run's latest iteration works on it;
 * failed when the run ended without it passing; pending until an iteration takes it up.
 */
export function taskState(run: Run, id: string): TaskState {
  const worked = run.iterations.filter((i) => i.n > 0 && (i.task ?? '').split(' ')[0] === id);
  if (run.iterations.some((i) => i.reflection?.taskId === id && i.reflection.passed === true)) return 'done';
  if (worked.length === 0) return 'pending';
  if (run.status === 'done') return 'done';
  if (run.status !== null) return 'failed';
  return last(run.iterations) === last(worked) ? 'in progress' : 'pending';
}

/** "1.2k tokens · $0.0031", the figures a status line shows. */
export function figures(tokens: number, costUsd: number | null): string {
  const t = tokens >= 1000 ? `${(tokens / 1000).toFixed(1)}k` : String(tokens);
  return costUsd === null ? `${t} tokens` : `${t} tokens · $${costUsd.toFixed(4)}`;
}

/** "tests failed: 2 passed, 1 failed", or the environment problem. */
export function testsLabel(t: Tests): string {
  if (t.environment) return `tests did not run: ${t.environment}`;
  const counts = [t.passed !== null ? `${t.passed} passed` : '', t.failed ? `${t.failed} failed` : '']
    .filter(Boolean)
    .join(', ');
  return `tests ${t.state.replace('_', ' ')}${counts ? `: ${counts}` : ''}`;
}
