//! `agent-ls memory list|search|show|forget|export`: the records earlier runs left
//! (docs/memory.md), in the workspace's store or, with `--user`, the user's; or in the
//! team's PostgreSQL store (`memory.url`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use agent_ls_core::memory::{Hit, Memory, Record};
use agent_ls_runtime::memory::{Memories, View, user_store_path};

use super::setup::{load_config, log_to_stderr, warn_untrusted, workspace_or_cwd};

/// What to do with the records.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Action {
    /// The newest records first.
    List {
        #[arg(long, default_value_t = 50)]
        last: usize,
    },
    /// The records that best match QUERY (full text, BM25), best first, with the score each
    /// was ranked by (bm25; higher is better).
    Search {
        query: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// One record whole.
    Show { id: String },
    /// Deletes a record from the workspace's store and the user's (its text is overwritten
    /// on disk, not only unlinked).
    Forget { id: String },
    /// Every record, as JSON lines.
    Export,
}

/// The stores the command reads: the workspace's, or the user's with `--user`; or the team's
/// PostgreSQL store when `memory.url` is set. SQLite stores that do not exist yet are not made.
fn open(workspace: Option<PathBuf>, user: bool) -> anyhow::Result<(Memories, PathBuf)> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = load_config(Some(root.clone()));
    log_to_stderr(&loaded);
    warn_untrusted(&loaded);
    if user && loaded.config.memory.url.is_none() && user_store_path().is_none() {
        anyhow::bail!("neither XDG_DATA_HOME nor HOME is set: no user memory store");
    }
    let view = if user { View::User } else { View::Workspace };
    let memories = Memories::open(&root, &loaded.config.memory, view, false)
        .context("cannot open the memory store")?;
    Ok((memories, root))
}

/// A one-line summary of a record, for the listing.
fn line(r: &Record) -> String {
    match &r.memory {
        Memory::Episode(e) => format!(
            "{}  episode  {:<9} {} in {}",
            r.id, e.outcome, e.signature.error_kind, e.signature.test_id
        ),
        Memory::Pattern(p) => format!("{}  pattern  fixed {} times: {}", r.id, p.count, p.kind),
    }
}

/// The score the search ranked `h` by, named: `search` ranks by full text alone (SQLite's
/// BM25, or PostgreSQL's `ts_rank` as `text` names it), higher is better. BM25 is near 0 for
/// words most records hold (FTS5 floors their weight at 1e-6), so small values keep their
/// digits (`4.7e-6`) rather than all reading 0.000 (docs/memory.md).
fn score(h: &Hit, text: &str) -> String {
    let x = h.score;
    if x == 0.0 || x.abs() >= 0.01 {
        format!("{text} {x:.3}")
    } else {
        format!("{text} {x:.1e}")
    }
}

pub fn run(
    action: Action,
    workspace: Option<PathBuf>,
    user: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (mut store, root) = open(workspace, user)?;
    match action {
        Action::List { last } => {
            let records = store.list(last)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&records)?);
            } else if records.is_empty() {
                println!("nothing remembered yet");
            }
            if !json {
                records.iter().for_each(|r| println!("{}", line(r)));
            }
        }
        Action::Search { query, limit } => {
            let words = agent_ls_core::memory::words_of(&query);
            let hits: Vec<Hit> = store.search(&words, None, limit, false)?.1;
            if json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            } else if hits.is_empty() {
                println!("no record matches `{query}`; `agent-ls memory list` shows them all");
            } else {
                let text = if store.is_postgres() {
                    "ts_rank"
                } else {
                    "bm25"
                };
                for h in &hits {
                    println!("{:<15} {}", score(h, text), line(&h.record));
                }
            }
        }
        Action::Show { id } => {
            let Some(r) = store.get(&id)? else {
                anyhow::bail!("no record {id}; `agent-ls memory list` shows the ids");
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{}\n{}", line(&r), serde_json::to_string_pretty(&r.memory)?);
            }
        }
        Action::Forget { id } => return forget(&mut store, &id, &root, json),
        Action::Export => {
            for r in store.list(usize::MAX >> 1)? {
                println!("{}", serde_json::to_string(&r)?);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Forgets `id` (in both SQLite stores, or in the team's store); exits 1 when none had it.
fn forget(
    store: &mut Memories,
    id: &str,
    root: &std::path::Path,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let forgotten = store.forget(id, root)?;
    if json {
        println!("{}", serde_json::json!({"id": id, "forgotten": forgotten}));
    } else if forgotten {
        println!("forgot {id}");
    } else {
        eprintln!("agent-ls: no record {id}");
    }
    Ok(if forgotten {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
