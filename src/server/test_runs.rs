//! Background test runs seen from the server: one run at a time per workspace (a newer run
//! cancels the older and its late result is dropped), progress while it runs, failures
//! published as diagnostics, and the `agent-ls/testStatus` notification.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ropey::Rope;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::Client;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::{
    Diagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location as LspLocation,
    MessageType, NumberOrString, Position, ProgressToken, Range, Uri,
};
use tracing::{debug, info, warn};

use super::session::{Event, SessionHandle};
use crate::config::TestConfig;
use crate::tests_run::{self, Location, RunError, RunResult};
use crate::text::{Buffer, Encoding, to_position};

/// The `source` of every diagnostic a test run publishes.
pub const SOURCE: &str = "agent-ls test";

/// Notification `agent-ls/testStatus`.
pub enum TestStatus {}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestStatusParams {
    /// "running", "passed", "failed", "timed_out", "cancelled" or "error".
    pub state: String,
    pub passed: Option<u32>,
    pub failed: Option<u32>,
    pub duration_ms: Option<u64>,
    /// The command, as one string for display.
    pub command: Option<String>,
    /// Why the run could not happen, for "error".
    pub message: Option<String>,
}

impl Notification for TestStatus {
    type Params = TestStatusParams;
    const METHOD: &'static str = super::ext::TEST_STATUS;
}

#[derive(Default)]
pub struct TestRuns {
    generation: u64,
    cancel: Option<CancellationToken>,
    save_generation: u64,
    /// Files that carry diagnostics from the last published run, to clear them next time.
    published: HashSet<Uri>,
    last: Option<Arc<RunResult>>,
}

/// What a run needs from the session when it starts.
pub struct Start<'a> {
    pub client: &'a Client,
    pub session: &'a SessionHandle,
    pub root: &'a Path,
    pub config: &'a TestConfig,
    pub progress: bool,
    pub reason: &'a str,
}

impl TestRuns {
    /// The latest run's result, for the agent.
    pub fn last(&self) -> Option<Arc<RunResult>> {
        self.last.clone()
    }

    /// Starts a run, cancelling the one before. The result comes back as
    /// `Event::TestsFinished` with this run's generation.
    pub fn start(&mut self, s: Start<'_>) -> u64 {
        if let Some(old) = self.cancel.take() {
            old.cancel();
        }
        self.generation += 1;
        let generation = self.generation;
        let token = CancellationToken::new();
        self.cancel = Some(token.clone());
        let (client, session, root, config) = (
            s.client.clone(),
            s.session.clone(),
            s.root.to_path_buf(),
            s.config.clone(),
        );
        let progress = s.progress;
        info!(generation, reason = s.reason, "starting a test run");
        tokio::spawn(async move {
            let command = tests_run::prepare(&root, &config).map(|c| c.argv.join(" "));
            let status = |state: &str| TestStatusParams {
                state: state.into(),
                passed: None,
                failed: None,
                duration_ms: None,
                command: command.clone().ok(),
                message: None,
            };
            client
                .send_notification::<TestStatus>(status("running"))
                .await;
            let ongoing = match (&command, progress) {
                (Ok(cmd), true) => {
                    let token = ProgressToken::String(format!("agent-ls/tests/{generation}"));
                    match client.create_work_done_progress(token.clone()).await {
                        Ok(()) => Some(
                            client
                                .progress(token, "agent-ls tests")
                                .with_message(format!("running {cmd}…"))
                                .with_cancel_button()
                                .begin()
                                .await,
                        ),
                        Err(e) => {
                            debug!("the client refused a progress token: {e}");
                            None
                        }
                    }
                }
                _ => None,
            };
            let result = tests_run::run(&root, &config, &token).await;
            if let Some(p) = ongoing {
                let summary = match &result {
                    Ok(r) => format!(
                        "{}: {} passed, {} failed",
                        r.state(),
                        r.passed.unwrap_or(0),
                        r.failed.unwrap_or(r.failures.len() as u32)
                    ),
                    Err(e) => e.to_string(),
                };
                p.finish_with_message(summary).await;
            }
            session.send(Event::TestsFinished {
                generation,
                result: Box::new(result),
            });
        });
        generation
    }

    /// Cancels the run in progress, if any.
    pub fn cancel(&mut self) {
        if let Some(token) = self.cancel.take() {
            token.cancel();
        }
    }

    /// Cancels run `generation` if it is the one in progress (a late cancel button of an
    /// older run must not stop a newer one).
    pub fn cancel_generation(&mut self, generation: u64) {
        if generation == self.generation {
            self.cancel();
        }
    }

    /// Bumps the save counter and returns it; a debounced run starts only if no save came
    /// after it.
    pub fn saved(&mut self) -> u64 {
        self.save_generation += 1;
        self.save_generation
    }

    pub fn is_latest_save(&self, generation: u64) -> bool {
        generation == self.save_generation
    }

    /// Handles a finished run: a stale one (a newer run started since) is dropped; otherwise
    /// its failures replace the previous run's diagnostics and the status is sent.
    pub fn finished(
        &mut self,
        generation: u64,
        result: Result<RunResult, RunError>,
        client: &Client,
        root: &Path,
        documents: &HashMap<Uri, Buffer>,
        encoding: Encoding,
    ) {
        if generation != self.generation {
            debug!(
                generation,
                current = self.generation,
                "dropped the result of a superseded test run"
            );
            return;
        }
        self.cancel = None;
        let client = client.clone();
        let result = match result {
            Ok(r) => r,
            Err(err) => {
                warn!("test run not started: {err}");
                let message = err.to_string();
                tokio::spawn(async move {
                    client
                        .show_message(MessageType::WARNING, format!("agent-ls: {message}"))
                        .await;
                    client
                        .send_notification::<TestStatus>(TestStatusParams {
                            state: "error".into(),
                            passed: None,
                            failed: None,
                            duration_ms: None,
                            command: None,
                            message: Some(message),
                        })
                        .await;
                });
                return;
            }
        };
        self.publish(result, &client, root, documents, encoding);
    }

    /// Publishes a run's failures as diagnostics, replacing the previous run's, and its
    /// status. The agent loop's own runs come here too.
    pub fn publish(
        &mut self,
        result: RunResult,
        client: &Client,
        root: &Path,
        documents: &HashMap<Uri, Buffer>,
        encoding: Encoding,
    ) {
        let client = client.clone();
        info!(
            state = result.state(),
            failures = result.failures.len(),
            ms = result.duration_ms,
            "test run finished"
        );
        if result.end == tests_run::RunEnd::Cancelled {
            // A cancelled run says nothing about the code: the diagnostics of the last
            // complete run stay.
            let status = TestStatusParams {
                state: "cancelled".into(),
                passed: None,
                failed: None,
                duration_ms: Some(result.duration_ms),
                command: Some(result.command.argv.join(" ")),
                message: None,
            };
            tokio::spawn(async move { client.send_notification::<TestStatus>(status).await });
            return;
        }
        let by_file = diagnostics(&result, root, documents, encoding);
        let mut publish: Vec<(Uri, Vec<Diagnostic>)> = by_file.into_iter().collect();
        let now: HashSet<Uri> = publish.iter().map(|(u, _)| u.clone()).collect();
        for stale in self.published.difference(&now) {
            publish.push((stale.clone(), Vec::new()));
        }
        self.published = now;
        let status = TestStatusParams {
            state: result.state().into(),
            passed: result.passed,
            failed: result.failed.or(Some(result.failures.len() as u32)),
            duration_ms: Some(result.duration_ms),
            command: Some(result.command.argv.join(" ")),
            message: None,
        };
        self.last = Some(Arc::new(result));
        tokio::spawn(async move {
            for (uri, diags) in publish {
                client.publish_diagnostics(uri, diags, None).await;
            }
            client.send_notification::<TestStatus>(status).await;
        });
    }
}

/// One diagnostic per located failure, grouped by file; frames become related information.
fn diagnostics(
    result: &RunResult,
    root: &Path,
    documents: &HashMap<Uri, Buffer>,
    encoding: Encoding,
) -> HashMap<Uri, Vec<Diagnostic>> {
    let mut lines = LineSource {
        root,
        documents,
        encoding,
        disk: HashMap::new(),
    };
    let mut out: HashMap<Uri, Vec<Diagnostic>> = HashMap::new();
    for failure in &result.failures {
        let Some(location) = &failure.location else {
            continue;
        };
        let Some((uri, range)) = lines.place(location) else {
            continue;
        };
        let related: Vec<DiagnosticRelatedInformation> = failure
            .frames
            .iter()
            .filter_map(|f| {
                let (uri, range) = lines.place(f)?;
                Some(DiagnosticRelatedInformation {
                    location: LspLocation { uri, range },
                    message: format!("stack frame of {}", failure.test_id),
                })
            })
            .collect();
        out.entry(uri).or_default().push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::ERROR),
            code: Some(NumberOrString::String(failure.test_id.clone())),
            source: Some(SOURCE.into()),
            message: format!("{}: {}", failure.test_id, failure.message),
            related_information: (!related.is_empty()).then_some(related),
            data: serde_json::to_value(failure).ok(),
            ..Diagnostic::default()
        });
    }
    out
}

/// Turns a tool's (line, column) into an LSP range in the session's encoding, from the
/// editor's buffer when the file is open and from the disk otherwise.
struct LineSource<'a> {
    root: &'a Path,
    documents: &'a HashMap<Uri, Buffer>,
    encoding: Encoding,
    disk: HashMap<PathBuf, Option<Rope>>,
}

impl LineSource<'_> {
    fn place(&mut self, loc: &Location) -> Option<(Uri, Range)> {
        let path = self.root.join(&loc.file);
        let uri = Uri::from_file_path(&path)?;
        let line = loc.line.saturating_sub(1) as usize;
        let rope = match self.documents.get(&uri) {
            Some(buffer) => Some(buffer.rope().clone()),
            None => self
                .disk
                .entry(path.clone())
                .or_insert_with(|| {
                    std::fs::read_to_string(&path)
                        .ok()
                        .map(|t| Rope::from_str(&t))
                })
                .clone(),
        };
        let range = match rope.filter(|r| line < r.len_lines()) {
            Some(rope) => {
                // Tools count columns in characters (or bytes, the same for ASCII); the range
                // runs from there to the end of the line's text.
                let start_char = rope.line_to_char(line);
                let text = rope.line(line);
                let content = text
                    .chars()
                    .take_while(|c| *c != '\n' && *c != '\r')
                    .count();
                let col = loc
                    .column
                    .map_or(0, |c| (c.saturating_sub(1) as usize).min(content));
                let first_visible = text
                    .chars()
                    .take(content)
                    .position(|c| !c.is_whitespace())
                    .unwrap_or(0);
                let start = to_position(
                    &rope,
                    start_char
                        + if loc.column.is_some() {
                            col
                        } else {
                            first_visible
                        },
                    self.encoding,
                );
                let end = to_position(&rope, start_char + content, self.encoding);
                Range::new(
                    Position::new(start.line, start.character),
                    Position::new(end.line, end.character),
                )
            }
            None => {
                let p = Position::new(line as u32, loc.column.map_or(0, |c| c.saturating_sub(1)));
                Range::new(p, p)
            }
        };
        Some((uri, range))
    }
}
