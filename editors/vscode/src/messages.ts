//! Which of the server's window/showMessage texts are diffs (the answer to "Show diff") or long
//! answers (an explanation, a failure report), so the extension opens them as a document
//! rather than squeezing them into a notification; and how a question of several lines (the
//! review question) is split for a dialog. Pure.

export function isDiff(text: string): boolean {
  return text.startsWith('--- ') || /\n@@ -\d/.test(text) || text.startsWith('diff --git ');
}

/** An answer too long for a notification: several lines, or a long paragraph. */
export function isLong(text: string): boolean {
  return text.split('\n').length > 4 || text.length > 400;
}

/**
 * A question of several lines (the review question at a run's end: the verdict, then one
 * finding a line) as a dialog's message and its detail. VS Code's notifications run lines
 * together, so such a question is asked in a modal whose detail keeps them; a one-line
 * question has no detail and stays a notification.
 */
export function questionParts(text: string): { message: string; detail?: string } {
  const at = text.indexOf('\n');
  if (at < 0) return { message: text };
  return { message: text.slice(0, at), detail: text.slice(at + 1) };
}
