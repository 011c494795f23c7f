//! Which of the server's window/showMessage texts are diffs (the answer to "Show diff") or long
//! answers (an explanation, a failure report), so the extension opens them as a document
//! rather than squeezing them into a notification; and how a question of several lines (the
//! review question) is split into the rows of the picker it is asked in. Pure.

export function isDiff(text: string): boolean {
  return text.startsWith('--- ') || /\n@@ -\d/.test(text) || text.startsWith('diff --git ');
}

/** An answer too long for a notification: several lines, or a long paragraph. */
export function isLong(text: string): boolean {
  return text.split('\n').length > 4 || text.length > 400;
}

/**
 * A question of several lines (the review question at a run's end: the verdict, then one
 * finding a line) as its message and its detail. VS Code's notifications run lines together,
 * so such a question is asked in a picker that lists them (question.ts); a one-line question
 * has no detail and stays a notification.
 */
export function questionParts(text: string): { message: string; detail?: string } {
  const at = text.indexOf('\n');
  if (at < 0) return { message: text };
  return { message: text.slice(0, at), detail: text.slice(at + 1) };
}

/** A row of the picker a question of several lines is asked in (see question.ts). */
export interface QuestionRow {
  label: string;
  /** The action this row answers with; a line of the question answers nothing. */
  answer?: string;
  /** A separator between the actions and the question's lines. */
  separator?: boolean;
}

/**
 * The picker's rows for a question whose detail is `detail`: its actions first, in the
 * server's order (the first, the safe one, is where the picker starts, so Enter takes it), then
 * the question's lines (the review's findings), which picking does not answer.
 */
export function questionRows(detail: string, actions: string[]): QuestionRow[] {
  const lines = detail.split('\n').filter((l) => l.trim() !== '');
  const rows: QuestionRow[] = actions.map((a) => ({ label: a, answer: a }));
  if (lines.length > 0) {
    rows.push({ label: 'the question', separator: true }, ...lines.map((l) => ({ label: l })));
  }
  return rows;
}
