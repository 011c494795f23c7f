//! The driver's side of memory across runs (docs/memory.md): what the run tries is kept as it
//! goes (`Trail`), the records matching its first failures are handed to the run
//! (`Input::Memory`) once those are known (journaled with their scores), and its episodes are
//! remembered when it ends. Best effort throughout: a store that fails costs the memory, never the run.

use agent_ls_core::agent::{Run, RunStatus};
use agent_ls_core::events::RunEvent;
use agent_ls_core::memory::{self, Attempt, Memory};
use agent_ls_core::test_output::Failure;

use super::driver::Drive;
use super::observer::Observer;
use crate::embeddings::Embedder;
use crate::memory::{Memories, View, known_secrets, redact, redact_memory};
use crate::tests_run::RunResult;

/// The most records a search brings back; the byte budget decides how many are shown.
const RECALL: usize = 8;
/// How long a search waits for the store (a healthy one answers in milliseconds).
const RECALL_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// What a run met and tried, redacted as it is taken.
#[derive(Default)]
pub(super) struct Trail {
    secrets: Vec<String>,
    /// The embedding model of `[memory] embeddings`, when one is configured.
    embedder: Option<Embedder>,
    /// The failures of the first test run that failed.
    failures: Vec<Failure>,
    attempts: Vec<Attempt>,
    /// The diff of the change last proposed, until a test run says what became of it.
    proposed: Option<String>,
    fix: Option<String>,
}

impl Trail {
    pub(super) fn new(drive: &Drive<'_>) -> Trail {
        Trail {
            secrets: if drive.config.memory.enabled {
                known_secrets(drive.config)
            } else {
                Vec::new()
            },
            embedder: drive
                .config
                .memory
                .embeddings
                .as_ref()
                .filter(|_| drive.config.memory.enabled)
                .and_then(|_| Embedder::from_config(drive.config)),
            ..Trail::default()
        }
    }

    pub(super) fn proposed(&mut self, diff: &str) {
        self.proposed = Some(redact(diff, &self.secrets));
    }

    /// The reflector's answer, for the attempt it reflects on.
    pub(super) fn reflected(&mut self, text: &str) {
        if let Some(a) = self.attempts.last_mut()
            && a.reflection.is_none()
        {
            a.reflection = Some(redact(text, &self.secrets));
        }
    }

    /// A test run's result: the change before it failed or worked. True when these are the
    /// run's first failures, which are what memory is searched for.
    pub(super) fn tested(&mut self, result: Option<&RunResult>) -> bool {
        let Some(r) = result else {
            return false;
        };
        if r.passed_all() {
            self.fix = self.proposed.take();
            return false;
        }
        if let Some(diff) = self.proposed.take() {
            self.attempts.push(Attempt {
                diff,
                reflection: None,
            });
        }
        if !self.failures.is_empty() || r.failures.is_empty() {
            return false;
        }
        self.failures = r
            .failures
            .iter()
            .map(|f| Failure {
                test_id: redact(&f.test_id, &self.secrets),
                location: f.location.clone(),
                message: redact(&f.message, &self.secrets),
                frames: f.frames.clone(),
            })
            .collect();
        true
    }
}

impl Drive<'_> {
    /// How long a search may take: a moment for a SQLite store another process holds locked,
    /// a connection and a query for a team's PostgreSQL store. Past it the run goes on
    /// without memory: a record never stalls a run.
    fn memory_wait(&self) -> std::time::Duration {
        match self.config.memory.url {
            Some(_) => crate::memory::postgres::CONNECT_TIMEOUT + RECALL_WAIT,
            None => RECALL_WAIT,
        }
    }

    /// Searches the workspace's records (and the user's, for `memory.scope = "user"`) for the
    /// run's first failures, by text and, with an embedding model, by vector too: what the
    /// prompts are to show of them (`Input::Memory`), or `None` without memory.
    pub(super) async fn recall(
        &self,
        trail: &Trail,
        observer: &mut Observer<'_>,
    ) -> Option<String> {
        let (Some(_), true) = (self.record, self.config.memory.enabled) else {
            return None;
        };
        let signatures: Vec<_> = trail.failures.iter().map(memory::signature).collect();
        let words = memory::query_words(&signatures);
        let (probe, embeddings) = self.query_vector(trail, &signatures).await;
        let (root, config, w) = (
            self.root.to_path_buf(),
            self.config.memory.clone(),
            words.clone(),
        );
        let searched = tokio::task::spawn_blocking(move || {
            Memories::open(&root, &config, View::Workspace, true)?.recall(
                &w,
                probe.as_deref(),
                RECALL,
            )
        });
        let (query, hits) = match tokio::time::timeout(self.memory_wait(), searched).await {
            Ok(Ok(Ok(found))) => found,
            Ok(Ok(Err(e))) => {
                tracing::warn!("memory: {e}; this run goes on without memory");
                (memory::fts_query(&words), Vec::new())
            }
            Ok(Err(e)) => {
                tracing::warn!("memory: the search failed: {e}");
                (memory::fts_query(&words), Vec::new())
            }
            Err(_) => {
                tracing::warn!("memory: the store is busy; this run goes on without memory");
                (memory::fts_query(&words), Vec::new())
            }
        };
        let (section, used) = memory::section(&hits, self.config.memory.max_bytes);
        observer.record(RunEvent::Memory {
            query,
            used,
            embeddings,
        });
        Some(section)
    }

    /// The current failures' embedding, when an embedding model is configured and answers,
    /// and what the journal says of it: how the records are ranked, or why by text alone.
    async fn query_vector(
        &self,
        trail: &Trail,
        signatures: &[memory::Signature],
    ) -> (Option<Vec<f32>>, Option<String>) {
        let Some(e) = &trail.embedder else {
            return (None, None);
        };
        let text = redact(&memory::query_text(signatures), &trail.secrets);
        match e.embed(&[text], self.cancel).await {
            Ok(mut v) => match v.pop() {
                Some(vector) => {
                    let note = format!(
                        "text (BM25) and vector ({}) rankings fused by reciprocal rank",
                        e.model()
                    );
                    (Some(vector), Some(note))
                }
                None => (
                    None,
                    Some("no embedding came back; ranked by text alone".into()),
                ),
            },
            Err(err) => {
                tracing::warn!("memory: {err}; this run's memory is ranked by text alone");
                (None, Some(format!("{err}; ranked by text alone")))
            }
        }
    }

    /// Keeps the run's episodes: in the workspace's store (and the user's for
    /// `memory.scope = "user"`), or in the team's PostgreSQL store.
    pub(super) async fn remember(&self, run: &Run, trail: &Trail, status: RunStatus, run_id: &str) {
        let (Some(_), true) = (self.record, self.config.memory.enabled) else {
            return;
        };
        if trail.failures.is_empty() {
            return;
        }
        let fix = trail.fix.as_deref().filter(|_| status == RunStatus::Done);
        let files: Vec<String> = run.files_changed().to_vec();
        let records: Vec<Memory> = memory::episodes(
            &trail.failures,
            &files,
            &trail.attempts,
            fix,
            status.as_str(),
        )
        .into_iter()
        .map(|e| redact_memory(&Memory::Episode(e), &trail.secrets))
        .collect();
        let vectors = self.record_vectors(trail, &records).await;
        let (root, config, id) = (
            self.root.to_path_buf(),
            self.config.memory.clone(),
            run_id.to_string(),
        );
        let kept = tokio::task::spawn_blocking(move || {
            let vectors = (!vectors.is_empty()).then_some(vectors);
            Memories::open(&root, &config, View::Workspace, true)?.remember(
                &id,
                &records,
                vectors.as_deref(),
            )
        });
        match tokio::time::timeout(self.memory_wait() * 5, kept).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("memory: the run's records were not kept: {e}"),
            Ok(Err(e)) => tracing::warn!("memory: the run's records were not kept: {e}"),
            Err(_) => tracing::warn!("memory: the run's records were not kept: the store is busy"),
        }
    }

    /// The records' embeddings (of their redacted search text), one per record, when an
    /// embedding model is configured; none when its server fails (they are found by text, as
    /// records written before embeddings were configured are).
    async fn record_vectors(&self, trail: &Trail, records: &[Memory]) -> Vec<Vec<f32>> {
        let Some(e) = &trail.embedder else {
            return Vec::new();
        };
        let texts: Vec<String> = records.iter().map(memory::search_text).collect();
        match e.embed(&texts, self.cancel).await {
            Ok(v) if v.len() == records.len() => v,
            Ok(_) => {
                tracing::warn!("memory: the embeddings did not match the records; kept without");
                Vec::new()
            }
            Err(err) => {
                tracing::warn!("memory: {err}; this run's records are kept without vectors");
                Vec::new()
            }
        }
    }
}
