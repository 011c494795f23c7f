//! `agent-ls memory list|search|show|forget|export`: the records earlier runs left
//! (docs/memory.md), in the workspace's store or, with `--user`, the user's.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use agent_ls_core::memory::{Hit, Memory, Record};
use agent_ls_runtime::store::{FILE, Store};

use super::setup::workspace_or_cwd;

/// What to do with the records.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Action {
    /// The newest records first.
    List {
        #[arg(long, default_value_t = 50)]
        last: usize,
    },
    /// The records that best match QUERY (full text, BM25), best first, with their scores.
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

/// The store the command reads: the workspace's, or the user's with `--user`. `None` when
/// there is none yet (nothing was remembered).
fn open(workspace: Option<PathBuf>, user: bool) -> anyhow::Result<Option<Store>> {
    if user {
        let Some(path) = agent_ls_runtime::memory::user_store_path() else {
            anyhow::bail!("neither XDG_DATA_HOME nor HOME is set: no user memory store");
        };
        if !path.exists() {
            return Ok(None);
        }
        return Ok(Some(Store::open_file(&path)?.0));
    }
    let root = workspace_or_cwd(workspace)?;
    if !root.join(FILE).exists() {
        return Ok(None);
    }
    Ok(Some(
        Store::open(&root)
            .context("cannot open the workspace's store")?
            .0,
    ))
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

pub fn run(
    action: Action,
    workspace: Option<PathBuf>,
    user: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = open(workspace.clone(), user)?;
    match action {
        Action::List { last } => {
            let records = match &store {
                Some(s) => s.memories(last)?,
                None => Vec::new(),
            };
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
            let hits: Vec<Hit> = match &store {
                Some(s) => s.recall_words(None, &words, limit)?.1,
                None => Vec::new(),
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&hits)?);
            } else {
                for h in &hits {
                    println!("{:>7.3}  {}", h.score, line(&h.record));
                }
            }
        }
        Action::Show { id } => {
            let Some(r) = store.as_ref().map(|s| s.memory(&id)).transpose()?.flatten() else {
                anyhow::bail!("no record {id}; `agent-ls memory list` shows the ids");
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{}\n{}", line(&r), serde_json::to_string_pretty(&r.memory)?);
            }
        }
        Action::Forget { id } => return forget(&id, workspace, json),
        Action::Export => {
            for r in store
                .map(|s| s.memories(usize::MAX >> 1))
                .transpose()?
                .unwrap_or_default()
            {
                println!("{}", serde_json::to_string(&r)?);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Forgets `id` in both stores; exits 1 when neither had it.
fn forget(id: &str, workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let mut forgotten = false;
    for user in [false, true] {
        if let Some(s) = open(workspace.clone(), user)? {
            forgotten |= s.forget(id)?;
        }
    }
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
