//! `agent-ls cache stats|clear`: the response cache of the workspace's store (docs/cache.md),
//! its entries, hits and what they saved, and emptying it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use agent_ls_runtime::model::cache::CacheStats;
use agent_ls_runtime::store::{FILE, Store};

use super::setup::workspace_or_cwd;

/// What to do with the cache.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Action {
    /// Entries, hits (exact and near), misses, and the tokens and time the hits saved.
    Stats,
    /// Empties the cache: its answers and its counters.
    Clear,
}

pub fn run(action: Action, workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    // No store yet: nothing was cached, and there is nothing to create.
    let store = if root.join(FILE).exists() {
        Some(
            Store::open(&root)
                .context("cannot open the workspace's store")?
                .0,
        )
    } else {
        None
    };
    match action {
        Action::Stats => {
            let stats = match &store {
                Some(s) => s.cache_stats()?,
                None => CacheStats::default(),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", summary(&stats));
            }
        }
        Action::Clear => {
            let removed = match &store {
                Some(s) => s.cache_clear()?,
                None => 0,
            };
            if json {
                println!("{}", serde_json::json!({"removed": removed}));
            } else {
                println!("removed {removed} cached answers");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn summary(s: &CacheStats) -> String {
    let lookups = s.exact_hits + s.near_hits + s.misses;
    let rate = if lookups == 0 {
        0.0
    } else {
        (s.exact_hits + s.near_hits) as f64 * 100.0 / lookups as f64
    };
    format!(
        "entries:      {}\nhits:         {} exact, {} near ({rate:.0}% of {lookups} lookups)\nmisses:       {}\ntokens saved: {} ({} in, {} out)\ntime saved:   {:.1} s\n",
        s.entries,
        s.exact_hits,
        s.near_hits,
        s.misses,
        s.saved_input_tokens + s.saved_output_tokens,
        s.saved_input_tokens,
        s.saved_output_tokens,
        s.saved_ms as f64 / 1000.0
    )
}
