//! Which of the server's window/showMessage texts are diffs (the answer to "Show diff"), so the
//! extension opens them as a document rather than squeezing them into a notification. Pure.

export function isDiff(text: string): boolean {
  return text.startsWith('--- ') || /\n@@ -\d/.test(text) || text.startsWith('diff --git ');
}
