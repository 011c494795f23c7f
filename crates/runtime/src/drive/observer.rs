//! The run's recorder: every journal line (`.agent-ls/runs/`), and the live event a run view
//! gets for it, goes through the `Observer`, which also keeps the run's figures, approvals,
//! evaluations and checkpoints in the store.

use std::path::Path;
use std::time::Duration;

use crate::journal::Journal;
use crate::model::{Request, Role, Totals};
use crate::store::{Iteration, Store, StoreThread};
use crate::tests_run::RunResult;
use crate::trust::Review;
use agent_ls_core::agent::{self, Run, RunStatus, TestSummary};
use agent_ls_core::edit::FileChange;
use agent_ls_core::events::{self, LiveEvent, RunEvent};

/// Receives a run's events as a live view shows them (`agent_ls_core::events`): the journal's
/// lines with the iteration they belong to, and the model's answer as it streams.
pub type OnEvent<'a> = &'a (dyn Fn(LiveEvent) + Send + Sync);

/// How long a coder call waits for its checkpoint to be written (a healthy store takes
/// milliseconds; a store locked by another process would take its whole busy timeout).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(2);

/// Watches a run for the record: its journal (`.agent-ls/runs/`) and its figures, approvals,
/// evaluations and checkpoints in the store, written on the store's own thread. A record that
/// cannot be written costs the record, never the run.
pub(super) struct Observer<'a> {
    journal: Journal,
    store: Option<StoreThread>,
    run_id: String,
    current: Iteration,
    events: Option<OnEvent<'a>>,
    /// The keys this process knows, redacted from the journal and the store's text.
    secrets: Vec<String>,
}

impl<'a> Observer<'a> {
    pub(super) fn open(
        record: Option<&StoreThread>,
        events: Option<OnEvent<'a>>,
        root: &Path,
        run_id: &str,
        run: &Run,
        resumed: bool,
        secrets: Vec<String>,
    ) -> Observer<'a> {
        let journal = match (record.is_some(), resumed) {
            (true, true) => Journal::append(root, run_id),
            (true, false) => Journal::create(root, run_id),
            (false, _) => Journal::disabled(run_id),
        }
        .redacting(secrets.clone());
        let mut o = Observer {
            journal,
            store: record.cloned(),
            run_id: run_id.into(),
            current: Iteration {
                n: run.iterations(),
                ..Iteration::default()
            },
            events,
            secrets,
        };
        o.record(RunEvent::Started {
            goal: run.goal().to_string(),
            intent: run.intent(),
            iterations: run.iterations(),
            resumed,
        });
        let intent = run
            .intent()
            .and_then(|i| serde_json::to_value(i).ok())
            .and_then(|v| v.as_str().map(String::from));
        let goal = run.goal().to_string();
        o.store("the run's start", move |s, id| {
            s.run_started(id, &goal, intent.as_deref())
        });
        o
    }

    /// The one way an event leaves the run: the journal gets it as a line when it is one
    /// (`RunEvent::journaled`), and the live view gets every event, with the iteration it
    /// belongs to.
    pub(super) fn record(&mut self, event: RunEvent) {
        if event.journaled() {
            self.journal.record(&event);
        }
        self.emit(event);
    }

    /// A piece of a model's answer as it streams: for the live view only.
    /// The run's phase timings, one journal line (`agent-ls stats` reads it).
    pub(super) fn phases(&mut self, phases: &super::map::Phases) {
        self.journal
            .phases(serde_json::to_value(phases).unwrap_or_default());
    }

    pub(super) fn token(&self, role: Role, text: &str) {
        self.emit(RunEvent::Token {
            role,
            text: text.into(),
        });
    }

    fn emit(&self, event: RunEvent) {
        if let Some(events) = self.events {
            events(LiveEvent {
                run_id: self.run_id.clone(),
                iteration: self.current.n,
                event,
            });
        }
    }

    /// The run's git checkpoint, kept with its row in the store.
    pub(super) fn git_checkpoint(&self, commit: &str) {
        let commit = commit.to_string();
        self.store("the git checkpoint", move |s, id| {
            s.git_checkpoint(id, &commit)
        });
    }

    /// What the run left in the files it changed (JSON), kept with its row.
    pub(super) fn git_files(&self, files: String) {
        self.store("the run's files", move |s, id| s.git_files(id, &files));
    }

    /// A review of the run's diff: a journal line, and a row counted by `agent-ls stats`.
    pub(super) fn tester(&mut self, record: &agent_ls_core::agent::tester::Record) {
        self.record(RunEvent::Tester(record.clone()));
    }

    pub(super) fn review(&mut self, result: &agent_ls_core::agent::review::ReviewResult) {
        self.record(RunEvent::Review(result.clone()));
        let result = result.clone();
        self.store("a review", move |s, id| s.review(id, &result));
    }

    fn store(
        &self,
        what: &'static str,
        f: impl FnOnce(&Store, &str) -> Result<(), crate::store::StoreError> + Send + 'static,
    ) {
        if let Some(store) = &self.store {
            let id = self.run_id.clone();
            store.send(what, move |s| f(s, &id));
        }
    }

    /// Before a coder call: the state to resume from, and a new iteration's row. The
    /// checkpoint is written before the call goes out, so a process killed while the model
    /// answers resumes from this iteration and not from the one before. A store that another
    /// process holds locked gets `CHECKPOINT_WAIT`, and then the run goes on without waiting
    /// for the write: a record never stalls a run.
    pub(super) async fn checkpoint(&mut self, run: &Run) {
        if run.iterations() != self.current.n {
            self.flush();
            self.current = Iteration {
                n: run.iterations(),
                ..Iteration::default()
            };
            let task = run.current_task().map(|t| format!("{} {}", t.id, t.title));
            self.record(RunEvent::Iteration {
                n: run.iterations(),
                task,
            });
        }
        // The state holds test output and model text, which may carry a key a test printed.
        let state = serde_json::to_value(run).map(|mut v| {
            crate::memory::redact_value(&mut v, &self.secrets);
            v.to_string()
        });
        match state {
            Ok(state) => {
                let n = run.iterations();
                if let Some(store) = &self.store {
                    let id = self.run_id.clone();
                    let written = store.call(move |s| s.checkpoint(&id, n, &state));
                    match tokio::time::timeout(CHECKPOINT_WAIT, written).await {
                        Ok(Some(Err(e))) => {
                            tracing::warn!("the store could not record a checkpoint: {e}")
                        }
                        Err(_) => tracing::warn!(
                            "the store is slow to record a checkpoint; the run goes on without waiting"
                        ),
                        Ok(_) => {}
                    }
                }
            }
            Err(e) => tracing::warn!("no checkpoint: {e}"),
        }
    }

    /// A model's answer: the journal gets the call and what the loop makes of a planner's,
    /// reflector's or evaluator's answer (plan, reflection, score as data); the store gets
    /// the figures.
    pub(super) fn model_answered(
        &mut self,
        role: Role,
        r: &crate::model::Response,
        totals: &Totals,
    ) {
        self.record(RunEvent::ModelCall(events::ModelCall {
            role,
            provider: r.provider.clone(),
            model: r.model.clone(),
            usage: serde_json::to_value(r.usage).unwrap_or_default(),
            duration_ms: r.duration_ms,
            attempts: r.attempts,
            tokens_total: totals.usage.input_tokens + totals.usage.output_tokens,
            cost_usd_total: totals.cost_usd,
            content: r.text.clone(),
            tool_calls: r.tool_calls.clone(),
            cached: r.cached.map(|c| events::CacheHit {
                hit: c.hit,
                saved_tokens: c.saved.input_tokens + c.saved.output_tokens,
                saved_ms: c.saved_ms,
            }),
        }));
        match role {
            Role::Planner => {
                if let Ok(tasks) = agent::prompts::parse_plan(&r.text) {
                    self.record(RunEvent::Plan { tasks });
                }
            }
            Role::Reflector => {
                let reflection = match agent::prompts::parse_reflection(&r.text) {
                    Ok(x) => events::Reflection::Parsed {
                        task_id: x.task_id,
                        passed: x.passed,
                        report: x.report,
                        next_step: x.next_step,
                    },
                    Err(_) => events::Reflection::Unparsed {
                        text: r.text.clone(),
                    },
                };
                self.record(RunEvent::Reflection(reflection));
                let text: String = r.text.chars().take(4000).collect();
                self.current.reflection = Some(crate::memory::redact(&text, &self.secrets));
            }
            Role::Evaluator => {
                if let Ok((score, reason, complete)) = agent::prompts::parse_evaluation(&r.text) {
                    self.record(RunEvent::Evaluation {
                        score,
                        reason: reason.clone(),
                        complete,
                    });
                    self.store("an evaluation", move |s, id| {
                        s.evaluation(id, score, &reason)
                    });
                }
            }
            _ => {}
        }
        self.current.tokens += r.usage.input_tokens + r.usage.output_tokens;
        self.current.cached_tokens += r.usage.cached_tokens;
        self.current.model_ms += r.duration_ms;
        if role == Role::Coder || self.current.model.is_none() {
            self.current.model = Some(format!("{}/{}", r.provider, r.model));
        }
        self.flush();
    }

    /// What a model call was sent: its size in bytes and tokens (as `tokenizer` counts), the
    /// figures of the context budget.
    pub(super) fn prompt(&mut self, role: Role, request: &Request, tokens: usize, tokenizer: &str) {
        let bytes: usize = request
            .messages
            .iter()
            .map(|m| {
                m.content.len()
                    + m.tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            })
            .sum();
        self.record(RunEvent::Prompt {
            role,
            messages: request.messages.len(),
            bytes,
            tokens,
            tokenizer: tokenizer.into(),
            tools: request.tools.iter().map(|t| t.name.clone()).collect(),
        });
    }

    pub(super) fn patch(&mut self, changes: &[FileChange], diff: &str, review: &Review) {
        self.record(RunEvent::Patch {
            files: changes.iter().map(|c| c.path.clone()).collect(),
            diff: diff.into(),
            review: serde_json::to_value(review).unwrap_or_default(),
        });
    }

    /// A tool call and its result; the journal keeps the result's head, the figures its size.
    pub(super) fn tool(
        &mut self,
        call: &crate::model::ToolCall,
        out: &crate::tools::Output,
        took: std::time::Duration,
    ) {
        self.record(RunEvent::ToolCall(call.clone()));
        self.record(RunEvent::ToolResult {
            id: call.id.clone(),
            name: call.name.clone(),
            is_error: out.is_error,
            bytes: out.text.len(),
            duration_ms: took.as_millis() as u64,
            text: crate::tools::cap(&out.text, 2000),
        });
    }

    pub(super) fn approval(&mut self, iteration: u32, accepted: bool, changes: &[FileChange]) {
        self.record(RunEvent::Approval { accepted });
        let files: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        self.store("an approval", move |s, id| {
            s.approval(id, iteration, accepted, &files)
        });
    }

    pub(super) fn test_time(&mut self, took: std::time::Duration) {
        self.current.test_ms += took.as_millis() as u64;
    }

    pub(super) fn tests(&mut self, r: &RunResult, t: &TestSummary) {
        self.record(RunEvent::TestResult {
            state: r.state(),
            passed: r.passed,
            failed: r.failed,
            failures: r.failures.len(),
            duration_ms: r.duration_ms,
            command: r.command.argv.join(" "),
            environment: r.environment.clone(),
        });
        self.current.tests_passed = Some(t.passed_count);
        self.current.tests_failed = Some(t.failed_count);
        self.current.fingerprint =
            (!t.passed).then(|| crate::memory::redact(&t.fingerprint, &self.secrets));
        self.flush();
    }

    pub(super) fn phase(&mut self, run: &Run) {
        // A step that starts the next iteration belongs to it, recorded at its checkpoint.
        if run.iterations() == self.current.n && self.current.phase != Some(run.phase()) {
            self.current.phase = Some(run.phase());
            self.flush();
        }
    }

    fn flush(&mut self) {
        let it = self.current.clone();
        self.store("an iteration", move |s, id| s.iteration(id, &it));
    }

    pub(super) fn finished(&mut self, status: RunStatus, run: &Run, answer: &str) {
        self.record(RunEvent::Finished {
            status,
            answer: answer.into(),
            iterations: run.iterations(),
            files_changed: run.files_changed().to_vec(),
        });
        self.flush();
        let tests = run.tests().map(|t| (t.passed_count, t.failed_count));
        let (iterations, answer) = (run.iterations(), answer.to_string());
        self.store("the run's end", move |s, id| {
            s.run_finished(id, status, iterations, tests, &answer)
        });
    }
}
