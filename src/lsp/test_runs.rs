//! Background test runs seen from the server, the agent's included: one process at a time
//! per workspace, one generation counter for all of them, progress while one runs, its
//! failures published as diagnostics, and `agent-ls/testStatus`.
//!
//! The rule when a run is asked for while another goes on:
//! - a run for the agent loop supersedes a rerun or a save's run (that one is cancelled and its
//!   late result dropped): the agent's run tests newer code;
//! - a rerun or a save's run asked for during the agent's run waits, and starts when the
//!   agent's run ends (only the last one asked for);
//! - a rerun during a rerun supersedes it.
//!
//! So only one test process runs at a time, and diagnostics always come from the newest run.
//! This module reports through `TestMessage` and never sees the session; its state changes
//! only on the session's task, and everything it sends leaves through the outbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ropey::Rope;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::WorkDoneProgressCreate;
use tower_lsp_server::ls_types::{
    Diagnostic, DiagnosticRelatedInformation, DiagnosticSeverity, Location as LspLocation,
    MessageType, NumberOrString, Position, ProgressToken, Range, Uri, WorkDoneProgress,
    WorkDoneProgressBegin, WorkDoneProgressCreateParams, WorkDoneProgressEnd,
};
use tracing::{debug, info, warn};

use super::jobs::{self, Report};
use super::outbox::Outbox;
use agent_ls_core::text::{Buffer, Encoding, to_position};
use agent_ls_runtime::config::{SandboxConfig, TestConfig};
use agent_ls_runtime::tests_run::{self, Location, RunError, RunResult, TestState};
use agent_ls_runtime::trust::sandbox::Sandbox;

/// The `source` of every diagnostic a test run publishes.
pub const SOURCE: &str = "agent-ls test";

/// Notification `agent-ls/testStatus`.
pub enum TestStatus {}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestStatusParams {
    pub state: TestState,
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

/// What a test run reports back.
pub enum TestMessage {
    /// Run `generation` ended; `disk` holds the files its failures name, read off the
    /// session's task, for placing diagnostics in files the editor does not have open.
    Finished {
        generation: u64,
        result: Box<Result<RunResult, RunError>>,
        disk: HashMap<PathBuf, Rope>,
    },
    /// The debounce delay after save `generation` passed.
    SaveSettled { generation: u64 },
    /// Another server on this workspace (another editor window) finished a run: its result,
    /// and the files its failures name, read off the session's task.
    Shared {
        result: Box<RunResult>,
        disk: HashMap<PathBuf, Rope>,
    },
}

/// Who asked for a run.
pub enum Trigger {
    /// A rerun command, a save, or a routed command ("run `make lint`"), with the command
    /// to run in place of the tests.
    User {
        reason: String,
        command: Option<Vec<String>>,
    },
    /// The agent loop, which waits for the result; with a command, a tool's narrowed run or
    /// allowlisted command, whose result goes to the agent only (it says nothing about the
    /// whole test suite, so the diagnostics stay).
    Agent {
        reply: oneshot::Sender<Result<RunResult, RunError>>,
        command: Option<Vec<String>>,
    },
}

impl Trigger {
    fn is_agent(&self) -> bool {
        matches!(self, Trigger::Agent { .. })
    }
}

struct Running {
    generation: u64,
    cancel: CancellationToken,
    trigger: Trigger,
}

/// What a run needs from the session, borrowed for the call.
pub struct Context<'a> {
    pub outbox: &'a Outbox,
    pub report: &'a Report<TestMessage>,
    pub root: &'a Path,
    pub config: &'a TestConfig,
    pub sandbox: &'a SandboxConfig,
    pub progress: bool,
    pub documents: &'a HashMap<Uri, Buffer>,
    pub encoding: Encoding,
    /// The reviewer's findings, published with the tests' diagnostics of the same document.
    pub review: &'a super::review_diagnostics::ReviewDiagnostics,
}

pub struct TestRuns {
    /// This server's id in the workspace's shared latest result (`tests_run::shared`).
    writer: String,
    generation: u64,
    running: Option<Running>,
    /// A user's run asked for during the agent's, started when that one ends.
    queued: Option<Trigger>,
    save_generation: u64,
    /// The diagnostics of the last published run by file (to clear them next time, and to
    /// publish them again with the reviewer's).
    published: HashMap<Uri, (Vec<Diagnostic>, Option<i32>)>,
    last: Option<Arc<RunResult>>,
}

impl Default for TestRuns {
    fn default() -> Self {
        TestRuns {
            writer: tests_run::shared::writer_id(),
            generation: 0,
            running: None,
            queued: None,
            save_generation: 0,
            published: HashMap::new(),
            last: None,
        }
    }
}

impl TestRuns {
    /// This server's id among those sharing the workspace's latest result.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Publishes the result of another server's run on this workspace, as the latest.
    pub fn shared(&mut self, cx: &Context<'_>, result: RunResult, disk: &HashMap<PathBuf, Rope>) {
        if self.running.is_some() {
            // This window's own run, once it ends, is the newer result.
            return;
        }
        self.publish_result(cx, result, disk, false);
    }
    /// Publishes `uri`'s diagnostics again, the last test run's with the reviewer's (after
    /// the reviewer's changed), at the document's version.
    pub fn republish(&self, cx: &Context<'_>, uri: &Uri) {
        let mut all = self
            .published
            .get(uri)
            .map(|(d, _)| d.clone())
            .unwrap_or_default();
        all.extend(cx.review.of(uri));
        let version = cx.documents.get(uri).map(|b| b.version());
        cx.outbox.publish_diagnostics(uri.clone(), all, version);
    }

    /// The latest finished run's result.
    pub fn last(&self) -> Option<Arc<RunResult>> {
        self.last.clone()
    }

    /// Starts a run for `trigger` under the rule in this module's comment.
    pub fn start(&mut self, cx: &Context<'_>, trigger: Trigger) {
        if let Some(running) = &self.running {
            if running.trigger.is_agent() && !trigger.is_agent() {
                info!("a test run was asked for during the agent's; it runs after that one");
                self.queued = Some(trigger);
                return;
            }
            let old = self.running.take().map(|r| {
                r.cancel.cancel();
                r.trigger
            });
            // The agent waiting on a superseded run hears so rather than waiting forever.
            if let Some(Trigger::Agent { reply, .. }) = old {
                let _ = reply.send(Err(RunError::Superseded));
            }
        }
        self.generation += 1;
        let generation = self.generation;
        let cancel = CancellationToken::new();
        let mut config = cx.config.clone();
        let reason = match &trigger {
            Trigger::User { reason, command } => {
                if let Some(argv) = command {
                    config = tests_run::with_command(&config, argv.clone());
                }
                reason.clone()
            }
            Trigger::Agent { command, .. } => {
                if let Some(argv) = command {
                    config = tests_run::with_command(&config, argv.clone());
                }
                "agent".into()
            }
        };
        info!(generation, reason, "starting a test run");
        self.running = Some(Running {
            generation,
            cancel: cancel.clone(),
            trigger,
        });
        let job = run(
            generation,
            cx.outbox.clone(),
            cx.report.clone(),
            Job {
                root: cx.root.to_path_buf(),
                config,
                sandbox: Sandbox::from_config(cx.sandbox),
            },
            cx.progress,
            cancel,
        );
        let report = cx.report.clone();
        tokio::spawn(async move {
            // A panic still ends the run: "error" status, and an agent waiting on it hears.
            if let Err(why) = jobs::caught(jobs::Kind::TestRun, job).await {
                report(TestMessage::Finished {
                    generation,
                    result: Box::new(Err(RunError::Internal(why.to_string()))),
                    disk: HashMap::new(),
                });
            }
        });
    }

    /// Cancels the run in progress and forgets a queued one.
    pub fn cancel(&mut self) {
        self.queued = None;
        if let Some(r) = &self.running {
            r.cancel.cancel();
        }
    }

    /// Cancels the run in progress if it is the agent's (the run itself was cancelled).
    pub fn cancel_agent(&mut self) {
        if let Some(r) = self.running.as_ref().filter(|r| r.trigger.is_agent()) {
            r.cancel.cancel();
        }
    }

    /// Cancels run `generation` if it is the one in progress (a late cancel button of an
    /// older run must not stop a newer one).
    pub fn cancel_generation(&mut self, generation: u64) {
        if let Some(r) = self.running.as_ref().filter(|r| r.generation == generation) {
            r.cancel.cancel();
        }
    }

    /// Bumps the save counter and returns it; a debounced run starts only if no save came
    /// after it.
    pub fn saved(&mut self, report: &Report<TestMessage>, delay: std::time::Duration) {
        self.save_generation += 1;
        let generation = self.save_generation;
        let report = report.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            report(TestMessage::SaveSettled { generation });
        });
    }

    pub fn is_latest_save(&self, generation: u64) -> bool {
        generation == self.save_generation
    }

    /// Handles a finished run: a superseded one is dropped; otherwise the agent hears its
    /// result, its failures replace the previous run's diagnostics, the status is sent, and a
    /// run queued behind it starts.
    pub fn finished(
        &mut self,
        cx: &Context<'_>,
        generation: u64,
        result: Result<RunResult, RunError>,
        disk: &HashMap<PathBuf, Rope>,
    ) {
        if self.running.as_ref().map(|r| r.generation) != Some(generation) {
            debug!(generation, "dropped the result of a superseded test run");
            return;
        }
        let Some(running) = self.running.take() else {
            return;
        };
        if let Trigger::Agent { reply, command } = running.trigger {
            let _ = reply.send(result.clone());
            if command.is_some() {
                // The status ends the "running" the run began with; the diagnostics stay.
                let (state, passed, failed, duration_ms, cmd) = match &result {
                    Ok(r) => (
                        r.state(),
                        r.passed,
                        r.failed.or(Some(r.failures.len() as u32)),
                        Some(r.duration_ms),
                        Some(r.command.argv.join(" ")),
                    ),
                    Err(_) => (TestState::Error, None, None, None, None),
                };
                cx.outbox.notify::<TestStatus>(TestStatusParams {
                    state,
                    passed,
                    failed,
                    duration_ms,
                    command: cmd,
                    message: Some(
                        "the agent's narrowed run; the diagnostics are the last full run's".into(),
                    ),
                });
                if let Some(next) = self.queued.take() {
                    self.start(cx, next);
                }
                return;
            }
        }
        match result {
            Ok(r) => self.publish_result(cx, r, disk, true),
            Err(err) => {
                warn!("test run not started: {err}");
                let message = err.to_string();
                cx.outbox
                    .show_message(MessageType::WARNING, format!("agent-ls: {message}"));
                cx.outbox.notify::<TestStatus>(TestStatusParams {
                    state: TestState::Error,
                    passed: None,
                    failed: None,
                    duration_ms: None,
                    command: None,
                    message: Some(message),
                });
            }
        }
        if let Some(next) = self.queued.take() {
            self.start(cx, next);
        }
    }

    /// Publishes a run's failures as diagnostics, replacing the previous run's, and its
    /// status; this server's own (`share`) becomes the workspace's latest for the others.
    fn publish_result(
        &mut self,
        cx: &Context<'_>,
        result: RunResult,
        disk: &HashMap<PathBuf, Rope>,
        share: bool,
    ) {
        info!(
            state = ?result.state(),
            failures = result.failures.len(),
            ms = result.duration_ms,
            "test run finished"
        );
        let command = Some(result.command.argv.join(" "));
        if result.state() == TestState::Cancelled {
            // A cancelled run says nothing about the code: the diagnostics of the last
            // complete run stay.
            cx.outbox.notify::<TestStatus>(TestStatusParams {
                state: TestState::Cancelled,
                passed: None,
                failed: None,
                duration_ms: Some(result.duration_ms),
                command,
                message: None,
            });
            return;
        }
        if let Some(why) = &result.environment {
            // The command did not run the tests: this says nothing about the code, so no
            // failure becomes a diagnostic and the last complete run's stay.
            cx.outbox.show_message(
                MessageType::WARNING,
                format!("agent-ls: the tests did not run: {why}"),
            );
            cx.outbox.notify::<TestStatus>(TestStatusParams {
                state: TestState::Error,
                passed: None,
                failed: None,
                duration_ms: Some(result.duration_ms),
                command,
                message: Some(why.clone()),
            });
            return;
        }
        let by_file = diagnostics(&result, cx, disk);
        for (uri, (diags, version)) in &by_file {
            let mut all = diags.clone();
            all.extend(cx.review.of(uri));
            cx.outbox.publish_diagnostics(uri.clone(), all, *version);
        }
        for stale in self.published.keys().filter(|u| !by_file.contains_key(*u)) {
            cx.outbox
                .publish_diagnostics(stale.clone(), cx.review.of(stale), None);
        }
        self.published = by_file;
        cx.outbox.notify::<TestStatus>(TestStatusParams {
            state: result.state(),
            passed: result.passed,
            failed: result.failed.or(Some(result.failures.len() as u32)),
            duration_ms: Some(result.duration_ms),
            command,
            // A timeout or a sandbox limit, named; or where another window's run came from.
            message: result.stopped().or_else(|| {
                (!share).then(|| "the latest run of this workspace, from another window".into())
            }),
        });
        if share {
            let (root, writer, shared) =
                (cx.root.to_path_buf(), self.writer.clone(), result.clone());
            tokio::task::spawn_blocking(move || {
                if let Err(e) = tests_run::shared::write(&root, &writer, &shared) {
                    warn!("the other windows will not see this test run: {e}");
                }
            });
        }
        self.last = Some(Arc::new(result));
    }
}

/// What one run runs: the command the configuration gives, in the workspace, confined.
struct Job {
    root: PathBuf,
    config: TestConfig,
    sandbox: Sandbox,
}

/// One run, on a task of its own: status and progress out, the process, then the result
/// (with the failures' files read from disk) back to the session.
async fn run(
    generation: u64,
    outbox: Outbox,
    report: Report<TestMessage>,
    Job {
        root,
        config,
        sandbox,
    }: Job,
    progress: bool,
    cancel: CancellationToken,
) {
    let command = tests_run::prepare(&root, &config).map(|c| c.argv.join(" "));
    outbox.notify::<TestStatus>(TestStatusParams {
        state: TestState::Running,
        passed: None,
        failed: None,
        duration_ms: None,
        command: command.clone().ok(),
        message: None,
    });
    let token = ProgressToken::String(format!("agent-ls/tests/{generation}"));
    let ongoing = match (&command, progress) {
        (Ok(cmd), true) => {
            let created = outbox.request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
                token: token.clone(),
            });
            match created.await {
                Ok(()) => {
                    outbox.progress(
                        token.clone(),
                        WorkDoneProgress::Begin(WorkDoneProgressBegin {
                            title: "agent-ls tests".into(),
                            message: Some(format!("running {cmd}…")),
                            cancellable: Some(true),
                            ..Default::default()
                        }),
                    );
                    true
                }
                Err(e) => {
                    debug!("the client refused a progress token: {e}");
                    false
                }
            }
        }
        _ => false,
    };
    // Guarded here too, so a panic in the run still ends the progress it began.
    let running = async {
        jobs::injected_panic(jobs::Kind::TestRun);
        tests_run::run(&root, &config, &sandbox, &cancel).await
    };
    let result = jobs::caught(jobs::Kind::TestRun, running)
        .await
        .unwrap_or_else(|why| Err(RunError::Internal(why.to_string())));
    let summary = match &result {
        Ok(r) if r.stopped().is_some() => r.stopped().unwrap_or_default(),
        Ok(r) => format!(
            "{}: {} passed, {} failed",
            r.state().as_str(),
            r.passed.unwrap_or(0),
            r.failed.unwrap_or(r.failures.len() as u32)
        ),
        Err(e) => e.to_string(),
    };
    if ongoing {
        outbox.progress(
            token,
            WorkDoneProgress::End(WorkDoneProgressEnd {
                message: Some(summary),
            }),
        );
    } else if !progress {
        // A client without workDoneProgress (eglot 1.9) sees each result in its log.
        let command = command
            .as_ref()
            .map_or(String::new(), |c| format!(" ({c})"));
        outbox.log_message(
            MessageType::INFO,
            format!("agent-ls tests{command}: {summary}"),
        );
    }
    let disk = match &result {
        Ok(r) => read_failure_files(&root, r),
        Err(_) => HashMap::new(),
    };
    report(TestMessage::Finished {
        generation,
        result: Box::new(result),
        disk,
    });
}

/// Watches the workspace's shared latest result (`tests_run::shared`) for another server's
/// runs: its time is looked at each second (a stat; a network folder has no inotify), and a
/// new result another writer made is read, with the files its failures name, off the
/// session's task and reported. The first look is at once, so a window opened later shows
/// the workspace's latest result.
pub fn watch_shared(root: PathBuf, writer: String, report: Report<TestMessage>) {
    tokio::spawn(async move {
        let mut seen = None;
        let mut seen_before: Option<()> = None;
        loop {
            let modified = tests_run::shared::modified(&root);
            if modified.is_some() && modified != seen {
                seen = modified;
                let root = root.clone();
                let read = tokio::task::spawn_blocking(move || {
                    let latest = tests_run::shared::read(&root)?;
                    let disk = read_failure_files(&root, &latest.result);
                    Some((latest, disk))
                })
                .await;
                // At the first look, only a window still open counts: a result a closed
                // server left is the last session's, not another window's.
                let first = seen_before.is_none();
                seen_before = Some(());
                if let Ok(Some((latest, disk))) = read
                    && latest.writer != writer
                    && (!first || writer_alive(&latest.writer))
                {
                    report(TestMessage::Shared {
                        result: Box::new(latest.result),
                        disk,
                    });
                }
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
}

/// Whether the server that wrote a shared result (`pid-nanos`) still runs.
fn writer_alive(writer: &str) -> bool {
    writer
        .split('-')
        .next()
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists())
}

/// The files a run's failures and their frames name, read from disk (at most 200), so
/// diagnostics can be placed in files the editor does not have open.
fn read_failure_files(root: &Path, result: &RunResult) -> HashMap<PathBuf, Rope> {
    let mut out = HashMap::new();
    let locations = result
        .failures
        .iter()
        .flat_map(|f| f.location.iter().chain(f.frames.iter()));
    for loc in locations {
        if out.len() >= 200 {
            break;
        }
        let path = root.join(&loc.file);
        if out.contains_key(&path) {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&path) {
            out.insert(path, Rope::from_str(&text));
        }
    }
    out
}

/// One diagnostic per located failure, grouped by file with the version of the buffer they
/// were placed in; frames become related information.
fn diagnostics(
    result: &RunResult,
    cx: &Context<'_>,
    disk: &HashMap<PathBuf, Rope>,
) -> HashMap<Uri, (Vec<Diagnostic>, Option<i32>)> {
    // Every file the failures name, as a rope once: an open document's own (built now if it
    // was never edited), else the disk's text read by the run.
    let mut ropes: HashMap<PathBuf, (Rope, Option<i32>)> = HashMap::new();
    for loc in result
        .failures
        .iter()
        .flat_map(|f| f.location.iter().chain(f.frames.iter()))
    {
        let path = cx.root.join(&loc.file);
        if ropes.contains_key(&path) {
            continue;
        }
        let open = Uri::from_file_path(&path).and_then(|uri| cx.documents.get(&uri));
        match open {
            Some(buffer) => {
                ropes.insert(path, (buffer.rope().into_owned(), Some(buffer.version())));
            }
            None => {
                if let Some(rope) = disk.get(&path) {
                    ropes.insert(path, (rope.clone(), None));
                }
            }
        }
    }
    let lines = LineSource {
        root: cx.root,
        encoding: cx.encoding,
        ropes: &ropes,
    };
    let mut out: HashMap<Uri, (Vec<Diagnostic>, Option<i32>)> = HashMap::new();
    for failure in &result.failures {
        let Some(location) = &failure.location else {
            continue;
        };
        let Some((uri, range, version)) = lines.place(location) else {
            continue;
        };
        let related: Vec<DiagnosticRelatedInformation> = failure
            .frames
            .iter()
            .filter_map(|f| {
                let (uri, range, _) = lines.place(f)?;
                Some(DiagnosticRelatedInformation {
                    location: LspLocation { uri, range },
                    message: format!("stack frame of {}", failure.test_id),
                })
            })
            .collect();
        let entry = out.entry(uri).or_insert_with(|| (Vec::new(), version));
        entry.0.push(Diagnostic {
            range,
            severity: Some(DiagnosticSeverity::ERROR),
            // The test is named once, as the code: editors show the code beside the message
            // (Emacs as "[code] message"), and a message that repeated it read twice.
            code: Some(NumberOrString::String(failure.test_id.clone())),
            source: Some(SOURCE.into()),
            message: failure.message.clone(),
            related_information: (!related.is_empty()).then_some(related),
            data: serde_json::to_value(failure).ok(),
            ..Diagnostic::default()
        });
    }
    out
}

/// Turns a tool's (line, column) into an LSP range in the session's encoding, from the
/// editor's buffer when the file is open and from the disk's text otherwise. Pure.
struct LineSource<'a> {
    root: &'a Path,
    encoding: Encoding,
    ropes: &'a HashMap<PathBuf, (Rope, Option<i32>)>,
}

impl LineSource<'_> {
    fn place(&self, loc: &Location) -> Option<(Uri, Range, Option<i32>)> {
        let path = self.root.join(&loc.file);
        let uri = Uri::from_file_path(&path)?;
        let line = loc.line.saturating_sub(1) as usize;
        let (rope, version) = match self.ropes.get(&path) {
            Some((rope, version)) => (Some(rope), *version),
            None => (None, None),
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
                    rope,
                    start_char
                        + if loc.column.is_some() {
                            col
                        } else {
                            first_visible
                        },
                    self.encoding,
                );
                let end = to_position(rope, start_char + content, self.encoding);
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
        Some((uri, range, version))
    }
}
