//! Which of the server's window/showMessage texts are diffs (the answer to "Show diff") or long
//! answers (an explanation, a failure report), so the extension opens them as a document
//! rather than squeezing them into a notification. Pure.

export function isDiff(text: string): boolean {
  return text.startsWith('--- ') || /\n@@ -\d/.test(text) || text.startsWith('diff --git ');
}

/** An answer too long for a notification: several lines, or a long paragraph. */
export function isLong(text: string): boolean {
  return text.split('\n').length > 4 || text.length > 400;
}
