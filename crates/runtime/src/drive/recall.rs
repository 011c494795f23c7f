//! The driver's side of memory across runs (docs/memory.md): what the run tries is kept as it
//! goes (`Trail`), the records matching its first failures are recalled into `Run::memory`
//! once those are known (journaled with their scores), and its episodes are remembered when
//! it ends. Best effort throughout: a store that fails costs the memory, never the run.

use agent_ls_core::agent::{Run, RunStatus};
use agent_ls_core::events::RunEvent;
use agent_ls_core::memory::{self, Attempt, Memory};
use agent_ls_core::test_output::Failure;

use super::Drive;
use super::observer::Observer;
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
    /// run's first failures, and sets what the prompts show of them.
    pub(super) async fn recall(&self, run: &mut Run, trail: &Trail, observer: &mut Observer<'_>) {
        let (Some(_), true) = (self.record, self.config.memory.enabled) else {
            return;
        };
        let signatures: Vec<_> = trail.failures.iter().map(memory::signature).collect();
        let words = memory::query_words(&signatures);
        let (root, config, w) = (
            self.root.to_path_buf(),
            self.config.memory.clone(),
            words.clone(),
        );
        let searched = tokio::task::spawn_blocking(move || {
            Memories::open(&root, &config, View::Workspace, true)?.recall(&w, None, RECALL)
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
        run.memory = section;
        observer.record(RunEvent::Memory { query, used });
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
        let files: Vec<String> = run.files_changed.clone();
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
        let (root, config, id) = (
            self.root.to_path_buf(),
            self.config.memory.clone(),
            run_id.to_string(),
        );
        let kept = tokio::task::spawn_blocking(move || {
            Memories::open(&root, &config, View::Workspace, true)?.remember(&id, &records, None)
        });
        match tokio::time::timeout(self.memory_wait() * 5, kept).await {
            Ok(Ok(Ok(_))) => {}
            Ok(Ok(Err(e))) => tracing::warn!("memory: the run's records were not kept: {e}"),
            Ok(Err(e)) => tracing::warn!("memory: the run's records were not kept: {e}"),
            Err(_) => tracing::warn!("memory: the run's records were not kept: the store is busy"),
        }
    }
}
