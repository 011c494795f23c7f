//! Where the bug probably is, from the tests' own line coverage (spectrum-based fault
//! localisation): a line the failing tests run and the passing ones do not is suspicious, and
//! a function is as suspicious as its most suspicious line. Lines are scored with Ochiai,
//! `failed(l) / sqrt(total_failed * (failed(l) + passed(l)))`, the measure that ranks real
//! faults best among the simple ones. Pure: coverage and the files' definitions in, ranked
//! suspects out; the runtime collects the coverage (docs/locate.md).

use std::collections::{BTreeMap, BTreeSet};

use crate::repomap::tags::Span;

/// The lines one test executed, by workspace file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestLines {
    pub test: String,
    pub failed: bool,
    pub lines: BTreeMap<String, BTreeSet<u32>>,
}

/// A function (or a file's top level) the failing tests point at.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Suspect {
    pub path: String,
    /// The definition's name; empty for lines outside any definition.
    pub name: String,
    pub first: u32,
    pub last: u32,
    /// Its most suspicious line's Ochiai score, from 0 to 1.
    pub score: f64,
    /// How many failing and passing tests ran its most suspicious line.
    pub failing: u32,
    pub passing: u32,
    /// Its lines with the top score, the ones to look at first.
    pub lines: Vec<u32>,
    /// A failing test's stack passes through it (its traceback names one of its lines).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub on_path: bool,
}

/// The `top` most suspicious functions outside the test files (`is_test`), best first, from
/// `runs`; `spans` gives a file's definitions (`None`: not a language read, each line its own
/// suspect). Nothing when no test failed, or no test passed to compare with is still ranked
/// by the failing tests alone.
pub fn suspects(
    runs: &[TestLines],
    spans: &dyn Fn(&str) -> Option<Vec<Span>>,
    is_test: &dyn Fn(&str) -> bool,
    top: usize,
) -> Vec<Suspect> {
    let total_failed = runs.iter().filter(|r| r.failed).count() as f64;
    if total_failed == 0.0 {
        return Vec::new();
    }
    // (path, line) -> (failing runs, passing runs)
    let mut hits: BTreeMap<(&str, u32), (u32, u32)> = BTreeMap::new();
    for run in runs {
        for (path, lines) in run.lines.iter().filter(|(p, _)| !is_test(p)) {
            for line in lines {
                let h = hits.entry((path.as_str(), *line)).or_default();
                if run.failed {
                    h.0 += 1;
                } else {
                    h.1 += 1;
                }
            }
        }
    }
    let mut by_place: BTreeMap<(String, u32), Suspect> = BTreeMap::new();
    let mut file_spans: BTreeMap<&str, Option<Vec<Span>>> = BTreeMap::new();
    for ((path, line), (failing, passing)) in hits {
        if failing == 0 {
            continue;
        }
        let score = f64::from(failing) / (total_failed * f64::from(failing + passing)).sqrt();
        let spans = file_spans.entry(path).or_insert_with(|| spans(path));
        // The innermost definition around the line (a method, not its class).
        let around = spans.as_deref().and_then(|s| {
            s.iter()
                .filter(|d| d.first <= line && line <= d.last)
                .min_by_key(|d| d.last - d.first)
        });
        let (name, first, last) = match around {
            Some(d) => (d.name.clone(), d.first, d.last),
            None => (String::new(), line, line),
        };
        let entry = by_place
            .entry((path.to_string(), first))
            .or_insert_with(|| Suspect {
                path: path.to_string(),
                name,
                first,
                last,
                score: -1.0,
                failing: 0,
                passing: 0,
                lines: Vec::new(),
                on_path: false,
            });
        // The counts said are the most suspicious line's.
        let better = score > entry.score + 1e-12;
        if better {
            entry.lines.clear();
            (entry.score, entry.failing, entry.passing) = (score, failing, passing);
        }
        if better || (score - entry.score).abs() <= 1e-12 {
            entry.lines.push(line);
        }
    }
    let mut ranked: Vec<Suspect> = by_place.into_values().collect();
    // Best score first; among equals the smaller definition (it says more), then by place.
    ranked.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then((a.last - a.first).cmp(&(b.last - b.first)))
            .then(a.path.cmp(&b.path))
            .then(a.first.cmp(&b.first))
    });
    let keep = kept(&ranked, top);
    ranked.truncate(keep);
    ranked
}

/// Combines the ranking with the failing tests' call path: a suspect one of whose lines a
/// failing test's stack names (`places`, workspace path and line, from the tracebacks) is
/// marked, and among suspects of equal score it comes first. The coverage score still leads:
/// the stack says where it broke, and the bug is as often below it, in code the stack has
/// already left.
pub fn prefer_on_path(suspects: &mut [Suspect], places: &[(String, u32)]) {
    for s in suspects.iter_mut() {
        s.on_path = places
            .iter()
            .any(|(p, l)| *p == s.path && s.first <= *l && *l <= s.last);
    }
    // Stable: the order within equal scores and equal marks stays the ranking's.
    suspects.sort_by(|a, b| b.score.total_cmp(&a.score).then(b.on_path.cmp(&a.on_path)));
}

/// How many of the `ranked` suspects to keep: `top`, and those tied with the last kept (up
/// to three times `top`). An equal score is no reason to drop a suspect, or the tie-break
/// (the smaller function first) would decide alone which of a dozen helpers every failing
/// test runs is seen.
fn kept(ranked: &[Suspect], top: usize) -> usize {
    let tied = ranked
        .get(top.saturating_sub(1))
        .map(|last| last.score)
        .map_or(0, |cut| {
            ranked[top.min(ranked.len())..]
                .iter()
                .take_while(|s| (s.score - cut).abs() <= 1e-12)
                .count()
        });
    (top + tied).min(top * 3).min(ranked.len())
}

/// The line ranges (1-based, inclusive) of a Rust file's own tests: a module or item under
/// `#[cfg(test)]` (or a `cfg` that needs `test`), a function marked `#[test]` (`#[tokio::test]`,
/// `#[tokio::test(flavor = ...)]`, any `…::test`, `#[rstest]`, `#[test_case(...)]`), and the
/// whole file when it opens with `#![cfg(test)]`. Rust keeps unit tests beside the code, so a
/// test file by name does not find them: without this a failing unit test's own body would
/// be its first suspect.
pub fn rust_test_ranges(text: &str) -> Vec<(u32, u32)> {
    let Some(tree) = crate::syntax::Lang::Rust.parse(text) else {
        return Vec::new();
    };
    let attr_text = |n: tree_sitter::Node| {
        n.utf8_text(text.as_bytes())
            .unwrap_or("")
            .split_whitespace()
            .collect::<String>()
    };
    let root = tree.root_node();
    let mut cursor = root.walk();
    let whole = root
        .named_children(&mut cursor)
        .filter(|c| c.kind() == "inner_attribute_item")
        .any(|c| is_test_attribute(attr_text(c).trim_start_matches("#!")));
    if whole {
        return vec![(1, text.lines().count().max(1) as u32)];
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        let mut cursor = node.walk();
        let mut marked = false;
        for child in node.named_children(&mut cursor) {
            match child.kind() {
                "attribute_item" => {
                    marked |= is_test_attribute(attr_text(child).trim_start_matches('#'));
                    continue;
                }
                // A comment between the attribute and its item keeps the mark.
                "line_comment" | "block_comment" => continue,
                _ => {}
            }
            if marked {
                let first = child.start_position().row as u32 + 1;
                out.push((first, child.end_position().row as u32 + 1));
            } else if matches!(child.kind(), "mod_item" | "declaration_list" | "impl_item") {
                stack.push(child);
            }
            marked = false;
        }
    }
    out.sort_unstable();
    out
}

/// An attribute (`[test]`, `[cfg(test)]`, spaces removed) that marks test code.
fn is_test_attribute(attr: &str) -> bool {
    let inner = attr.trim_start_matches('[').trim_end_matches(']');
    let (path, args) = inner.split_once('(').unwrap_or((inner, ""));
    match path {
        "test" | "rstest" | "test_case" => true,
        // `cfg(test)`, `cfg(all(test, feature = "x"))`; not `cfg(not(test))`.
        "cfg" => {
            args.split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == "test")
                && !args.contains("not(test")
        }
        _ => path.ends_with("::test"),
    }
}

/// The suspects as the coder's prompt shows them, each with its definition's text when
/// `text_of` gives it (cut to `max_lines`, its suspicious lines marked) when it fits what is
/// left of `budget` lines of code; one that does not is listed by its place alone (a shorter
/// one after it may still fit).
pub fn render(
    suspects: &[Suspect],
    (failed, passed): (usize, usize),
    text_of: &dyn Fn(&str) -> Option<String>,
    (max_lines, budget): (usize, usize),
) -> String {
    let mut left = budget;
    let mut out = format!(
        "Where the failing tests point (their line coverage: what {failed} failing test(s) ran that {passed} passing one(s) did not), most suspicious first:\n"
    );
    for (i, s) in suspects.iter().enumerate() {
        let what = if s.name.is_empty() {
            "top-level code".to_string()
        } else {
            format!("`{}`", s.name)
        };
        out.push_str(&format!(
            "{}. {}:{}-{} {what}: score {:.2}, run by {} failing and {} passing test(s){}; look at line(s) {}\n",
            i + 1,
            s.path,
            s.first,
            s.last,
            s.score,
            s.failing,
            s.passing,
            if s.on_path {
                ", on a failing test's stack"
            } else {
                ""
            },
            s.lines
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let Some(text) = text_of(&s.path) {
            let lines: Vec<&str> = text.lines().collect();
            let last = (s.last as usize).min(lines.len());
            let first = (s.first as usize).max(1);
            let shown = (last + 1).saturating_sub(first).min(max_lines);
            if first > last || shown > left {
                continue;
            }
            left -= shown;
            out.push_str("```\n");
            for n in first..=last.min(first + max_lines.saturating_sub(1)) {
                let mark = if s.lines.contains(&(n as u32)) {
                    ">"
                } else {
                    " "
                };
                out.push_str(&format!("{mark}{n:>5}| {}\n", lines[n - 1]));
            }
            if last >= first + max_lines {
                out.push_str(&format!("[... to line {last}]\n"));
            }
            out.push_str("```\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(test: &str, failed: bool, lines: &[(&str, &[u32])]) -> TestLines {
        TestLines {
            test: test.into(),
            failed,
            lines: lines
                .iter()
                .map(|(p, ls)| (p.to_string(), ls.iter().copied().collect()))
                .collect(),
        }
    }

    fn span(name: &str, first: u32, last: u32) -> Span {
        Span {
            name: name.into(),
            first,
            last,
        }
    }

    /// cart.py's `total` calls pricing.py's `discount`, whose line 7 is wrong, taken only for
    /// large orders; the tests of small orders pass.
    fn spectrum() -> Vec<TestLines> {
        vec![
            run(
                "t_small",
                false,
                &[("cart.py", &[2, 3]), ("pricing.py", &[5, 6])],
            ),
            run("t_empty", false, &[("cart.py", &[2, 3])]),
            run(
                "t_large",
                true,
                &[("cart.py", &[2, 3]), ("pricing.py", &[5, 6, 7])],
            ),
            run(
                "t_bulk",
                true,
                &[
                    ("cart.py", &[2, 3]),
                    ("pricing.py", &[5, 6, 7]),
                    ("test_cart.py", &[1, 2]),
                ],
            ),
        ]
    }

    fn defs(path: &str) -> Option<Vec<Span>> {
        match path {
            "cart.py" => Some(vec![span("total", 1, 3)]),
            "pricing.py" => Some(vec![span("Pricing", 4, 9), span("discount", 5, 8)]),
            _ => None,
        }
    }

    #[test]
    fn the_line_only_failing_tests_run_ranks_its_function_first() {
        let is_test = |p: &str| p.starts_with("test_");
        let ranked = suspects(&spectrum(), &defs, &is_test, 5);
        assert_eq!(ranked[0].name, "discount", "{ranked:?}");
        assert_eq!((ranked[0].first, ranked[0].last), (5, 8));
        assert_eq!(ranked[0].lines, [7]);
        assert!((ranked[0].score - 1.0).abs() < 1e-9);
        assert_eq!((ranked[0].failing, ranked[0].passing), (2, 0));
        // The caller every test runs comes after, and the test file never.
        assert_eq!(ranked[1].name, "total");
        assert!(ranked[1].score < ranked[0].score);
        assert!(ranked.iter().all(|s| s.path != "test_cart.py"));
    }

    #[test]
    fn nothing_is_suspect_without_a_failing_test_and_the_rendering_marks_the_lines() {
        let passing: Vec<TestLines> = spectrum().into_iter().filter(|r| !r.failed).collect();
        assert!(suspects(&passing, &defs, &|_| false, 5).is_empty());
        let ranked = suspects(&spectrum(), &defs, &|_| false, 1);
        let text = "class Pricing:\n    def discount(self, n):\n        if n > 10:\n            return 0.5\n        return 1.0\n";
        let padded = format!("\n\n\n{text}");
        let shown = render(
            &ranked,
            (2, 2),
            &|p| (p == "pricing.py").then(|| padded.clone()),
            (40, 160),
        );
        assert!(shown.contains("1. pricing.py:5-8 `discount`: score 1.00, run by 2 failing and 0 passing test(s); look at line(s) 7"), "{shown}");
        assert!(
            shown.contains(">    7|             return 0.5\n"),
            "{shown}"
        );
        assert!(
            shown.contains("     5|     def discount(self, n):\n"),
            "{shown}"
        );
    }

    /// A dozen helpers every failing test runs, and some passing ones: all tied. Those tied
    /// with the last kept stay (up to three times `top`), and the code of each is shown while
    /// the budget lasts; the rest are listed by place.
    #[test]
    fn suspects_tied_at_the_cut_are_kept_and_past_the_budget_listed_by_place() {
        // f0..f10 are lines 1-3, 6-8, ...; f11 is 56-59.
        let lines: Vec<u32> = (1..=60)
            .filter(|n| n % 5 != 4 && n % 5 != 0 || *n == 59)
            .collect();
        let runs = vec![
            run("fails", true, &[("md5.js", &lines)]),
            run("passes", false, &[("md5.js", &lines)]),
        ];
        let defs = |_: &str| {
            Some(
                (0..12)
                    .map(|i| span(&format!("f{i}"), i * 5 + 1, i * 5 + 3 + u32::from(i == 11)))
                    .collect(),
            )
        };
        let ranked = suspects(&runs, &defs, &|_| false, 5);
        assert_eq!(ranked.len(), 12, "{ranked:?}");
        // The biggest comes last by the tie-break, and is kept.
        assert_eq!(ranked[11].name, "f11");
        let text: String = (1..=60).map(|n| format!("line {n}\n")).collect();
        let shown = render(&ranked, (1, 1), &|_| Some(text.clone()), (40, 30));
        // Ten functions of three lines fit 30 lines; the eleventh and twelfth are listed.
        assert!(shown.contains(">   46| line 46"), "{shown}");
        assert!(!shown.contains("| line 51"), "{shown}");
        assert!(shown.contains("\n11. md5.js:51-53 `f10`"), "{shown}");
        assert!(shown.contains("\n12. md5.js:56-59 `f11`"), "{shown}");
    }

    #[test]
    fn a_rust_files_own_tests_are_found_beside_its_code() {
        let text = "pub fn rule_for(q: u32) -> u32 {\n    80\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn bulk() {\n        assert_eq!(rule_for(10), 90);\n    }\n}\n\nmod more {\n    #[tokio::test]\n    async fn t() {}\n    fn helper() {}\n}\n";
        assert_eq!(rust_test_ranges(text), [(6, 13), (17, 17)]);
        assert!(rust_test_ranges("fn main() {}\n").is_empty());
        let more = "#[cfg(all(test, feature = \"x\"))]\n// the tests\nmod t {\n}\n#[tokio::test(flavor = \"multi_thread\")]\nasync fn a() {}\n#[cfg(not(test))]\nfn real() {}\n#[rstest]\nfn b() {}\n";
        assert_eq!(rust_test_ranges(more), [(3, 4), (6, 6), (10, 10)]);
        assert_eq!(
            rust_test_ranges("#![cfg(test)]\nuse super::*;\n\nfn t() {}\n"),
            [(1, 4)]
        );
    }

    /// Equal scores: the one a failing test's stack passes through comes first, marked; a
    /// better score stays ahead of it.
    #[test]
    fn the_failing_tests_call_path_breaks_a_tie() {
        let suspect = |name: &str, first: u32, score: f64| Suspect {
            path: "shop.py".into(),
            name: name.into(),
            first,
            last: first + 2,
            score,
            failing: 1,
            passing: 0,
            lines: vec![first + 1],
            on_path: false,
        };
        let mut ranked = vec![
            suspect("best", 1, 1.0),
            suspect("a", 10, 0.5),
            suspect("b", 20, 0.5),
        ];
        prefer_on_path(
            &mut ranked,
            &[("shop.py".into(), 21), ("other.py".into(), 2)],
        );
        let names: Vec<&str> = ranked.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["best", "b", "a"]);
        assert!(ranked[1].on_path && !ranked[0].on_path);
        let shown = render(&ranked, (1, 1), &|_| None, (40, 200));
        assert!(shown.contains("2. shop.py:20-22 `b`: score 0.50, run by 1 failing and 0 passing test(s), on a failing test's stack; look at line(s) 21"), "{shown}");
    }
}
