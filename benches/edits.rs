//! Edit engine figures: 30 edits located and applied in a 100,000-line file, and a 20-line
//! fuzzy block located in a 10,000-line file. Run with `cargo bench --bench edits`.

use std::path::Path;
use std::time::{Duration, Instant};

use agent_ls_core::edit::{self, Edit, EditKind, EditPlan, FileText, Limits, LocateOptions, Rule};

fn line(i: usize) -> String {
    format!(
        "    let value_{i} = compute(\"item {i}\", {}); // step {}\n",
        i * 7 % 1000,
        i % 13
    )
}

/// A line of plausible source code; the shapes and lengths vary as in real files.
fn code_line(i: usize) -> String {
    let name = [
        "parse", "render", "total", "config", "request", "buffer", "index", "result",
    ][i % 8];
    let indent = "    ".repeat(1 + (i / 3) % 3);
    match (i * 7 + i / 11) % 10 {
        0 => "\n".to_string(),
        1 => format!("{indent}}}\n"),
        2 => format!(
            "{indent}// {name} must stay below the limit of {} items\n",
            i % 97
        ),
        3 => format!(
            "{indent}let {name}_{i} = {name}(&input[{}..], options)?;\n",
            i % 50
        ),
        4 => format!("{indent}if {name}_{} > threshold {{\n", i / 2),
        5 => format!("{indent}return Err(Error::new(\"{name} failed at step {i}\"));\n"),
        6 => format!("{indent}for item in {name}.iter().filter(|x| x.is_valid()) {{\n"),
        7 => format!("{indent}self.{name}.insert(key_{i}, value);\n"),
        8 => format!("fn {name}_{i}(input: &str) -> Result<usize, Error> {{\n"),
        _ => format!("{indent}{name}.push({i});\n"),
    }
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let text: String = (0..100_000).map(line).collect();
    let plan = thirty_edits();
    // The file is over the default 1 MB limit for model edits; the figure is about the engine.
    let limits = Limits {
        max_file_bytes: usize::MAX,
        ..Limits::default()
    };
    located_and_applied(&text, &plan, &limits);
    applied_to_a_rope(&text, &plan, &limits);

    // A 20-line block with a typo on every other line, in a 10,000-line file.
    let small: String = (0..10_000).map(line).collect();
    let search: String = (5_000..5_020)
        .map(|i| {
            let l = line(i);
            if i % 2 == 0 {
                l.replace("compute", "compte")
            } else {
                l
            }
        })
        .collect();
    fuzzy_block(&small, &search, "near-identical lines (worst case)");

    // The same in a file shaped like real code: lines of many lengths and kinds.
    let code: String = (0..10_000).map(code_line).collect();
    let search: String = (5_000..5_020)
        .map(|i| {
            let l = code_line(i);
            if i % 4 == 0 {
                l.replacen('e', "3", 1)
            } else {
                l
            }
        })
        .collect();
    fuzzy_block(&code, &search, "varied code");
}

/// 30 search/replace edits spread through the 100,000-line file.
fn thirty_edits() -> EditPlan {
    EditPlan {
        edits: (0..30)
            .map(|k| {
                let i = k * 3_331 + 17;
                Edit {
                    path: "big.rs".into(),
                    kind: EditKind::SearchReplace {
                        search: line(i),
                        replace: line(i).replace("compute", "recompute"),
                    },
                }
            })
            .collect(),
    }
}

/// The whole plan located and applied, less the cost of handing the engine its copy of the text.
fn located_and_applied(text: &str, plan: &EditPlan, limits: &Limits) {
    let mut runs = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let outcome = edit::apply_plan(plan, Path::new("/ws"), limits, |_| {
            FileText::Text(text.to_string())
        });
        runs.push(start.elapsed());
        assert!(outcome.all_applied(), "{}", outcome.refusal_report());
    }
    let clone_cost = median(
        (0..20)
            .map(|_| {
                let s = Instant::now();
                std::hint::black_box(text.to_string());
                s.elapsed()
            })
            .collect(),
    );
    println!(
        "30 edits located and applied in a 100,000-line file ({:.1} MB): median {:.2} ms (of which {:.2} ms is copying the text in)",
        text.len() as f64 / 1e6,
        median(runs).as_secs_f64() * 1e3,
        clone_cost.as_secs_f64() * 1e3,
    );
}

/// Applying the 30 edits, located already, to a rope of the same file.
fn applied_to_a_rope(text: &str, plan: &EditPlan, limits: &Limits) {
    let outcome = edit::apply_plan(plan, Path::new("/ws"), limits, |_| {
        FileText::Text(text.to_string())
    });
    let located = &outcome.changes[0].edits;
    let rope = ropey::Rope::from_str(text);
    let mut runs = Vec::new();
    for _ in 0..50 {
        let mut r = rope.clone();
        let start = Instant::now();
        edit::apply::apply_to_rope(&mut r, located).unwrap();
        runs.push(start.elapsed());
    }
    println!(
        "30 located edits applied to the rope (reverse order, with inverses): median {:.1} µs",
        median(runs).as_secs_f64() * 1e6
    );
}

/// `search`, lines 5,001 to 5,020 of `text` with typos, found by the fuzzy rule.
fn fuzzy_block(text: &str, search: &str, kind: &str) {
    let mut runs = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        let found =
            edit::locate::locate(text, search, "x\n", None, &LocateOptions::default()).unwrap();
        runs.push(start.elapsed());
        assert!(
            matches!(found, edit::Found::At(ref l) if l.rule == Rule::Fuzzy && l.line == 5_001),
            "{found:?}"
        );
    }
    println!(
        "20-line fuzzy block located in a 10,000-line file of {kind}: median {:.2} ms",
        median(runs).as_secs_f64() * 1e3
    );
}
