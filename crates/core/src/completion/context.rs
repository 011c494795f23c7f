//! What a completion request sends besides the prompt's template: the text before and after
//! the cursor within a budget, cut at line boundaries so the model never sees half a line
//! past its context; the signatures of definitions the code near the cursor names (from the
//! repo map's tags); and the part of other recently edited or open files most like the code
//! at the cursor. Everything here is chosen within byte budgets, so a huge file costs no more
//! than a small one.

use std::collections::{BTreeMap, HashSet};

use ropey::Rope;

use crate::repomap::tags::Tags;

/// Everything the model is shown for one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Context {
    /// The document's path, relative to the workspace.
    pub path: String,
    /// The text before the cursor, from a line's start.
    pub prefix: String,
    /// The text after the cursor, to a line's end.
    pub suffix: String,
    /// Other files' text: definitions the code names, then similar code from open files.
    pub snippets: Vec<Snippet>,
}

/// Some text of another file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    pub path: String,
    pub text: String,
}

/// The bytes of each part of the context (`completion.context_bytes`, shared out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub prefix: usize,
    pub suffix: usize,
    /// Definitions and other files' snippets together.
    pub other: usize,
}

impl Budget {
    /// `total` shared out: most to the text before the cursor, which says most about what
    /// comes next; a fifth each to the text after it and to other files.
    pub fn of(total: usize) -> Budget {
        let fifth = total / 5;
        Budget {
            prefix: total - 2 * fifth,
            suffix: fifth,
            other: fifth,
        }
    }
}

/// The text before and after `cursor` (a char index into `rope`), within the budgets: the
/// cursor's own line always (cut at a character if it alone is over), then whole lines
/// outward while they fit.
pub fn around(rope: &Rope, cursor: usize, budget: Budget) -> (String, String) {
    let cursor = cursor.min(rope.len_chars());
    let line = rope.char_to_line(cursor);
    let line_start = rope.line_to_char(line);
    let head = tail_within(&rope.slice(line_start..cursor).to_string(), budget.prefix);
    let mut used = head.len();
    let mut before: Vec<String> = Vec::new();
    for l in (0..line).rev() {
        let text = rope.line(l).to_string();
        if used + text.len() > budget.prefix {
            break;
        }
        used += text.len();
        before.push(text);
    }
    let mut prefix: String = before.into_iter().rev().collect();
    prefix.push_str(&head);

    let next_line = (line + 1).min(rope.len_lines());
    let line_end = if line + 1 < rope.len_lines() {
        rope.line_to_char(next_line)
    } else {
        rope.len_chars()
    };
    let mut suffix = head_within(&rope.slice(cursor..line_end).to_string(), budget.suffix);
    if suffix.len() < budget.suffix && line + 1 < rope.len_lines() {
        for l in next_line..rope.len_lines() {
            let text = rope.line(l).to_string();
            if suffix.len() + text.len() > budget.suffix {
                break;
            }
            suffix.push_str(&text);
        }
    }
    (prefix, suffix)
}

/// The last `max` bytes of `s` at most, starting on a character.
fn tail_within(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s[start..].to_string()
}

/// The first `max` bytes of `s` at most, ending on a character.
fn head_within(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The identifiers in `text`: runs of letters, digits and `_` not starting with a digit.
pub fn identifiers(text: &str) -> HashSet<&str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.len() > 1 && !w.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

/// The signatures of the definitions in other files (`files`, by path, with their tags)
/// that `near` (the code around the cursor) names, one snippet a file, within `max` bytes.
/// Tags without a signature (read from the map's cache) are left out.
pub fn named_definitions<'t>(
    near: &str,
    current: &str,
    files: impl IntoIterator<Item = (&'t str, &'t Tags)>,
    max: usize,
) -> Vec<Snippet> {
    let names = identifiers(near);
    let mut by_file: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut used = 0;
    for (path, tags) in files {
        if path == current {
            continue;
        }
        for def in &tags.defs {
            if def.signature.is_empty() || !names.contains(def.name.as_str()) {
                continue;
            }
            if used + def.signature.len() + 1 > max {
                return snippets_of(by_file);
            }
            used += def.signature.len() + 1;
            by_file.entry(path).or_default().push(&def.signature);
        }
    }
    snippets_of(by_file)
}

fn snippets_of(by_file: BTreeMap<&str, Vec<&str>>) -> Vec<Snippet> {
    by_file
        .into_iter()
        .map(|(path, sigs)| Snippet {
            path: path.to_string(),
            text: sigs.join("\n"),
        })
        .collect()
}

/// Lines a window of another file holds, and how far one window is from the next.
const WINDOW: usize = 20;
const STEP: usize = 10;

/// From each of `files` (the most recently edited first), the window of lines that shares
/// most identifiers with `near`, while they fit in `max` bytes; a file sharing none gives
/// nothing.
pub fn similar_snippets<'t>(
    near: &str,
    files: impl IntoIterator<Item = (&'t str, &'t str)>,
    max: usize,
) -> Vec<Snippet> {
    let names = identifiers(near);
    let mut out = Vec::new();
    let mut used = 0;
    for (path, text) in files {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut best: Option<(usize, usize)> = None;
        let mut start = 0;
        while start < lines.len() {
            let end = (start + WINDOW).min(lines.len());
            let window: String = lines[start..end].concat();
            let score = identifiers(&window).intersection(&names).count();
            if score > 0 && best.is_none_or(|(s, _)| score > s) {
                best = Some((score, start));
            }
            if end == lines.len() {
                break;
            }
            start += STEP;
        }
        let Some((_, start)) = best else { continue };
        let window: String = lines[start..(start + WINDOW).min(lines.len())].concat();
        if used + window.len() > max {
            continue;
        }
        used += window.len();
        out.push(Snippet {
            path: path.to_string(),
            text: window,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repomap::tags::Def;

    fn budget(prefix: usize, suffix: usize) -> Budget {
        Budget {
            prefix,
            suffix,
            other: 0,
        }
    }

    #[test]
    fn the_prefix_and_suffix_are_whole_lines_around_the_cursor_line() {
        let text = "one\ntwo\nthree(x)\nfour\nfive\n";
        let rope = Rope::from_str(text);
        let cursor = text.find("(x)").unwrap();
        let (p, s) = around(&rope, cursor, budget(100, 100));
        assert_eq!(
            (p.as_str(), s.as_str()),
            ("one\ntwo\nthree", "(x)\nfour\nfive\n")
        );
        // 9 bytes: "three" (5) and "two\n" (4) fit, "one\n" does not.
        let (p, s) = around(&rope, cursor, budget(9, 9));
        assert_eq!((p.as_str(), s.as_str()), ("two\nthree", "(x)\nfour\n"));
    }

    #[test]
    fn a_cursor_line_over_the_budget_is_cut_on_a_character() {
        let text = "ééééé|ééééé";
        let rope = Rope::from_str(text);
        let cursor = text.chars().position(|c| c == '|').unwrap();
        let (p, s) = around(&rope, cursor, budget(5, 5));
        assert_eq!((p.as_str(), s.as_str()), ("éé", "|éé"));
    }

    #[test]
    fn a_cursor_at_the_end_has_no_suffix() {
        let rope = Rope::from_str("a\nb");
        let (p, s) = around(&rope, 3, budget(10, 10));
        assert_eq!((p.as_str(), s.as_str()), ("a\nb", ""));
    }

    #[test]
    fn the_definitions_named_near_the_cursor_come_from_other_files() {
        let def = |name: &str, sig: &str| Def {
            name: name.into(),
            line: 1,
            signature: sig.into(),
        };
        let lib = Tags {
            defs: vec![
                def("total", "fn total(c: &Cart) -> u32"),
                def("unused", "fn unused()"),
            ],
            refs: vec![],
        };
        let here = Tags {
            defs: vec![def("total", "fn total_here()")],
            refs: vec![],
        };
        let files = vec![("src/lib.rs", &lib), ("src/main.rs", &here)];
        let got = named_definitions("let t = total(&cart);", "src/main.rs", files.clone(), 100);
        assert_eq!(
            got,
            vec![Snippet {
                path: "src/lib.rs".into(),
                text: "fn total(c: &Cart) -> u32".into()
            }]
        );
        assert!(named_definitions("total", "src/main.rs", files, 5).is_empty());
    }

    #[test]
    fn the_snippet_of_another_file_is_its_window_most_like_the_cursor() {
        let mut other = String::new();
        for i in 0..40 {
            other.push_str(&format!("filler_{i}\n"));
        }
        other.push_str("fn price_of(cart_item) {}\n");
        let got = similar_snippets(
            "let p = price_of(cart_item)",
            [("b.rs", other.as_str())],
            10_000,
        );
        assert_eq!(got.len(), 1);
        assert!(got[0].text.contains("price_of"), "{}", got[0].text);
        assert!(
            similar_snippets("nothing_in_common", [("b.rs", other.as_str())], 10_000).is_empty()
        );
        assert!(similar_snippets("price_of", [("b.rs", other.as_str())], 10).is_empty());
    }
}
