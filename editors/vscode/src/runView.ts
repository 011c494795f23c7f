//! The "Agent Runs" tree view in the Explorer: the current and recent runs with their plan,
//! iterations, proposed changes (click to open the diff; undo a step inline), tests,
//! reflections, evaluation and figures, fed by `agent-ls/runEvent` (see runs.ts).

import * as vscode from 'vscode';
import { Finished, Iteration, Patch, Run, RunEvent, Runs, figures, instructionsLabel, rememberedLabel, taskState, testsLabel } from './runs';

/** A row of the tree; `contextValue` picks its inline actions in package.json. */
class Node extends vscode.TreeItem {
  constructor(
    label: string,
    readonly children: () => Node[] = () => [],
    collapsed = vscode.TreeItemCollapsibleState.None,
  ) {
    super(label, collapsed);
  }
}

export class RunView implements vscode.TreeDataProvider<Node> {
  readonly runs = new Runs();
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private pending: ReturnType<typeof setTimeout> | undefined;

  /** Folds an event in; streamed tokens refresh the tree at most every 150 ms. */
  add(e: RunEvent): Run {
    const run = this.runs.add(e);
    if (e.type === 'token') {
      this.pending ??= setTimeout(() => {
        this.pending = undefined;
        this.changed.fire(undefined);
      }, 150);
    } else {
      this.changed.fire(undefined);
    }
    return run;
  }

  /** A run's end: its checkpoint, branch and commit show on its row. */
  finished(f: Finished): void {
    this.runs.finished(f);
    this.changed.fire(undefined);
  }

  getTreeItem(n: Node): vscode.TreeItem {
    return n;
  }

  getChildren(n?: Node): Node[] {
    if (n) return n.children();
    if (this.runs.runs.length === 0) {
      const empty = new Node('No agent runs yet: Agent: Fix Failing Tests, or Agent: Run…');
      empty.iconPath = new vscode.ThemeIcon('info');
      return [empty];
    }
    return this.runs.runs.map((r) => runNode(r));
  }
}

function runNode(r: Run): Node {
  const node = new Node(r.goal || r.id, () => runChildren(r), vscode.TreeItemCollapsibleState.Expanded);
  node.id = r.id;
  const git = [
    r.checkpoint ? `checkpoint ${r.checkpoint.slice(0, 7)}` : '',
    r.branch ? `branch ${r.branch}` : '',
    r.commit ? `commit ${r.commit.slice(0, 7)}` : '',
  ].filter(Boolean);
  node.description = [`${r.status ?? 'running'}`, figures(r.tokens, r.costUsd), ...git].join(' · ');
  node.tooltip = r.answer ?? r.goal;
  node.iconPath = new vscode.ThemeIcon(
    r.status === null ? 'sync~spin' : r.status === 'done' ? 'pass' : r.status === 'cancelled' ? 'circle-slash' : 'error',
  );
  // A finished run with a checkpoint offers roll back, commit and pull request (package.json).
  node.contextValue = r.status === null ? 'run.active' : r.checkpoint ? 'run.git' : 'run';
  // The row's actions pass the node; the run rides on it.
  (node as Node & { runId?: string }).runId = r.id;
  return node;
}

function runChildren(r: Run): Node[] {
  const out: Node[] = [];
  if (r.baseline) {
    out.push(leaf(`before: ${testsLabel(r.baseline)}`, 'beaker'));
  }
  const instructions = instructionsLabel(r);
  if (instructions) {
    const n = leaf(instructions, 'book');
    n.tooltip = r.instructionsCut ?? 'the instruction files in the run\'s prompts (docs/instructions.md)';
    out.push(n);
  }
  const remembered = rememberedLabel(r);
  if (remembered) {
    const n = leaf(remembered, 'history');
    n.tooltip = (r.remembered ?? []).map((m) => `${m.id} (run ${m.runId}), score ${m.score.toFixed(3)}`).join('\n');
    out.push(n);
  }
  if (r.plan.length > 0) {
    const icons = { pending: 'circle-large-outline', 'in progress': 'sync~spin', done: 'pass', failed: 'error' };
    const task = (t: { id: string; title: string }): Node => {
      const state = taskState(r, t.id);
      const n = leaf(`${t.id} ${t.title}`, icons[state]);
      n.description = state;
      return n;
    };
    const plan = new Node('plan', () => r.plan.map(task), vscode.TreeItemCollapsibleState.Expanded);
    plan.iconPath = new vscode.ThemeIcon('list-ordered');
    out.push(plan);
  }
  for (const it of r.iterations.filter((i) => i.n > 0)) {
    out.push(iterationNode(r, it));
  }
  if (r.evaluation) {
    out.push(leaf(`evaluation ${r.evaluation.score}/5: ${r.evaluation.reason}`, 'star'));
  }
  if (r.answer) {
    const a = leaf(r.answer.split('\n')[0], 'comment');
    a.tooltip = r.answer;
    out.push(a);
  }
  return out;
}

function iterationNode(r: Run, it: Iteration): Node {
  const node = new Node(`iteration ${it.n}`, () => iterationChildren(r, it), vscode.TreeItemCollapsibleState.Expanded);
  node.id = `${r.id}/${it.n}`;
  const parts = [it.task ?? '', it.tokens ? `${it.tokens} tokens` : '', it.modelMs ? `${(it.modelMs / 1000).toFixed(1)} s` : ''];
  node.description = parts.filter(Boolean).join(' · ');
  node.iconPath = new vscode.ThemeIcon('debug-step-over');
  return node;
}

function iterationChildren(r: Run, it: Iteration): Node[] {
  const out: Node[] = [];
  for (const t of it.tools) out.push(leaf(`read: ${t}`, 'search'));
  it.patches.forEach((p, i) => out.push(patchNode(r, it, p, i)));
  if (it.tests) {
    out.push(leaf(testsLabel(it.tests), it.tests.state === 'passed' ? 'pass' : 'error'));
  }
  if (it.reflection) {
    const n = leaf(`reflection: ${it.reflection.report}`, 'lightbulb');
    n.tooltip = `${it.reflection.report}\nNext: ${it.reflection.nextStep}`;
    out.push(n);
  }
  if (it.streamed && r.status === null && it.patches.length === 0) {
    // The model's answer as it arrives: its last line here, all of it in the output channel.
    const lines = it.streamed.trimEnd().split('\n');
    const n = leaf(`model: ${lines[lines.length - 1]}`, 'loading~spin');
    n.tooltip = it.streamed;
    out.push(n);
  }
  return out;
}

function patchNode(r: Run, it: Iteration, p: Patch, i: number): Node {
  const state = p.undone ? 'undone' : p.step !== undefined ? `step ${p.step}` : p.accepted === false ? 'not applied' : 'proposed';
  const n = leaf(`change to ${p.files.join(', ')}`, p.undone ? 'discard' : 'diff');
  n.id = `${r.id}/${it.n}/patch/${i}`;
  n.description = [state, ...p.notes].join(' · ');
  n.tooltip = p.notes.length ? p.notes.join('\n') : undefined;
  n.command = { command: 'agentLs.openDiff', title: 'Open Diff', arguments: [p.diff] };
  n.contextValue = p.step !== undefined && !p.undone ? 'step' : 'patch';
  // The inline Undo action passes the node; the step rides on it.
  (n as Node & { step?: number }).step = p.step;
  return n;
}

function leaf(label: string, icon: string): Node {
  const n = new Node(label);
  n.iconPath = new vscode.ThemeIcon(icon);
  return n;
}
