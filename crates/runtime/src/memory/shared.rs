//! What every part of memory shares, below them all: where the user's store is and a
//! workspace's scope, the error, and how a record is kinded, keyed and counted into patterns
//! and hits are merged, so the SQLite store (mod.rs), the PostgreSQL store (postgres.rs)
//! and the one interface over both (stores.rs) agree. It uses none of them.

use std::path::{Path, PathBuf};

use crate::store::{Store, StoreError};
use agent_ls_core::memory::{Hit, Memory, Pattern};

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The URL is shown without its password.
    #[error("the PostgreSQL memory store {url}: {reason}")]
    Postgres { url: String, reason: String },
}

/// The user's memory store, shared by every workspace: `$XDG_DATA_HOME/agent-ls/memory.sqlite`
/// (or `~/.local/share/agent-ls/memory.sqlite`).
pub fn user_store_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_DATA_HOME") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".local/share"),
    };
    Some(base.join("agent-ls").join("memory.sqlite"))
}

/// The most records a word searched for may be in (beyond a quarter of the records, which
/// leaves a word out however small the store): each record a word matches costs its
/// scoring, so this bounds a search's time in a large store, where the rarer words of a
/// failure tell its records apart anyway. Both stores apply it.
pub(crate) const MAX_WORD_RECORDS: i64 = 5_000;

/// The scope of the user store's patterns, which are drawn from every workspace.
pub const USER_SCOPE: &str = "user";

/// The outcome of an episode whose run was rolled back after it ended: its change did not
/// stay, so it counts towards no pattern.
pub const ROLLED_BACK: &str = "rolled back";

/// Marks an episode's run as rolled back; whether it changed (an episode not so marked yet).
pub(crate) fn mark_rolled_back(m: &mut Memory) -> bool {
    match m {
        Memory::Episode(e) if e.outcome != ROLLED_BACK => {
            e.outcome = ROLLED_BACK.to_string();
            true
        }
        _ => false,
    }
}

/// Opens the user's memory store.
pub fn open_user_store() -> Result<Store, StoreError> {
    let path = user_store_path().ok_or_else(|| {
        StoreError::Open(
            PathBuf::from("$HOME/.local/share/agent-ls/memory.sqlite"),
            "neither XDG_DATA_HOME nor HOME is set".into(),
        )
    })?;
    Ok(Store::open_file(&path)?.0)
}

/// The workspace's scope: its `origin` remote's URL when it has one (so clones and copies of
/// one repository share their records), else its folder's canonical path.
pub fn scope_of(root: &Path) -> String {
    let remote = std::process::Command::new("git")
        .args(["config", "--get", "remote.origin.url"])
        .current_dir(root)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    remote.unwrap_or_else(|| {
        root.canonicalize()
            .unwrap_or_else(|_| root.to_path_buf())
            .display()
            .to_string()
    })
}

pub(crate) fn sig_kind(m: &Memory) -> String {
    match m {
        Memory::Episode(e) => e.signature.kind(),
        Memory::Pattern(p) => p.kind.clone(),
    }
}

pub(crate) fn kind_name(m: &Memory) -> &'static str {
    match m {
        Memory::Episode(_) => "episode",
        Memory::Pattern(_) => "pattern",
    }
}

/// A short stable hash, for pattern ids (FNV-1a).
fn short_hash(s: &str) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
    }
    format!("{:08x}", h >> 32)
}

/// The pattern of `kind` made from the episodes of that kind (their runs and records, oldest
/// first), with the run it was last fixed in: once two runs or more fixed it. Both stores
/// count patterns with it.
pub(crate) fn pattern_of(kind: &str, rows: Vec<(String, String)>) -> Option<(String, Memory)> {
    let mut runs: Vec<String> = Vec::new();
    let mut fix = None;
    for (run, json) in rows {
        if let Ok(Memory::Episode(e)) = serde_json::from_str::<Memory>(&json)
            && e.outcome != ROLLED_BACK
            && let Some(f) = e.fix
        {
            if !runs.contains(&run) {
                runs.push(run);
            }
            fix = Some(f);
        }
    }
    let (Some(fix), true) = (fix, runs.len() >= 2) else {
        return None;
    };
    let last = runs.last().cloned().unwrap_or_default();
    let m = Memory::Pattern(Pattern {
        kind: kind.to_string(),
        count: runs.len() as u32,
        fix,
        runs,
    });
    Some((last, m))
}

/// The error kinds of the episodes that were fixed, each once, in order: the kinds whose
/// patterns a run's records may make or update. Both stores recount them.
pub(crate) fn fixed_kinds(episodes: &[Memory]) -> Vec<String> {
    let mut kinds: Vec<String> = episodes
        .iter()
        .filter(|m| matches!(m, Memory::Episode(e) if e.fix.is_some()))
        .map(sig_kind)
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The id of the pattern of `kind` in `scope`.
pub(crate) fn pattern_key(scope: &str, kind: &str) -> String {
    format!("pattern-{}", short_hash(&format!("{scope}\n{kind}")))
}

/// Recalls from the workspace's store (its scope's records) and, for `memory.scope = "user"`,
/// the user's store (every workspace's): the best `limit` by score, each record once and each kind's pattern once.
pub fn merge_hits(mut hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    // One line per record as the user sees it: the same record from two stores has one id,
    // but a kind's pattern has one id per scope (the workspace's and the user store's), and
    // both say the same thing.
    let mut seen = std::collections::HashSet::new();
    hits.retain(|h| {
        seen.insert(match &h.record.memory {
            Memory::Pattern(p) => format!("pattern\n{}", p.kind),
            Memory::Episode(_) => h.record.id.clone(),
        })
    });
    hits.truncate(limit);
    hits
}
