//! Performs the agent's effects and feeds the results back into `agent::step`. Shared by the
//! headless `agent-ls run` and the server: only the `Shell` (how approval, applying and
//! progress reach the user) differs, so the two loops cannot drift apart.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::agent::{self, Effect, Event, Phase, Run, TestSummary};
use crate::config::Config;
use crate::edit::{self, FileChange, FileText};
use crate::journal::Journal;
use crate::model::{ModelError, Models, OnToken, Request, Role, Totals};
use crate::store::{Iteration, Store};
use crate::tests_run::{self, RunEnd};
use serde_json::json;

/// How the loop reaches the user and the files.
#[allow(async_fn_in_trait)]
pub trait Shell {
    /// The current text of a workspace file (the editor's buffer when it has one).
    fn read(&self, relative: &str) -> FileText;
    /// Shows the change and answers whether to apply it.
    async fn approve(&mut self, changes: &[FileChange], diff: &str) -> bool;
    /// Applies an approved change; refuses when a file changed since it was read.
    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError>;
    fn progress(&mut self, message: &str);
    fn warn(&mut self, message: &str);
    /// Called before each step, so `read` sees the latest text (the server takes a fresh
    /// snapshot of the editor's buffers here).
    async fn refresh(&mut self) {}
    /// A test run of the loop ended (the server publishes its diagnostics).
    fn tests_ran(&mut self, _result: &tests_run::RunResult) {}
    /// The plan's task the next change works on ("T1 fix the failing tests"), for the history.
    fn task(&mut self, _task: &str) {}
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The files changed meanwhile and the change could not be re-located.
    Stale(String),
    Failed(String),
}

/// The outcome of a run, in the shape of `agent-ls/runFinished`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct Outcome {
    pub run_id: String,
    pub status: String,
    pub answer: String,
    pub iterations: u32,
    pub files_changed: Vec<String>,
    pub tests: TestCounts,
    pub tokens: u64,
    pub duration_ms: u64,
    pub cost_usd: Option<f64>,
    /// Why a failed run failed, when the cause has a kind of its own: "auth", "config",
    /// "timeout".
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure_kind: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, serde::Deserialize)]
pub struct TestCounts {
    pub passed: u32,
    pub failed: u32,
}

pub struct Drive<'a> {
    pub models: &'a Models,
    pub config: &'a Config,
    pub root: &'a Path,
    pub cancel: &'a CancellationToken,
    /// Receives streamed model text (the terminal's stderr for `agent-ls run`).
    pub on_token: Option<OnToken<'a>>,
    /// Record the run in `.agent-ls/runs/` (see `journal.rs`).
    pub journal: bool,
}

pub fn new_run_id() -> String {
    format!("run_{:08x}", fastrand::u32(..))
}

impl Drive<'_> {
    pub async fn run(&self, run: &mut Run, shell: &mut impl Shell, run_id: String) -> Outcome {
        self.drive(run, shell, run_id, false).await
    }

    /// Goes on with a run from its checkpoint (see `agent::resume`), under the same id: its
    /// journal is appended to and its store row updated.
    pub async fn resume(&self, run: &mut Run, shell: &mut impl Shell, run_id: String) -> Outcome {
        self.drive(run, shell, run_id, true).await
    }

    async fn drive(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        run_id: String,
        resumed: bool,
    ) -> Outcome {
        let started = Instant::now();
        let mut totals = Totals::default();
        let mut failure_kind = None;
        let mut queue: std::collections::VecDeque<Effect> = Default::default();
        self.refresh_context(run, shell);
        queue.extend(if resumed {
            agent::resume(run)
        } else {
            agent::step(run, Event::Start)
        });
        let mut finished = None;
        let mut journal = match (self.journal, resumed) {
            (true, true) => Journal::append(self.root, &run_id),
            (true, false) => Journal::create(self.root, &run_id),
            (false, _) => Journal::disabled(&run_id),
        };
        journal.write(
            "agent",
            if resumed { "resumed" } else { "intent" },
            json!({"goal": run.goal, "intent": run.intent, "iterations": run.iterations}),
        );
        let mut record = Recorder::open(self.journal, self.root, &run_id, run);
        shell.refresh().await;
        while let Some(effect) = queue.pop_front() {
            // A cancel between effects ends the run before anything else is done.
            if self.cancel.is_cancelled() && !matches!(effect, Effect::Finish { .. }) {
                queue.clear();
                queue.extend(agent::step(run, Event::Cancel));
                continue;
            }
            let event = match effect {
                Effect::Finish { status, answer } => {
                    finished = Some((status, answer));
                    break;
                }
                Effect::Progress(m) => {
                    let step = format!(
                        "{m} (iteration {} of {})",
                        run.iterations.max(1),
                        run.budget.max_iterations
                    );
                    shell.progress(&step);
                    continue;
                }
                Effect::Warn(m) => {
                    shell.warn(&m);
                    continue;
                }
                Effect::CallModel { role, messages } => {
                    if role == Role::Coder {
                        record.checkpoint(run);
                    }
                    let request = Request {
                        messages,
                        ..Request::default()
                    };
                    match self
                        .models
                        .call(role, &request, self.cancel, self.on_token)
                        .await
                    {
                        Ok(r) => {
                            totals.add(&r);
                            journal.model_call(role, &r);
                            journal_reading(&mut journal, role, &r.text);
                            record.model_call(role, &r);
                            Event::ModelAnswered { role, text: r.text }
                        }
                        Err(ModelError::Cancelled) => Event::Cancel,
                        Err(e) => {
                            failure_kind = match &e {
                                ModelError::Auth { .. } => Some("auth"),
                                ModelError::NotConfigured(_) => Some("config"),
                                ModelError::Timeout { .. } => Some("timeout"),
                                _ => None,
                            };
                            Event::ModelFailed {
                                role,
                                error: e.to_string(),
                            }
                        }
                    }
                }
                Effect::Locate(plan) => {
                    shell.refresh().await;
                    let limits = self.config.edit.limits();
                    Event::Located(edit::apply_plan(&plan, self.root, &limits, |rel| {
                        shell.read(rel)
                    }))
                }
                Effect::AskApproval { changes, diff } => {
                    if self.cancel.is_cancelled() {
                        Event::Cancel
                    } else {
                        journal.write("agent", "patch", json!({"files": changes.iter().map(|c| &c.path).collect::<Vec<_>>(), "diff": diff}));
                        let yes = shell.approve(&changes, &diff).await;
                        journal.write("user", "approval", json!({"accepted": yes}));
                        record.approval(run.iterations, yes, &changes);
                        if self.cancel.is_cancelled() {
                            Event::Cancel
                        } else if yes {
                            Event::Approved
                        } else {
                            Event::Rejected
                        }
                    }
                }
                Effect::Apply(changes) => {
                    if let Some(t) = run.tasks.get(run.task) {
                        shell.task(&format!("{} {}", t.id, t.title));
                    }
                    match shell.apply(&changes).await {
                        Ok(()) => Event::Applied,
                        Err(ApplyError::Stale(e)) => Event::Stale(e),
                        Err(ApplyError::Failed(e)) => Event::ApplyFailed(e),
                    }
                }
                Effect::RunTests => {
                    let tests_started = Instant::now();
                    let result = tests_run::run(self.root, &self.config.test, self.cancel).await;
                    record.test_time(tests_started.elapsed());
                    match result {
                        Ok(r) if r.end == RunEnd::Cancelled => Event::Cancel,
                        Ok(r) => {
                            if r.end == RunEnd::TimedOut {
                                failure_kind = Some("timeout");
                            }
                            shell.tests_ran(&r);
                            journal.write("tests", "test_result", json!({"state": r.state(), "passed": r.passed, "failed": r.failed, "failures": r.failures.len()}));
                            let summary = summary(&r);
                            record.tests(&summary);
                            Event::TestsFinished(summary)
                        }
                        Err(e) => Event::TestsUnavailable(e.to_string()),
                    }
                }
            };
            shell.refresh().await;
            self.refresh_context(run, shell);
            queue.extend(agent::step(run, event));
            record.phase(run);
        }
        if let Some((status, answer)) = &finished {
            journal.write("agent", "finished", json!({"status": format!("{status:?}").to_lowercase(), "answer": answer, "iterations": run.iterations, "files_changed": run.files_changed}));
        }
        let (status, answer) =
            finished.unwrap_or((Phase::Failed, "the run ended without an answer".into()));
        let tests = run
            .tests
            .as_ref()
            .map_or(TestCounts::default(), |t| TestCounts {
                passed: t.passed_count,
                failed: t.failed_count,
            });
        let status = match status {
            Phase::Done => "done",
            Phase::Cancelled => "cancelled",
            _ => "failed",
        };
        record.finished(status, run, &answer);
        Outcome {
            run_id,
            status: status.into(),
            answer,
            iterations: run.iterations,
            files_changed: run.files_changed.clone(),
            tests,
            tokens: totals.usage.input_tokens + totals.usage.output_tokens,
            duration_ms: started.elapsed().as_millis() as u64,
            cost_usd: totals.cost_usd,
            failure_kind: if status == "failed" {
                failure_kind.map(String::from)
            } else {
                None
            },
        }
    }

    /// The coder sees the files that matter now: those the goal names, those the failures
    /// point at, then the rest of the project's small text files, within the byte budget.
    fn refresh_context(&self, run: &mut Run, shell: &impl Shell) {
        let mut wanted: Vec<String> = Vec::new();
        for word in run
            .goal
            .split(|c: char| c.is_whitespace() || c == '`' || c == '\'' || c == '"')
        {
            let w = word.trim_matches(|c: char| c == ',' || c == '.' || c == ':' || c == ';');
            if !w.is_empty() && self.root.join(w).is_file() {
                wanted.push(w.to_string());
            }
        }
        if let Some(t) = &run.tests {
            for line in t.report.lines() {
                for token in line.split(|c: char| {
                    c.is_whitespace() || c == '"' || c == '(' || c == ')' || c == ','
                }) {
                    let path = token
                        .split(':')
                        .next()
                        .unwrap_or("")
                        .trim_start_matches("./");
                    if path.contains('.')
                        && !path.contains("..")
                        && self.root.join(path).is_file()
                        && !wanted.iter().any(|w| w == path)
                    {
                        wanted.push(path.to_string());
                    }
                }
            }
        }
        for path in workspace_files(self.root, 200) {
            if !wanted.contains(&path) {
                wanted.push(path);
            }
        }
        let mut context = String::new();
        let mut listed = Vec::new();
        let budget = self.config.agent.context_bytes;
        for path in &wanted {
            // Once the budget is spent the rest are only named, not read: this runs before
            // every step, and a project can have hundreds of files.
            if context.len() >= budget {
                listed.push(path.clone());
                continue;
            }
            let FileText::Text(text) = shell.read(path) else {
                continue;
            };
            let block = format!("{path}\n```\n{text}```\n\n");
            if context.len() + block.len() > budget {
                listed.push(path.clone());
                continue;
            }
            context.push_str(&block);
        }
        if !listed.is_empty() {
            context.push_str(&format!("Other files (not shown): {}\n", listed.join(", ")));
        }
        run.context = context;
    }
}

/// Journals what the loop makes of a planner's, reflector's or evaluator's answer, beside the
/// raw model_call, so a reader sees the plan, reflection and score as data.
fn journal_reading(journal: &mut Journal, role: Role, text: &str) {
    match role {
        Role::Planner => {
            if let Ok(tasks) = agent::prompts::parse_plan(text) {
                journal.write("planner", "plan", json!({"tasks": tasks}));
            }
        }
        Role::Reflector => {
            let data = match agent::prompts::parse_reflection(text) {
                Ok(r) => {
                    json!({"task_id": r.task_id, "passed": r.passed, "report": r.report, "next_step": r.next_step})
                }
                Err(_) => json!({"text": text}),
            };
            journal.write("reflector", "reflection", data);
        }
        Role::Evaluator => {
            if let Ok((score, reason)) = agent::prompts::parse_evaluation(text) {
                journal.write(
                    "evaluator",
                    "evaluation",
                    json!({"score": score, "reason": reason}),
                );
            }
        }
        _ => {}
    }
}

/// Writes a run's figures, approvals, evaluations and checkpoints to the workspace's store
/// as they happen. A store that cannot be opened or written costs the figures, never the run.
struct Recorder {
    store: Option<Store>,
    run_id: String,
    current: Iteration,
}

impl Recorder {
    fn open(enabled: bool, root: &Path, run_id: &str, run: &Run) -> Recorder {
        let store = if enabled {
            match Store::open(root) {
                Ok((store, notice)) => {
                    if let Some(n) = notice {
                        tracing::warn!("{n}");
                    }
                    Some(store)
                }
                Err(e) => {
                    tracing::warn!("the run's figures will not be kept: {e}");
                    None
                }
            }
        } else {
            None
        };
        let mut r = Recorder {
            store,
            run_id: run_id.into(),
            current: Iteration {
                n: run.iterations,
                ..Iteration::default()
            },
        };
        let intent = run
            .intent
            .and_then(|i| serde_json::to_value(i).ok())
            .and_then(|v| v.as_str().map(String::from));
        r.with(|s, id| s.run_started(id, &run.goal, intent.as_deref()));
        r
    }

    fn with(&mut self, f: impl FnOnce(&Store, &str) -> Result<(), crate::store::StoreError>) {
        if let Some(store) = &self.store
            && let Err(e) = f(store, &self.run_id)
        {
            tracing::warn!("the run's figures stopped being kept: {e}");
            self.store = None;
        }
    }

    /// Before a coder call: the state to resume from, and a new iteration's row.
    fn checkpoint(&mut self, run: &Run) {
        if run.iterations != self.current.n {
            self.flush();
            self.current = Iteration {
                n: run.iterations,
                ..Iteration::default()
            };
        }
        match serde_json::to_string(run) {
            Ok(state) => self.with(|s, id| s.checkpoint(id, run.iterations, &state)),
            Err(e) => tracing::warn!("no checkpoint: {e}"),
        }
    }

    fn model_call(&mut self, role: Role, r: &crate::model::Response) {
        self.current.tokens += r.usage.input_tokens + r.usage.output_tokens;
        self.current.model_ms += r.duration_ms;
        if role == Role::Coder || self.current.model.is_none() {
            self.current.model = Some(format!("{}/{}", r.provider, r.model));
        }
        match role {
            Role::Reflector => {
                self.current.reflection = Some(r.text.chars().take(4000).collect());
            }
            Role::Evaluator => {
                if let Ok((score, reason)) = agent::prompts::parse_evaluation(&r.text) {
                    self.with(|s, id| s.evaluation(id, score, &reason));
                }
            }
            _ => {}
        }
        self.flush();
    }

    fn approval(&mut self, iteration: u32, accepted: bool, changes: &[FileChange]) {
        let files: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        self.with(|s, id| s.approval(id, iteration, accepted, &files));
    }

    fn test_time(&mut self, took: std::time::Duration) {
        self.current.test_ms += took.as_millis() as u64;
    }

    fn tests(&mut self, t: &TestSummary) {
        self.current.tests_passed = Some(t.passed_count);
        self.current.tests_failed = Some(t.failed_count);
        self.current.fingerprint = (!t.passed).then(|| t.fingerprint.clone());
        self.flush();
    }

    fn phase(&mut self, run: &Run) {
        let phase = format!("{:?}", run.phase).to_lowercase();
        // A step that starts the next iteration belongs to it, recorded at its checkpoint.
        if run.iterations == self.current.n && phase != self.current.phase {
            self.current.phase = phase;
            self.flush();
        }
    }

    fn flush(&mut self) {
        let it = self.current.clone();
        self.with(|s, id| s.iteration(id, &it));
    }

    fn finished(&mut self, status: &str, run: &Run, answer: &str) {
        self.flush();
        let tests = run.tests.as_ref().map(|t| (t.passed_count, t.failed_count));
        self.with(|s, id| s.run_finished(id, status, run.iterations, tests, answer));
    }
}

/// A test run as the loop sees it; the fingerprint is the sorted set of failing tests and
/// places, so the same failures compare equal across runs.
pub fn summary(r: &tests_run::RunResult) -> TestSummary {
    let mut keys: Vec<String> = r
        .failures
        .iter()
        .map(|f| {
            format!(
                "{}@{}",
                f.test_id,
                f.location
                    .as_ref()
                    .map(|l| format!("{}:{}", l.file, l.line))
                    .unwrap_or_default()
            )
        })
        .collect();
    keys.sort();
    let failed = r.failed.unwrap_or(r.failures.len() as u32);
    TestSummary {
        passed: r.passed_all(),
        passed_count: r.passed.unwrap_or(0),
        failed_count: if r.passed_all() { 0 } else { failed.max(1) },
        report: r.report.clone(),
        fingerprint: if keys.is_empty() {
            r.report.clone()
        } else {
            keys.join("\n")
        },
    }
}

/// Text files of the project as git would see them (skipping build output, dependencies and
/// hidden folders), smallest paths first, at most `limit`.
pub fn workspace_files(root: &Path, limit: usize) -> Vec<String> {
    const SKIP: &[&str] = &[
        "target",
        "node_modules",
        "__pycache__",
        "dist",
        "build",
        "venv",
    ];
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || SKIP.contains(&name.as_str()) {
                continue;
            }
            let path = e.path();
            if path.is_dir() {
                stack.push(path);
            } else if e.metadata().is_ok_and(|m| m.len() < 100_000)
                && let Ok(rel) = path.strip_prefix(root)
            {
                out.push(rel.to_string_lossy().into_owned());
                if out.len() >= limit {
                    return out;
                }
            }
        }
    }
    out
}
