//! `agent-ls map [GOAL]`: the workspace's repo map, built as a run builds it and printed as
//! a run's first prompt would show it, ranked toward the files and names GOAL mentions. The
//! build fills the tag cache (`.agent-ls/repomap.sqlite`), so it also warms a big repository
//! ahead of its first run: a run finishes a cold map only as far as the run lasts
//! (docs/bigrepo.md).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::repomap::{self, Focus};
use agent_ls_runtime::tokens::Counter;

use super::setup::{load_config, open_workspace};

/// `agent-ls map`'s arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the map is for: the files and names it mentions rank first.
    goal: Option<String>,
    /// The project (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Print JSON: the map, its file counts and the build's phases.
    #[arg(long)]
    json: bool,
}

pub fn run(
    Args {
        goal,
        workspace,
        json,
    }: Args,
) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let config = load_config(Some(root.clone())).config;
    let goal = goal.unwrap_or_default();
    let map = repomap::build(&root, &HashMap::new());
    // The files the goal names, as a run's first context takes them: paths inside the
    // workspace only.
    let files: Vec<String> = goal
        .split(|c: char| c.is_whitespace() || "`'\",;".contains(c))
        .map(|w| w.trim_end_matches([':', '.']))
        .filter(|w| {
            !w.is_empty() && agent_ls_runtime::files::resolve(&root, w).is_ok_and(|p| p.is_file())
        })
        .map(String::from)
        .collect();
    let focus = Focus {
        files,
        idents: repomap::idents_of(&goal),
    };
    let model = (config.roles.coder.name.as_deref())
        .or(config.model.name.as_deref())
        .unwrap_or("");
    let text = map.render(
        &focus,
        config.context.map_tokens,
        &Counter::for_model(model),
    );
    if json {
        let out = serde_json::json!({
            "files": map.files.len(),
            "parsed": map.parsed,
            "cached": map.cached,
            "build_ms": map.build_ms,
            "timings": map.timings,
            "map": text,
        });
        println!("{out}");
    } else {
        print!("{text}");
        let t = map.timings;
        eprintln!(
            "agent-ls: {} files in the map, {} parsed now and {} from the cache, in {} ms (walk {} ms, cache read {} ms, parse {} ms, cache write {} ms)",
            map.files.len(),
            map.parsed,
            map.cached,
            map.build_ms,
            t.walk_ms,
            t.load_ms,
            t.parse_ms,
            t.write_ms
        );
    }
    Ok(ExitCode::SUCCESS)
}
