//! `agent-ls stats`: figures per run and over all runs, from the workspace's store.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::store::{RunStats, Totals};

use super::setup::workspace_or_cwd;

/// Prints the totals and the `last` runs; a run whose process is gone shows as interrupted.
pub fn run(workspace: Option<PathBuf>, json: bool, last: usize) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let completions = agent_ls_runtime::journal::completion_stats(&root);
    if !root.join(agent_ls_runtime::store::FILE).exists() {
        if json {
            let value = serde_json::json!({"total": null, "runs": [], "completions": completions});
            println!("{value}");
        } else {
            print_completions(&completions);
            println!(
                "no runs recorded in {}",
                root.join(agent_ls_runtime::store::FILE).display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (store, notice) = agent_ls_runtime::store::Store::open(&root)?;
    if let Some(n) = notice {
        eprintln!("agent-ls: {n}");
    }
    let mut stats = store.stats(last)?;
    // A run still marked running whose process is gone was interrupted: say so, since
    // `agent-ls run --resume` takes it up.
    let interrupted: Vec<String> = store
        .interrupted_runs(None)?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    for r in &mut stats.runs {
        if interrupted.contains(&r.run_id) {
            r.status = agent_ls_core::agent::RunStatus::Interrupted;
        }
    }
    let repairs = repairs(&root);
    // Where each run's time went, from its journal (docs/bigrepo.md).
    let phases: Vec<Option<serde_json::Value>> = stats
        .runs
        .iter()
        .map(|r| agent_ls_runtime::journal::phases_of(&root, &r.run_id))
        .collect();
    if json {
        let mut value = serde_json::to_value(&stats)?;
        value["repairs"] = serde_json::to_value(&repairs)?;
        value["completions"] = serde_json::to_value(&completions)?;
        if let Some(runs) = value["runs"].as_array_mut() {
            for (r, p) in runs.iter_mut().zip(&phases) {
                r["phases"] = p.clone().unwrap_or(serde_json::Value::Null);
            }
        }
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_totals(&stats.total);
        print_completions(&completions);
        if !repairs.is_empty() {
            let by_class: Vec<String> = repairs.iter().map(|(c, n)| format!("{c} {n}")).collect();
            println!("repairs: {}", by_class.join(", "));
        }
        print_runs(&stats.runs);
        print_phases(&stats.runs, &phases);
    }
    Ok(ExitCode::SUCCESS)
}

/// The answers sent back to be mended, by class, over every run's journal (docs/repairs.md):
/// what the user's model gets wrong.
fn repairs(root: &std::path::Path) -> std::collections::BTreeMap<String, u32> {
    let mut by_class = std::collections::BTreeMap::new();
    let journals = std::fs::read_dir(root.join(agent_ls_runtime::journal::DIR));
    for path in journals.into_iter().flatten().flatten().map(|e| e.path()) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        for line in agent_ls_runtime::journal::read_lines(&text, &path) {
            if line["type"] == "repair" {
                let class = line["data"]["class"].as_str().unwrap_or("refused");
                *by_class.entry(class.to_string()).or_insert(0) += 1;
            }
        }
    }
    by_class
}

fn pct(rate: Option<f64>) -> String {
    rate.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0))
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

/// The figures over all runs: outcomes, cost, acceptance and reviews.
/// Inline completion's line, when any suggestion was shown (docs/completion.md).
fn print_completions(c: &agent_ls_runtime::journal::CompletionStats) {
    if c.shown == 0 {
        return;
    }
    let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
    println!(
        "completions: {} shown, {} accepted, {} partially accepted; latency median {}, p90 {}",
        c.shown,
        c.accepted,
        c.partial,
        ms(c.latency_p50_ms),
        ms(c.latency_p90_ms)
    );
}

fn print_totals(t: &Totals) {
    println!(
        "{} runs: {} done, {} failed, {} cancelled; pass rate {}",
        t.runs,
        t.done,
        t.failed,
        t.cancelled,
        pct(t.pass_rate)
    );
    println!(
        "{} iterations, {} tokens ({} of the prompts' from the provider's cache), model time {}, test time {}",
        t.iterations,
        t.tokens,
        t.cached_tokens,
        secs(t.model_ms),
        secs(t.test_ms)
    );
    println!(
        "{} of {} proposed changes accepted ({})",
        t.accepted,
        t.proposals,
        pct(t.acceptance_rate)
    );
    let r = &t.review;
    let [p0, p1, p2, p3] = r.findings_by_priority;
    println!(
        "{} reviews: {} rejected the change, {} unavailable; findings P0 {p0}, P1 {p1}, P2 {p2}, P3 {p3}",
        r.reviews, r.rejections, r.unavailable
    );
}

/// One line a run, under a header.
fn print_runs(runs: &[RunStats]) {
    if !runs.is_empty() {
        println!();
        println!(
            "{:<12}  {:<9}  {:>4}  {:>7}  {:>7}  {:>8}  {:>8}  {:>7}  goal",
            "run", "status", "iter", "tokens", "cached", "model", "tests", "passed"
        );
    }
    for r in runs {
        let tests = match (r.tests_passed, r.tests_failed) {
            (Some(p), Some(f)) => format!("{p}/{}", p + f),
            _ => "-".into(),
        };
        let goal: String = r.goal.chars().take(60).collect();
        println!(
            "{:<12}  {:<9}  {:>4}  {:>7}  {:>7}  {:>8}  {:>8}  {:>7}  {goal}",
            r.run_id,
            r.status.as_str(),
            r.iterations,
            r.tokens,
            r.cached_tokens,
            secs(r.model_ms),
            secs(r.test_ms),
            tests
        );
    }
}

/// The phases of each run that recorded them, one line a run (milliseconds).
fn print_phases(runs: &[RunStats], phases: &[Option<serde_json::Value>]) {
    const COLUMNS: [(&str, &str); 9] = [
        ("walk", "walk_ms"),
        ("load", "load_ms"),
        ("parse", "parse_ms"),
        ("cache", "cache_write_ms"),
        ("rank", "rank_ms"),
        ("1st req", "first_request_ms"),
        ("store", "store_ms"),
        ("memory", "memory_ms"),
        ("end", "end_ms"),
    ];
    if phases.iter().all(Option::is_none) {
        return;
    }
    println!();
    let head: String = COLUMNS.iter().map(|(h, _)| format!("  {h:>7}")).collect();
    println!(
        "{:<12}{head}  {:>8}  map files (parsed)",
        "phases, ms", "peak mem"
    );
    for (r, p) in runs.iter().zip(phases) {
        let Some(p) = p else { continue };
        let cell = |k: &str| p[k].as_u64().map_or("-".to_string(), |v| v.to_string());
        let row: String = COLUMNS
            .iter()
            .map(|(_, k)| format!("  {:>7}", cell(k)))
            .collect();
        let mem = p["peak_rss_kib"]
            .as_u64()
            .map_or("-".to_string(), |k| format!("{:.0} MiB", k as f64 / 1024.0));
        let late = if p["map_late"] == true { ", late" } else { "" };
        println!(
            "{:<12}{row}  {mem:>8}  {} ({}){late}",
            r.run_id,
            cell("map_files"),
            cell("map_parsed")
        );
    }
}
