//! Elision markers: a comment that stands for code (`# ... existing code ...`, `// rest of the
//! function unchanged`, `<!-- same as before -->`) or a line of only `...` where code stood.
//! Written into a file, such a line deletes the code it stands for, so an edit whose new text
//! brings one in is refused before any write, naming the lines it would have deleted.
//!
//! A marker the file already has at that place is not an elision: the check compares the
//! located text with its replacement line by line and looks only at the lines the edit adds.

use similar::{DiffOp, capture_diff_slices};

/// The comment openers and closers of the supported languages, longest first so `<!--` is
/// taken before `<`, `/*` before `/` and `;;` before `;`.
const OPENERS: [&str; 9] = ["<!--", "/**", "/*", "//", "--", "#", ";;", ";", "*"];
const CLOSERS: [&str; 2] = ["-->", "*/"];

/// Phrases that, in a comment with `...` or `…`, say "the code here is left out".
const WITH_DOTS: [&str; 14] = [
    "existing",
    "unchanged",
    "rest of",
    "as before",
    "remain",
    "omitted",
    "the same",
    "same as",
    "previous",
    "other methods",
    "other code",
    "code here",
    "keep",
    "no change",
];

/// The text of a comment line without its comment syntax, or `None` when the line is not a
/// comment.
fn comment_body(line: &str) -> Option<&str> {
    let t = line.trim();
    let opener = OPENERS.iter().find(|o| t.starts_with(*o))?;
    let mut body = &t[opener.len()..];
    for closer in CLOSERS {
        body = body.strip_suffix(closer).unwrap_or(body);
    }
    Some(body.trim())
}

/// Whether `line` stands for code left out: a bare `...`/`…`, or a comment that is only dots
/// or says in so many words that code is elided.
pub fn is_marker(line: &str) -> bool {
    if matches!(line.trim(), "..." | "…") {
        return true;
    }
    let Some(body) = comment_body(line) else {
        return false;
    };
    let body = body.to_lowercase();
    let dots = body.contains("...") || body.contains('…');
    let wordless = body
        .chars()
        .all(|c| matches!(c, '.' | '…' | ' ' | '[' | ']' | '(' | ')'));
    if dots && wordless {
        return true;
    }
    (dots && WITH_DOTS.iter().any(|p| body.contains(p)))
        || (body.contains("rest of") && (body.contains("unchanged") || body.contains("same")))
        || body.contains("same as before")
        || body.contains("existing code")
}

/// A bare `...` line: Python's Ellipsis is a real statement, so it counts as a marker only
/// where it replaces code.
fn is_bare_dots(line: &str) -> bool {
    matches!(line.trim(), "..." | "…")
}

/// Why an edit that turns `old` (the file's text at the edit, its first line being line
/// `first_line`, 1-based) into `new` is an elision, or `None` when it brings in no marker.
pub fn check(old: &str, new: &str, first_line: usize) -> Option<String> {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    if !new_lines.iter().any(|l| is_marker(l)) {
        return None;
    }
    for op in capture_diff_slices(similar::Algorithm::Myers, &old_lines, &new_lines) {
        let (old_range, new_range) = match op {
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => (old_index..old_index, new_index..new_index + new_len),
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => (
                old_index..old_index + old_len,
                new_index..new_index + new_len,
            ),
            _ => continue,
        };
        let deleted: Vec<(usize, &str)> = old_range
            .clone()
            .map(|i| (first_line + i, old_lines[i]))
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        let marker = new_lines[new_range.clone()]
            .iter()
            .find(|l| is_marker(l) && (!is_bare_dots(l) || !deleted.is_empty()));
        if let Some(marker) = marker {
            return Some(refusal(marker, &deleted));
        }
    }
    None
}

/// The repair request for an elision `marker` that would have deleted `deleted`.
fn refusal(marker: &str, deleted: &[(usize, &str)]) -> String {
    let mut s = format!(
        "elision: the line `{}` stands for code left out, and would have been written into the file",
        marker.trim()
    );
    match (deleted.first(), deleted.last()) {
        (Some((a, _)), Some((b, _))) => {
            s.push_str(&format!(
                ", deleting lines {a}-{b}:\n{}\n",
                deleted
                    .iter()
                    .map(|(n, l)| format!("{n:>5} | {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        _ => s.push_str(" as a comment. "),
    }
    s.push_str(
        "Write those lines out in full, or send a smaller SEARCH/REPLACE that covers only the lines that change",
    );
    s
}

/// A line that is not blank.
fn is_code(line: &str) -> bool {
    !line.trim().is_empty()
}

/// Why a whole-file write that keeps less than half of the file's code is taken for an
/// elision: `None` when it keeps most of it, or the file is too small to tell.
pub fn dropped_most(original: &str, new: &str) -> Option<String> {
    let old_lines: Vec<&str> = original.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let total = old_lines.iter().filter(|l| is_code(l)).count();
    if total < 8 {
        return None;
    }
    let kept: usize = capture_diff_slices(similar::Algorithm::Myers, &old_lines, &new_lines)
        .iter()
        .filter_map(|op| match *op {
            DiffOp::Equal { old_index, len, .. } => Some(
                old_lines[old_index..old_index + len]
                    .iter()
                    .filter(|l| is_code(l))
                    .count(),
            ),
            _ => None,
        })
        .sum();
    (kept * 2 < total).then(|| {
        format!(
            "elision: the whole-file write keeps {kept} of the file's {total} lines of code, and the goal does not ask for removal; \
             send the whole file with every line written out, or a SEARCH/REPLACE for only the lines that change"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_in_every_comment_syntax() {
        for line in [
            "    # ... existing code ...",
            "// ... rest of the function unchanged ...",
            "/* ... */",
            "-- rest of the query unchanged",
            "<!-- ... existing markup ... -->",
            "; ... same as before",
            ";; rest of file unchanged",
            "  ...",
            "…",
            "# same as before",
            "// existing code",
            "# [...]",
        ] {
            assert!(is_marker(line), "{line}");
        }
        for line in [
            "# compute the total",
            "x = f(...)",
            "// TODO: handle the rest",
            "print('...')",
            "# wait...",
            "-- a comment",
        ] {
            assert!(!is_marker(line), "{line}");
        }
    }

    #[test]
    fn a_replacement_with_a_marker_for_code_names_the_lines_it_would_delete() {
        let old = "def f(x):\n    a = 1\n    b = 2\n    return a + b\n";
        let new = "def f(x):\n    # ... existing code ...\n    return a + b + x\n";
        let why = check(old, new, 10).unwrap();
        assert!(why.contains("deleting lines 11-13"), "{why}");
        assert!(why.contains("   11 |     a = 1"), "{why}");
        assert!(why.contains("smaller SEARCH/REPLACE"), "{why}");
    }

    #[test]
    fn a_marker_already_in_the_file_at_that_place_is_not_an_elision() {
        let old = "def f():\n    # ... existing code ...\n    return 1\n";
        let new = "def f():\n    # ... existing code ...\n    return 2\n";
        assert_eq!(check(old, new, 1), None);
    }

    #[test]
    fn a_bare_ellipsis_is_code_unless_it_replaces_code() {
        assert_eq!(check("class A:\n", "class A:\n    ...\n", 1), None);
        let why = check("def f():\n    return 1\n", "def f():\n    ...\n", 1).unwrap();
        assert!(why.contains("deleting lines 2-2"), "{why}");
    }

    #[test]
    fn a_whole_file_that_drops_most_code_is_an_elision() {
        let original: String = (0..20).map(|i| format!("x{i} = {i}\n")).collect();
        let kept: String = (0..5).map(|i| format!("x{i} = {i}\n")).collect();
        assert!(
            dropped_most(&original, &kept)
                .unwrap()
                .contains("keeps 5 of")
        );
        let fixed = original.replace("x3 = 3", "x3 = 4");
        assert_eq!(dropped_most(&original, &fixed), None);
        assert_eq!(dropped_most("a = 1\n", ""), None);
    }
}
