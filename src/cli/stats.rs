//! `agent-ls stats`: figures per run and over all runs, from the workspace's store.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::store::{RunStats, Totals};

use super::setup::workspace_or_cwd;

/// Prints the totals and the `last` runs; a run whose process is gone shows as interrupted.
pub fn run(workspace: Option<PathBuf>, json: bool, last: usize) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    if !root.join(agent_ls_runtime::store::FILE).exists() {
        if json {
            println!("{}", serde_json::json!({"total": null, "runs": []}));
        } else {
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
    if json {
        let mut value = serde_json::to_value(&stats)?;
        value["repairs"] = serde_json::to_value(&repairs)?;
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print_totals(&stats.total);
        if !repairs.is_empty() {
            let by_class: Vec<String> = repairs.iter().map(|(c, n)| format!("{c} {n}")).collect();
            println!("repairs: {}", by_class.join(", "));
        }
        print_runs(&stats.runs);
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
