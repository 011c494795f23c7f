//! One interface to wherever memory is kept (docs/memory.md): the embedded SQLite stores (the
//! workspace's, and the user's for `memory.scope = "user"`) by default, or a team's PostgreSQL
//! store (`memory.url`). The driver's recall and remember and `agent-ls memory` go through it,
//! so which store is used is decided here once; what enters a prompt stays in the core.

use std::path::Path;

use super::postgres::PgStore;
use super::{MemoryError, merge_hits, open_user_store, scope_of, user_store_path};
use crate::config::{MemoryConfig, MemoryScope};
use crate::store::{FILE, Store};
use agent_ls_core::memory::{self as core, Hit, Memory, Record};

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
    /// `[memory.embeddings]`: the model whose vectors the SQLite stores compare (vectors of
    /// another model are not), and the least similarity of a record found by vector alone.
    embedding_model: Option<String>,
    min_similarity: f64,
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
        let min_similarity = config.embeddings.as_ref().map_or(0.5, |e| e.min_similarity);
        let backend = match &config.url {
            Some(url) => {
                Backend::Postgres(PgStore::connect(url)?.with_min_similarity(min_similarity))
            }
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
            embedding_model: config.embeddings.as_ref().map(|e| e.model.clone()),
            min_similarity,
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
            embedding_model: None,
            min_similarity: 0.0,
        }
    }

    /// Whether records live in PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// The records best matching `words` (and `embedding`, given an embedding model: text and
    /// vector rankings fused, `agent_ls_core::memory::fuse`), best first, with the query searched: the workspace's
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
                let mut query = core::fts_query(words);
                let (mut text, mut vector) = (Vec::new(), Vec::new());
                let probe = embedding
                    .filter(|e| !e.is_empty())
                    .zip(self.embedding_model.as_deref());
                // A vector search that fails costs only its own matches.
                let mut near = |s: &Store, scope: Option<&str>| {
                    if let Some((e, model)) = probe {
                        match s.recall_vector(scope, model, e, self.min_similarity, limit) {
                            Ok(h) => vector.extend(h),
                            Err(e) => tracing::warn!(
                                "memory: the vector search failed: {e}; ranked by text alone"
                            ),
                        }
                    }
                };
                if let (Some(ws), View::Workspace) = (workspace, view) {
                    let scope = scoped.then_some(self.scope.as_str());
                    (query, text) = ws.recall_words(scope, words, limit)?;
                    near(ws, scope);
                }
                if let (Some(user), true) = (user, view == View::User || self.user_scope) {
                    let (q, h) = user.recall_words(None, words, limit)?;
                    if view == View::User {
                        query = q;
                    }
                    text.extend(h);
                    near(user, None);
                }
                let hits = core::fuse(merge_hits(text, limit), merge_hits(vector, limit), limit);
                Ok((query, hits))
            }
        }
    }

    /// Keeps a run's records (already redacted), with their embeddings when an embedding
    /// model gave them (one per record). Returns the ids written.
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
                let vectors: Vec<Option<Vec<f32>>> = embeddings
                    .map(|v| v.iter().cloned().map(Some).collect())
                    .unwrap_or_default();
                let model = self.embedding_model.clone().unwrap_or_default();
                let mut ids = Vec::new();
                if let Some(ws) = workspace {
                    ids = ws.remember_embedded(
                        &self.scope,
                        run_id,
                        episodes,
                        &vectors,
                        &model,
                        false,
                    )?;
                }
                if let (Some(user), true) = (user, self.user_scope) {
                    let kept = user.remember_embedded(
                        &self.scope,
                        run_id,
                        episodes,
                        &vectors,
                        &model,
                        true,
                    )?;
                    for id in kept {
                        if !ids.contains(&id) {
                            ids.push(id);
                        }
                    }
                }
                Ok(ids)
            }
        }
    }

    /// Remembers run `run_id` as rolled back, in every store that holds its records (the
    /// workspace's and the user's, or the team's): its episodes' outcome says so, and it no
    /// longer counts towards a pattern. How many episodes changed.
    pub fn remember_rolled_back(&mut self, run_id: &str) -> Result<usize, MemoryError> {
        let owner = self.owner.clone();
        match &mut self.backend {
            Backend::Postgres(pg) => pg.remember_rolled_back(run_id, &owner, self.user_scope),
            Backend::Local { workspace, user } => {
                let mut n = 0;
                if let Some(ws) = workspace {
                    n += ws.remember_rolled_back(run_id, false)?;
                }
                if let Some(user) = user {
                    n += user.remember_rolled_back(run_id, true)?;
                }
                Ok(n)
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

/// After a rollback of run `run_id` in the workspace at `root` (from any surface): its
/// records are remembered as rolled back (`Memories::remember_rolled_back`). Memory never
/// fails a rollback: a store that cannot be opened or written is a warning.
pub fn note_rollback(root: &Path, config: &MemoryConfig, run_id: &str) {
    if !config.enabled {
        return;
    }
    let done = Memories::open(root, config, View::Workspace, false)
        .and_then(|mut m| m.remember_rolled_back(run_id));
    if let Err(e) = done {
        tracing::warn!("memory: run {run_id} is still remembered as it ended: {e}");
    }
}
