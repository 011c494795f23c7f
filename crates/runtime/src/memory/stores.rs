//! One interface to wherever memory is kept (docs/memory.md): the embedded SQLite stores (the
//! workspace's, and the user's for `memory.scope = "user"`) by default, or a team's PostgreSQL
//! store (`memory.url`). The driver's recall and remember and `agent-ls memory` go through it,
//! so which store is used is decided here once; what enters a prompt stays in the core.

use std::path::Path;

use super::postgres::PgStore;
use super::{merge_hits, open_user_store, scope_of, user_store_path};
use crate::config::{MemoryConfig, MemoryScope};
use crate::store::{FILE, Store, StoreError};
use agent_ls_core::memory::{Hit, Memory, Record};

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The URL is shown without its password.
    #[error("the PostgreSQL memory store {url}: {reason}")]
    Postgres { url: String, reason: String },
}

/// Which records a command reads: the workspace's, or the user's own from every workspace
/// (`agent-ls memory --user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    Workspace,
    User,
}

/// Who writes the records, for a team's store: the login name (`USER`, `LOGNAME` or
/// `USERNAME`). `memory.scope = "user"` reads the records its owner wrote in any workspace.
pub fn owner() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".into())
}

enum Backend {
    /// The SQLite stores; either may be absent (nothing remembered yet, or not wanted).
    Local {
        workspace: Option<Store>,
        user: Option<Store>,
    },
    Postgres(PgStore),
}

/// The memory stores of one workspace, as the configuration says.
pub struct Memories {
    backend: Backend,
    /// The workspace's scope (`scope_of`).
    scope: String,
    owner: String,
    /// `memory.scope = "user"`: the user's records are read and written too.
    user_scope: bool,
    view: View,
}

impl Memories {
    /// The stores for the workspace at `root`. With `create` (a run, whose process has opened
    /// the workspace's store already), SQLite stores that do not exist yet are made; without
    /// (a command that reads), they are left absent. A PostgreSQL store is connected to within
    /// `postgres::CONNECT_TIMEOUT`.
    pub fn open(
        root: &Path,
        config: &MemoryConfig,
        view: View,
        create: bool,
    ) -> Result<Memories, MemoryError> {
        let user_scope = config.scope == MemoryScope::User;
        let backend = match &config.url {
            Some(url) => Backend::Postgres(PgStore::connect(url)?),
            None => {
                // A run's process has opened and checked the workspace's store already.
                let workspace = match (view, create) {
                    (View::Workspace, true) => Some(Store::reopen(root)?),
                    (View::Workspace, false) if root.join(FILE).exists() => {
                        Some(Store::open(root)?.0)
                    }
                    _ => None,
                };
                let user_path = user_store_path();
                let user_exists = user_path.as_ref().is_some_and(|p| p.exists());
                let user = if (view == View::User || user_scope) && (create || user_exists) {
                    Some(open_user_store()?)
                } else {
                    None
                };
                Backend::Local { workspace, user }
            }
        };
        Ok(Memories {
            backend,
            scope: scope_of(root),
            owner: owner(),
            user_scope,
            view,
        })
    }

    /// A team's store, already connected (for tests of the store with its own options).
    pub fn postgres(store: PgStore, scope: &str, owner: &str, user_scope: bool) -> Memories {
        Memories {
            backend: Backend::Postgres(store),
            scope: scope.to_string(),
            owner: owner.to_string(),
            user_scope,
            view: View::Workspace,
        }
    }

    /// Whether records live in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// The records best matching `words` (and `embedding`, given an embedding model; the
    /// SQLite stores rank by text only), best first, with the query searched: the workspace's
    /// records and, for `memory.scope = "user"`, the user's from every workspace.
    pub fn recall(
        &mut self,
        words: &[String],
        embedding: Option<&[f32]>,
        limit: usize,
    ) -> Result<(String, Vec<Hit>), MemoryError> {
        self.search(words, embedding, limit, true)
    }

    /// As `recall`, for `agent-ls memory search`: the SQLite workspace store is searched
    /// whole (its records are the workspace's, whatever its remote was when they were made).
    pub fn search(
        &mut self,
        words: &[String],
        embedding: Option<&[f32]>,
        limit: usize,
        scoped: bool,
    ) -> Result<(String, Vec<Hit>), MemoryError> {
        let owner = self.owner.clone();
        match (&mut self.backend, self.view) {
            (Backend::Postgres(pg), View::Workspace) => pg.recall(
                Some(&self.scope),
                self.user_scope.then_some(owner.as_str()),
                words,
                embedding,
                limit,
            ),
            (Backend::Postgres(pg), View::User) => {
                pg.recall(None, Some(&owner), words, embedding, limit)
            }
            (Backend::Local { workspace, user }, view) => {
                let mut query = agent_ls_core::memory::fts_query(words);
                let mut hits = Vec::new();
                if let (Some(ws), View::Workspace) = (workspace, view) {
                    let scope = scoped.then_some(self.scope.as_str());
                    (query, hits) = ws.recall_words(scope, words, limit)?;
                }
                if let (Some(user), true) = (user, view == View::User || self.user_scope) {
                    let (q, h) = user.recall_words(None, words, limit)?;
                    if view == View::User {
                        query = q;
                    }
                    hits.extend(h);
                }
                Ok((query, merge_hits(hits, limit)))
            }
        }
    }

    /// Keeps a run's records (already redacted), with their embeddings when an embedding
    /// model gave them (one per record; the SQLite stores keep none yet). Returns the ids
    /// written.
    pub fn remember(
        &mut self,
        run_id: &str,
        episodes: &[Memory],
        embeddings: Option<&[Vec<f32>]>,
    ) -> Result<Vec<String>, MemoryError> {
        match &mut self.backend {
            Backend::Postgres(pg) => pg.remember(
                &self.scope,
                &self.owner,
                run_id,
                episodes,
                embeddings,
                self.user_scope,
            ),
            Backend::Local { workspace, user } => {
                let mut ids = Vec::new();
                if let Some(ws) = workspace {
                    ids = ws.remember(&self.scope, run_id, episodes, false)?;
                }
                if let (Some(user), true) = (user, self.user_scope) {
                    for id in user.remember(&self.scope, run_id, episodes, true)? {
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                Ok(ids)
            }
        }
    }

    /// The newest records first, at most `limit`.
    pub fn list(&mut self, limit: usize) -> Result<Vec<Record>, MemoryError> {
        match (&mut self.backend, self.view) {
            (Backend::Postgres(pg), View::Workspace) => {
                pg.memories(Some(&self.scope), &self.owner, limit)
            }
            (Backend::Postgres(pg), View::User) => pg.memories(None, &self.owner, limit),
            (Backend::Local { workspace, user }, view) => {
                let store = if view == View::User { user } else { workspace };
                match store {
                    Some(s) => Ok(s.memories(limit)?),
                    None => Ok(Vec::new()),
                }
            }
        }
    }

    /// One record by its id.
    pub fn get(&mut self, id: &str) -> Result<Option<Record>, MemoryError> {
        match (&mut self.backend, self.view) {
            (Backend::Postgres(pg), _) => pg.memory(id),
            (Backend::Local { workspace, user }, view) => {
                let store = if view == View::User { user } else { workspace };
                match store {
                    Some(s) => Ok(s.memory(id)?),
                    None => Ok(None),
                }
            }
        }
    }

    /// Deletes a record: from the team's store, or from both SQLite stores. Whether any had it.
    pub fn forget(&mut self, id: &str, root: &Path) -> Result<bool, MemoryError> {
        match &mut self.backend {
            Backend::Postgres(pg) => pg.forget(id),
            Backend::Local { workspace, user } => {
                let mut forgotten = false;
                let ws = match workspace.take() {
                    Some(s) => Some(s),
                    None if root.join(FILE).exists() => Some(Store::open(root)?.0),
                    None => None,
                };
                if let Some(s) = &ws {
                    forgotten |= s.forget(id)?;
                }
                let u = match user.take() {
                    Some(s) => Some(s),
                    None if user_store_path().is_some_and(|p| p.exists()) => {
                        Some(open_user_store()?)
                    }
                    None => None,
                };
                if let Some(s) = &u {
                    forgotten |= s.forget(id)?;
                }
                (*workspace, *user) = (ws, u);
                Ok(forgotten)
            }
        }
    }
}

/// Text hits and vector hits in one ranking, by reciprocal rank fusion: each record scores
/// the sum of 1/(60 + rank) over the lists it is in, so neither list's scale (BM25 or
/// `ts_rank` against cosine similarity) outweighs the other, and a record both find comes
/// first. Equal scores share a rank, so a tie in one list is settled by the other rather than
/// by the order rows came in. Without vector hits, the text hits as they are.
pub fn fuse(text: Vec<Hit>, vector: Vec<Hit>, limit: usize) -> Vec<Hit> {
    if vector.is_empty() {
        return text;
    }
    let mut fused: Vec<Hit> = Vec::new();
    for list in [text, vector] {
        let mut rank = 0;
        let mut previous = None;
        for (n, hit) in list.into_iter().enumerate() {
            if previous != Some(hit.score) {
                rank = n;
                previous = Some(hit.score);
            }
            let score = 1.0 / (60.0 + rank as f64 + 1.0);
            match fused.iter_mut().find(|h| h.record.id == hit.record.id) {
                Some(h) => h.score += score,
                None => fused.push(Hit { score, ..hit }),
            }
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused.truncate(limit);
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: &str, score: f64) -> Hit {
        Hit {
            record: Record {
                id: id.into(),
                run_id: "run".into(),
                scope: "/w".into(),
                memory: Memory::Pattern(agent_ls_core::memory::Pattern {
                    kind: "k".into(),
                    count: 2,
                    fix: String::new(),
                    runs: Vec::new(),
                }),
            },
            score,
        }
    }

    #[test]
    fn a_record_both_lists_find_comes_first() {
        let text = vec![hit("a", 9.0), hit("b", 5.0)];
        let vector = vec![hit("c", 0.99), hit("b", 0.9)];
        let ids: Vec<String> = fuse(text, vector, 10)
            .into_iter()
            .map(|h| h.record.id)
            .collect();
        assert_eq!(ids, ["b", "a", "c"]);
        let alone = fuse(vec![hit("a", 9.0)], Vec::new(), 10);
        assert_eq!(alone[0].score, 9.0);
    }
}
