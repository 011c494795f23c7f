//! A run's git actions in VS Code: roll the run back to its checkpoint (asking a second time,
//! in a modal, when the server refuses because files changed since the run), commit its
//! files, and open a pull request, through the server's `agent-ls.rollback`,
//! `agent-ls.commit` and `agent-ls.pr` commands (docs/lsp-extensions.md, docs/git.md).

import * as vscode from 'vscode';

/** Runs one of the server's commands; `undefined` when it failed (the error was shown). */
export type Execute = (command: string, args?: unknown) => Promise<unknown>;

/** The answer of `agent-ls.rollback`. */
export interface RollbackAnswer {
  run_id: string;
  checkpoint?: string;
  refused?: string;
  changed?: string[];
  left_out?: string[];
  rolled_back?: string[];
  already_rolled_back?: string[];
  written_on_disk?: string[];
}

/** A run the user may pick: its id, what to show, and its checkpoint when known. */
export interface RunChoice {
  runId: string;
  goal: string;
  checkpoint?: string;
}

/** The run a command was given: its id, or a run view row carrying one. */
export function runIdOf(arg: unknown): string | undefined {
  if (typeof arg === 'string' && arg) return arg;
  const id = (arg as { runId?: unknown } | undefined)?.runId;
  return typeof id === 'string' ? id : undefined;
}

/**
 * Which run: the only candidate, or the user's pick among several (newest first); `undefined`
 * with no candidate (the server then takes the latest run with a checkpoint), `null` when the
 * user dismissed the pick.
 */
export async function pickRun(runs: RunChoice[], title: string): Promise<string | undefined | null> {
  if (runs.length <= 1) return runs[0]?.runId;
  const picked = await vscode.window.showQuickPick(
    runs.map((r) => ({
      label: r.goal || r.runId,
      description: r.checkpoint ? `checkpoint ${r.checkpoint.slice(0, 7)}` : undefined,
      detail: r.runId,
      runId: r.runId,
    })),
    { title },
  );
  return picked ? picked.runId : null;
}

/** Rolls a run back; a refusal asks a second time and, confirmed, calls again with force. */
export async function rollback(execute: Execute, runId: string | undefined): Promise<void> {
  const args = runId ? { run: runId } : {};
  const answer = (await execute('agent-ls.rollback', args)) as RollbackAnswer | undefined;
  if (!answer) return;
  if (answer.refused) {
    const anyway = 'Roll back anyway';
    const changed = answer.changed?.length ? answer.changed.join(', ') : undefined;
    const pick = await vscode.window.showWarningMessage(
      `agent-ls: run ${answer.run_id}: ${answer.refused}.`,
      {
        modal: true,
        detail: changed
          ? `Rolling back loses the changes made to ${changed} since the run.`
          : 'Files the checkpoint left out are kept as they are.',
      },
      anyway,
    );
    if (pick === anyway) {
      await rollback(async (c, a) => execute(c, { ...(a as object), force: true }), answer.run_id);
    }
    return;
  }
  const files = answer.rolled_back ?? [];
  const disk = answer.written_on_disk?.length ? ` (written on disk: ${answer.written_on_disk.join(', ')})` : '';
  vscode.window.showInformationMessage(
    files.length
      ? `agent-ls: rolled back run ${answer.run_id}: ${files.join(', ')}${disk}`
      : answer.already_rolled_back?.length
        ? `agent-ls: run ${answer.run_id} is already rolled back`
        : `agent-ls: run ${answer.run_id} changed no files`,
  );
}

/** Commits the run's files, or opens its pull request, and says what came of it. */
export async function gitAction(execute: Execute, command: 'agent-ls.commit' | 'agent-ls.pr', runId: string | undefined): Promise<void> {
  const answer = (await execute(command, runId ? { run: runId } : {})) as Record<string, unknown> | undefined;
  if (answer === undefined) return;
  const said = ['message', 'url', 'commit'].map((k) => answer?.[k]).find((v) => typeof v === 'string');
  const what = command === 'agent-ls.commit' ? 'commit' : 'pull request';
  vscode.window.showInformationMessage(`agent-ls: ${what}: ${said ?? JSON.stringify(answer)}`);
}

/** The buttons a finished run's message offers, when it has a checkpoint. */
export async function offerActions(execute: Execute, runId: string, summary: string): Promise<void> {
  const back = 'Roll back';
  const commit = 'Commit';
  const pr = 'Create PR';
  const pick = await vscode.window.showInformationMessage(summary, back, commit, pr);
  if (pick === back) {
    await rollback(execute, runId);
  } else if (pick === commit) {
    await gitAction(execute, 'agent-ls.commit', runId);
  } else if (pick === pr) {
    await gitAction(execute, 'agent-ls.pr', runId);
  }
}

/**
 * The end of a run that worked in a worktree of its own (git.isolation = "worktree"): its
 * edits are there on disk, so the message offers to open that folder in a new window, where
 * the run can be rolled back, committed or opened as a pull request.
 */
export async function offerWorktree(runId: string, status: string, worktree: string, branch?: string | null): Promise<void> {
  const open = 'Open Worktree';
  const on = branch ? ` on branch ${branch}` : '';
  const pick = await vscode.window.showInformationMessage(`agent-ls: run ${runId} ${status} in the worktree ${worktree}${on}`, open);
  if (pick === open) {
    await vscode.commands.executeCommand('vscode.openFolder', vscode.Uri.file(worktree), { forceNewWindow: true });
  }
}
