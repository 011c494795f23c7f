//! A question of several lines from the server (the review question at a run's end: the
//! verdict, then one finding a line) asked in a QuickPick. The server cancels such a question
//! with `$/cancelRequest` when an undo, a rerun or a rollback answers it for the user
//! (docs/lsp-extensions.md), and a QuickPick is the one prompt an extension can close: a
//! notification or a modal dialog stays on screen until the user closes it
//! (microsoft/vscode#95901), asking a question that no longer matters.

import * as vscode from 'vscode';
import { questionRows } from './messages';

type Row = vscode.QuickPickItem & { answer?: string };

/**
 * Asks `message` with `actions` in a picker that lists `detail`'s lines under them. Resolves
 * to the action picked, or `undefined` (the LSP answer null) when the picker closed without
 * one: Escape, another picker (the palette) taking its place, or `token` cancelled by the
 * server, which also closes it.
 */
export function askInPicker(
  message: string,
  detail: string,
  actions: string[],
  token: vscode.CancellationToken,
): Promise<string | undefined> {
  if (token.isCancellationRequested) {
    return Promise.resolve(undefined);
  }
  return new Promise((resolve) => {
    const picker = vscode.window.createQuickPick<Row>();
    picker.title = message;
    picker.placeholder = 'Pick an answer; Escape answers nothing';
    // Clicking into the editor to look at the change must not answer the question.
    picker.ignoreFocusOut = true;
    const rows: Row[] = questionRows(detail, actions).map((r) =>
      r.separator ? { label: r.label, kind: vscode.QuickPickItemKind.Separator } : { label: r.label, answer: r.answer },
    );
    picker.items = rows;
    const first = rows.find((r) => r.answer !== undefined);
    if (first) {
      picker.activeItems = [first];
    }
    let answer: string | undefined;
    const cancelled = token.onCancellationRequested(() => picker.hide());
    picker.onDidAccept(() => {
      const chosen = picker.selectedItems[0] ?? picker.activeItems[0];
      // A line of the question answers nothing: the picker stays.
      if (chosen?.answer === undefined) {
        return;
      }
      answer = chosen.answer;
      picker.hide();
    });
    picker.onDidHide(() => {
      cancelled.dispose();
      picker.dispose();
      resolve(answer);
    });
    picker.show();
  });
}
