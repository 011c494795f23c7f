//! Performs the agent's effects and feeds the results back into `agent::step`. Shared by the
//! headless `agent-ls run` and the server (and any other surface): only the `Shell` (how
//! approval, applying, tests and progress reach the user) differs, so the loops cannot drift
//! apart. Each effect is performed by one method that returns the event it produced; the
//! journal and the store watch the run from one `Observer`.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::journal::Journal;
use crate::model::{Message, ModelError, Models, OnToken, Request, Role, Totals};
use crate::store::{Iteration, Store, StoreThread};
use crate::tests_run::{self, RunEnd, RunError, RunResult};
use crate::trust::Review;
use agent_ls_core::agent::{self, Budget, Effect, Event, FailureKind, Run, RunStatus, TestSummary};
use agent_ls_core::edit::{self, FileChange, FileText};
use serde_json::json;

/// How the loop reaches the user and the files.
#[allow(async_fn_in_trait)]
pub trait Shell {
    /// The current text of a workspace file (the editor's buffer when it has one).
    fn read(&self, relative: &str) -> FileText;
    /// Shows the change, with what the review found (protected files, risky constructs),
    /// and answers whether to apply it. A protected file needs the user's confirmation of that
    /// file by name, whatever the approval mode; a change it may not make is `Refused`, and
    /// the model hears why.
    async fn approve(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> Verdict;
    /// Applies an approved change. A file that changed since the change was computed gets the
    /// change re-located onto its new text (`edit::rebase`); where that is impossible the
    /// answer is `Stale`, and the step is redone.
    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError>;
    /// Runs the workspace's tests (the server's through its one owner of test runs), or
    /// `command` in their place under the same policy (a tool's narrowed run or allowlisted
    /// command, whose result is the model's, not the editor's diagnostics).
    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError>;
    /// The editor's open buffers, for the tools that read off the loop's task.
    fn buffers(&self) -> Vec<(String, FileText)> {
        Vec::new()
    }
    fn progress(&mut self, message: &str);
    fn warn(&mut self, message: &str);
    /// Called before each step, so `read` sees the latest text (the server takes a fresh
    /// snapshot of the editor's buffers here).
    async fn refresh(&mut self) {}
    /// The plan's task the next change works on ("T1 fix the failing tests") and the
    /// iteration it is made in, for the history and the run view.
    fn task(&mut self, _task: &str, _iteration: u32) {}
}

/// What became of a proposed change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    Rejected,
    /// Not applied, for this reason, which the model hears (a protected file nobody allowed).
    Refused(String),
}

/// The review of a change before approval: the protected files it writes (their execute
/// bits read from disk) and the risky constructs it introduces.
pub fn review(root: &Path, changes: &[FileChange]) -> Review {
    Review {
        protected: crate::files::protected_in(root, changes)
            .into_iter()
            .map(|(p, why)| (p, why.to_string()))
            .collect(),
        findings: changes
            .iter()
            .flat_map(|c| {
                crate::trust::scan::introduced(&c.path, c.original.as_deref(), &c.new_text)
            })
            .collect(),
    }
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
    pub status: RunStatus,
    pub answer: String,
    pub iterations: u32,
    pub files_changed: Vec<String>,
    pub tests: TestCounts,
    pub tokens: u64,
    pub duration_ms: u64,
    pub cost_usd: Option<f64>,
    /// Why a failed run failed, when the cause has a kind of its own.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure_kind: Option<FailureKind>,
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
    /// Record the run: its journal in `.agent-ls/runs/` and its figures in the store.
    pub record: Option<&'a StoreThread>,
    /// Receives the run's events as they happen (the editor's run view).
    pub events: Option<OnEvent<'a>>,
}

/// One thing that happened in a run, as a live view shows it: a line of the run's journal
/// (the same role, type and data; see docs/replay.md) with the iteration it belongs to, or
/// a piece of the model's answer as it streams (`type` "token").
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    pub run_id: String,
    pub iteration: u32,
    pub role: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: serde_json::Value,
}

pub type OnEvent<'a> = &'a (dyn Fn(RunEvent) + Send + Sync);

pub fn new_run_id() -> String {
    format!("run_{:08x}", fastrand::u32(..))
}

/// A new run of `goal` under the configuration's budgets, by the configuration's default
/// agent: the one way every surface builds one.
pub fn new_run(config: &Config, goal: &str) -> Run {
    let mut run = Run::new(
        goal,
        agent::classify(goal),
        Budget {
            max_retries: config.agent.max_retries,
            max_iterations: config.agent.max_iterations,
            max_tool_steps: config.agent.max_tool_steps,
            summarize_after: config.context.summarize_after,
            max_corrections: config.agent.max_corrections,
        },
        String::new(),
    );
    run.evaluation = config.agent.evaluate;
    if let Ok(chosen) = choose_agent(config, &config.agent.default_agent) {
        chosen.apply(&mut run);
    }
    run
}

/// A named agent as a run uses it: its profile, and what it overrides of the configuration.
#[derive(Debug, Clone)]
pub struct ChosenAgent {
    pub profile: agent::AgentProfile,
    pub approval: Option<crate::config::Approval>,
    pub max_tool_steps: Option<u32>,
}

impl ChosenAgent {
    pub fn apply(&self, run: &mut Run) {
        run.agent = self.profile.clone();
        if let Some(n) = self.max_tool_steps {
            run.budget.max_tool_steps = n;
        }
    }
}

/// Finds an agent by name: a built-in one, or a custom one of `[agents]` with its prompt file
/// read now. An unknown name, or a prompt file that cannot be read, is an error for the user.
pub fn choose_agent(config: &Config, name: &str) -> Result<ChosenAgent, String> {
    if let Some(custom) = config.agents.get(name) {
        let prompt = match &custom.prompt {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "agent `{name}`: its prompt {} cannot be read: {e}",
                    path.display()
                )
            })?,
            None => return Err(format!("agent `{name}` has no `prompt` file")),
        };
        return Ok(ChosenAgent {
            profile: agent::AgentProfile::custom(name, &custom.tools, prompt)?,
            approval: custom.approval,
            max_tool_steps: custom.max_tool_steps,
        });
    }
    match agent::AgentProfile::built_in(name) {
        Some(profile) => Ok(ChosenAgent {
            profile,
            approval: None,
            max_tool_steps: None,
        }),
        None => {
            let mut names: Vec<String> = agent::agents::BUILT_IN
                .iter()
                .map(|s| s.to_string())
                .collect();
            names.extend(config.agents.keys().cloned());
            Err(format!(
                "there is no agent `{name}`; the agents are {}",
                names.join(", ")
            ))
        }
    }
}

/// Where an interrupted run goes on from: its goal and last checkpoint (`None` when it was
/// interrupted before its first coder call, and starts over). `active` is the run this
/// process is running now, which is not interrupted. The one check every surface makes.
pub fn resume_point(
    store: &Store,
    run_id: &str,
    active: Option<&str>,
) -> Result<(String, Option<Run>), String> {
    let (goal, checkpoint, status) = store
        .resume_point(run_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no run {run_id} in this workspace"))?;
    if status != RunStatus::Running {
        return Err(format!("run {run_id} already ended ({})", status.as_str()));
    }
    let interrupted = store.interrupted_runs(active).map_err(|e| e.to_string())?;
    if !interrupted.iter().any(|r| r.run_id == run_id) {
        return Err(format!(
            "run {run_id} is still going in another agent-ls process"
        ));
    }
    let run = match checkpoint {
        Some(json) => Some(
            serde_json::from_str::<Run>(&json)
                .map_err(|e| format!("the checkpoint of {run_id} cannot be read: {e}"))?,
        ),
        None => None,
    };
    Ok((goal, run))
}

/// What a performed effect produced.
enum Next {
    Event(Event),
    /// Nothing to feed back (progress, a warning).
    Continue,
    Finish(agent::Phase, String),
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
        let mut observer =
            Observer::open(self.record, self.events, self.root, &run_id, run, resumed);
        let (prompts, used, problems) = crate::config::load_prompts(&self.config.prompt_dirs);
        run.prompts = prompts;
        for p in problems {
            shell.warn(&p);
        }
        let counter = self.counter();
        observer.journal.write(
            "agent",
            "context",
            json!({"agent": run.agent.name, "prompt_files": used, "tokenizer": counter.name(),
                   "context_tokens": self.config.model.context_tokens, "map_tokens": self.config.context.map_tokens}),
        );
        // The run's MCP servers, started now and ended with the run.
        let (mcp, warnings) = crate::mcp_client::McpTools::connect(
            &self.config.mcp.servers,
            self.root,
            Duration::from_secs(self.config.mcp.call_timeout_secs.max(1)),
        )
        .await;
        for w in warnings {
            shell.warn(&w);
        }
        let mut last_tests: Option<RunResult> = None;
        // The tools the last model call was offered: the only ones its calls may use.
        let mut offered: Vec<String> = Vec::new();
        self.refresh_context(run, None, shell);
        let mut queue: std::collections::VecDeque<Effect> = if resumed {
            agent::resume(run)
        } else {
            agent::step(run, Event::Start)
        }
        .into();
        shell.refresh().await;
        let mut finished = None;
        while let Some(effect) = queue.pop_front() {
            // A cancel between effects ends the run before anything else is done.
            if self.cancel.is_cancelled() && !matches!(effect, Effect::Finish { .. }) {
                queue.clear();
                queue.extend(agent::step(run, Event::Cancel));
                continue;
            }
            let next = match effect {
                Effect::Finish { status, answer } => Next::Finish(status, answer),
                Effect::Progress(m) => {
                    let step = format!(
                        "{m} (iteration {} of {})",
                        run.iterations.max(1),
                        run.budget.max_iterations
                    );
                    shell.progress(&step);
                    Next::Continue
                }
                Effect::Warn(m) => {
                    shell.warn(&m);
                    Next::Continue
                }
                Effect::CallModel {
                    role,
                    messages,
                    tools,
                } => Next::Event({
                    let mcp_specs = mcp.specs(&tools);
                    offered = tools.clone();
                    offered.extend(mcp_specs.iter().map(|s| s.name.clone()));
                    self.call_model(
                        run,
                        (role, messages, tools, mcp_specs),
                        &mut observer,
                        &mut totals,
                        &mut failure_kind,
                    )
                    .await
                }),
                Effect::RunTools(calls) => Next::Event(
                    self.run_tools(
                        calls,
                        shell,
                        &mut observer,
                        (&offered, &mcp),
                        &mut last_tests,
                    )
                    .await,
                ),
                Effect::Locate(plan) => Next::Event(self.locate(&plan, shell).await),
                Effect::AskApproval { changes, diff } => Next::Event(
                    self.approve(run, &changes, &diff, shell, &mut observer)
                        .await,
                ),
                Effect::Apply(changes) => Next::Event(self.apply(run, &changes, shell).await),
                Effect::RunTests => {
                    let baseline = run.phase == agent::Phase::Baseline;
                    Next::Event(
                        self.run_tests(
                            shell,
                            &mut observer,
                            &mut failure_kind,
                            baseline,
                            &mut last_tests,
                        )
                        .await,
                    )
                }
            };
            let event = match next {
                Next::Finish(status, answer) => {
                    finished = Some((status, answer));
                    break;
                }
                Next::Continue => continue,
                Next::Event(e) => e,
            };
            shell.refresh().await;
            // A test result is not the run's until `step` takes it, but the prompt that step
            // builds must already show the files it names (the failing test above all).
            let latest = match &event {
                Event::TestsFinished(t) => Some(t.report.clone()),
                _ => None,
            };
            self.refresh_context(run, latest.as_deref(), shell);
            queue.extend(agent::step(run, event));
            observer.phase(run);
        }
        let (phase, answer) = finished.unwrap_or((
            agent::Phase::Failed,
            "the run ended without an answer".into(),
        ));
        mcp.shutdown().await;
        let status = RunStatus::from_phase(phase);
        if run.partial {
            failure_kind = Some(FailureKind::Partial);
        }
        observer.finished(status, run, &answer);
        let tests = run
            .tests
            .as_ref()
            .map_or(TestCounts::default(), |t| TestCounts {
                passed: t.passed_count,
                failed: t.failed_count,
            });
        Outcome {
            run_id,
            status,
            answer,
            iterations: run.iterations,
            files_changed: run.files_changed.clone(),
            tests,
            tokens: totals.usage.input_tokens + totals.usage.output_tokens,
            duration_ms: started.elapsed().as_millis() as u64,
            cost_usd: totals.cost_usd,
            failure_kind: if status == RunStatus::Failed {
                failure_kind
            } else {
                None
            },
        }
    }

    async fn call_model(
        &self,
        run: &Run,
        (role, messages, tools, mcp_specs): (
            Role,
            Vec<Message>,
            Vec<String>,
            Vec<crate::model::ToolSpec>,
        ),
        observer: &mut Observer<'_>,
        totals: &mut Totals,
        failure_kind: &mut Option<FailureKind>,
    ) -> Event {
        if role == Role::Coder {
            observer.checkpoint(run).await;
        }
        // Level 3 of the context budget: the conversation fits the model's window, with room
        // for the answer.
        let counter = self.counter();
        let window = self
            .config
            .model
            .context_tokens
            .saturating_sub(self.config.model.max_tokens as usize);
        let fitted = agent::window::fit(messages, window, |t| counter.count(t));
        if fitted.dropped > 0 {
            observer.write(
                role.as_str(),
                "context_cut",
                json!({"dropped_messages": fitted.dropped, "tokens": fitted.tokens, "window": window, "tokenizer": counter.name()}),
            );
        }
        let offered = !tools.is_empty() || !mcp_specs.is_empty();
        // A turn's first call may be made to read first (agent.first_tool).
        let first = &self.config.agent.first_tool;
        let tool_choice = (role == Role::Coder
            && run.tool_steps == 0
            && !first.is_empty()
            && tools.contains(first))
        .then(|| first.clone());
        let request = Request {
            messages: fitted.messages,
            tools: {
                let mut specs = crate::tools::specs_named(&tools);
                specs.extend(mcp_specs);
                specs
            },
            tool_choice,
            ..Request::default()
        };
        observer.prompt(role, &request, fitted.tokens, counter.name());
        // Streamed text goes to the terminal (`agent-ls run`) and to the live view.
        let (run_id, iteration) = (observer.run_id.clone(), observer.current.n);
        let stream = |text: &str| {
            if let Some(f) = self.on_token {
                f(text);
            }
            if let Some(events) = self.events {
                events(RunEvent {
                    run_id: run_id.clone(),
                    iteration,
                    role: role.as_str().to_string(),
                    kind: "token".into(),
                    data: json!({"text": text}),
                });
            }
        };
        let on_token: Option<OnToken<'_>> =
            (self.on_token.is_some() || self.events.is_some()).then_some(&stream);
        match self
            .models
            .call(role, &request, self.cancel, on_token)
            .await
        {
            Ok(r) => {
                totals.add(&r);
                observer.model_answered(role, &r, totals);
                if offered && !r.tool_calls.is_empty() {
                    return Event::ToolCalls {
                        text: r.text,
                        calls: r.tool_calls,
                    };
                }
                Event::ModelAnswered { role, text: r.text }
            }
            Err(ModelError::Cancelled) => Event::Cancel,
            Err(e) => {
                *failure_kind = match &e {
                    ModelError::Auth { .. } => Some(FailureKind::Auth),
                    ModelError::NotConfigured(_) => Some(FailureKind::Config),
                    ModelError::Timeout { .. } => Some(FailureKind::Timeout),
                    _ => None,
                };
                Event::ModelFailed {
                    role,
                    error: e.to_string(),
                }
            }
        }
    }

    /// The token counter of the coder's model: tiktoken where the model is OpenAI's, else
    /// bytes / 4.
    fn counter(&self) -> crate::tokens::Counter {
        let name = self
            .config
            .roles
            .coder
            .name
            .as_deref()
            .or(self.config.model.name.as_deref())
            .unwrap_or("");
        crate::tokens::Counter::for_model(name)
    }

    /// Runs a round of tool calls. The reading tools run at the same time, each on a blocking
    /// thread over a snapshot of the workspace (the editor's buffers first) and within
    /// `agent.tool_timeout_secs`; the running tools go through the shell's test policy one
    /// after the other. The results come back in call order, and each call and result goes
    /// to the journal. A tool the agent was not given, or that fails, is answered as such.
    async fn run_tools(
        &self,
        calls: Vec<crate::model::ToolCall>,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
        (allowed, mcp): (&[String], &crate::mcp_client::McpTools),
        last_tests: &mut Option<RunResult>,
    ) -> Event {
        use crate::tools::{Limits, Output};
        let limits = Limits {
            result_bytes: self.config.agent.tool_result_bytes,
            ..Limits::default()
        };
        let snapshot = std::sync::Arc::new(crate::tools::Snapshot {
            root: self.root.to_path_buf(),
            buffers: shell.buffers().into_iter().collect(),
            diagnostics: diagnostics_of(last_tests.as_ref()),
        });
        let timeout = Duration::from_secs(self.config.agent.tool_timeout_secs.max(1));
        let reads: Vec<_> = calls
            .iter()
            .map(|call| {
                let reading = agent_ls_core::agent::agents::READ_TOOLS.contains(&call.name.as_str())
                    && allowed.contains(&call.name);
                reading.then(|| {
                    let (call, snapshot) = (call.clone(), snapshot.clone());
                    let started = Instant::now();
                    let job = tokio::task::spawn_blocking(move || {
                        crate::tools::run(&call, &*snapshot, &limits)
                    });
                    async move {
                        let out = match tokio::time::timeout(timeout, job).await {
                            Ok(Ok(out)) => out,
                            Ok(Err(e)) => Output::error(format!("the tool failed: {e}")),
                            // The thread finishes on its own; its late result is dropped.
                            Err(_) => Output::error(format!(
                                "the tool did not finish within {} s (agent.tool_timeout_secs); narrow it",
                                timeout.as_secs()
                            )),
                        };
                        (out, started.elapsed())
                    }
                })
            })
            .collect();
        let pending: Vec<usize> = reads
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.is_some().then_some(i))
            .collect();
        let outputs = futures::future::join_all(reads.into_iter().flatten()).await;
        let mut by_index: std::collections::HashMap<usize, (Output, std::time::Duration)> =
            pending.into_iter().zip(outputs).collect();
        let mut results = Vec::with_capacity(calls.len());
        for (i, call) in calls.into_iter().enumerate() {
            let (out, took) = match by_index.remove(&i) {
                Some(r) => r,
                None => {
                    let started = Instant::now();
                    let out = self
                        .run_tool(&call, shell, (allowed, mcp), &limits, last_tests)
                        .await;
                    (out, started.elapsed())
                }
            };
            observer.tool(&call, &out, took);
            results.push((call, out.text));
        }
        Event::ToolResults(results)
    }

    /// A tool that is not a reading one: the tests or an allowlisted command, through the
    /// shell; anything else is answered as not offered.
    async fn run_tool(
        &self,
        call: &crate::model::ToolCall,
        shell: &mut impl Shell,
        (allowed, mcp): (&[String], &crate::mcp_client::McpTools),
        limits: &crate::tools::Limits,
        last_tests: &mut Option<RunResult>,
    ) -> crate::tools::Output {
        use crate::tools::Output;
        if !allowed.contains(&call.name) {
            return Output::error(format!(
                "the tool `{}` is not offered to this agent; its tools are {}",
                call.name,
                allowed.join(", ")
            ));
        }
        if call.name.starts_with(crate::mcp_client::PREFIX) {
            return match mcp.call(&call.name, &call.arguments, self.root).await {
                Ok(text) => Output::ok(crate::tools::cap(&text, limits.result_bytes)),
                Err(e) => {
                    let why = e.to_string();
                    if e.withdraws_tools() {
                        shell.warn(&why);
                    }
                    Output::error(crate::tools::cap(&why, limits.result_bytes))
                }
            };
        }
        let command = match call.name.as_str() {
            "run_tests" => match call.arguments.get("filter").and_then(|f| f.as_str()) {
                Some(filter) if !filter.trim().is_empty() => {
                    match tests_run::narrowed(self.root, &self.config.test, filter.trim()) {
                        Ok(argv) => Some(argv),
                        Err(e) => return Output::error(e.to_string()),
                    }
                }
                _ => None,
            },
            "run_command" => {
                let argv: Option<Vec<String>> = call
                    .arguments
                    .get("argv")
                    .and_then(|a| a.as_array())
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| x.as_str().map(String::from))
                            .collect()
                    });
                match argv {
                    Some(a) if !a.is_empty() => Some(a),
                    _ => return Output::error("`argv` must be a non-empty list of strings"),
                }
            }
            other => {
                return Output::error(format!(
                    "`{other}` cannot be called here (an editing tool is a proposal: call it alone, or answer with edits)"
                ));
            }
        };
        let whole = command.is_none() && call.name == "run_tests";
        match shell.run_tests(self.cancel, command).await {
            Ok(r) => {
                let text = r.summary();
                // A whole run is what the server knows now; a narrowed one says less.
                if whole {
                    *last_tests = Some(r);
                }
                Output::ok(crate::tools::cap(&text, limits.result_bytes))
            }
            Err(e) => Output::error(e.to_string()),
        }
    }

    async fn locate(&self, plan: &edit::EditPlan, shell: &mut impl Shell) -> Event {
        shell.refresh().await;
        let limits = self.config.edit.limits();
        Event::Located(edit::apply_plan(plan, self.root, &limits, |rel| {
            shell.read(rel)
        }))
    }

    async fn approve(
        &self,
        run: &Run,
        changes: &[FileChange],
        diff: &str,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) -> Event {
        if self.cancel.is_cancelled() {
            return Event::Cancel;
        }
        let review = review(self.root, changes);
        observer.patch(changes, diff, &review);
        let verdict = shell.approve(changes, diff, &review).await;
        observer.approval(run.iterations, verdict == Verdict::Approved, changes);
        if self.cancel.is_cancelled() {
            return Event::Cancel;
        }
        match verdict {
            Verdict::Approved => Event::Approved,
            Verdict::Rejected => Event::Rejected,
            Verdict::Refused(why) => Event::Refused(why),
        }
    }

    async fn apply(&self, run: &Run, changes: &[FileChange], shell: &mut impl Shell) -> Event {
        let task = run
            .tasks
            .get(run.task)
            .map(|t| format!("{} {}", t.id, t.title))
            .unwrap_or_default();
        shell.task(&task, run.iterations);
        match shell.apply(changes).await {
            Ok(()) => Event::Applied,
            Err(ApplyError::Stale(e)) => Event::Stale(e),
            Err(ApplyError::Failed(e)) => Event::ApplyFailed(e),
        }
    }

    async fn run_tests(
        &self,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
        failure_kind: &mut Option<FailureKind>,
        baseline: bool,
        last_tests: &mut Option<RunResult>,
    ) -> Event {
        let started = Instant::now();
        let result = shell.run_tests(self.cancel, None).await;
        if let Ok(r) = &result {
            *last_tests = Some(r.clone());
        }
        observer.test_time(started.elapsed());
        match result {
            Ok(r) if r.end == RunEnd::Cancelled => Event::Cancel,
            Err(RunError::Superseded) => Event::Cancel,
            Ok(r) => {
                if r.end == RunEnd::TimedOut {
                    *failure_kind = Some(FailureKind::Timeout);
                }
                let summary = summary(&r);
                observer.tests(&r, &summary);
                match &r.environment {
                    // Before any change, a command that cannot run the tests is the setup's
                    // problem: the run stops before a model call is spent on good code.
                    // After a change, its output goes to the model like any failure (the
                    // change may be what broke the import).
                    Some(why) if baseline => {
                        *failure_kind = Some(FailureKind::Config);
                        Event::TestsUnavailable(why.clone())
                    }
                    _ => Event::TestsFinished(summary),
                }
            }
            Err(e) => {
                if baseline && !matches!(e, RunError::Superseded) {
                    *failure_kind = Some(FailureKind::Config);
                }
                Event::TestsUnavailable(e.to_string())
            }
        }
    }
    /// The coder sees the files that matter now: those the goal names, those the failures
    /// point at (of `latest`, the test report about to be recorded, else the run's last),
    /// then the rest of the project's small text files, within the byte budget.
    fn refresh_context(&self, run: &mut Run, latest: Option<&str>, shell: &impl Shell) {
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
        if let Some(report) = latest.or(run.tests.as_ref().map(|t| t.report.as_str())) {
            for line in report.lines() {
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
        // The repo map, ranked toward the files above and the names the goal and the failure
        // mention; then the best-ranked files in full while the budget lasts, then the rest.
        let buffers: std::collections::HashMap<String, String> = shell
            .buffers()
            .into_iter()
            .filter_map(|(p, t)| match t {
                FileText::Text(t) => Some((p, t)),
                _ => None,
            })
            .collect();
        let map = crate::repomap::build(self.root, &buffers);
        let mut mentioned = run.goal.clone();
        if let Some(report) = latest.or(run.tests.as_ref().map(|t| t.report.as_str())) {
            mentioned.push('\n');
            mentioned.push_str(report);
        }
        let focus = crate::repomap::Focus {
            files: wanted.clone(),
            idents: crate::repomap::idents_of(&mentioned),
        };
        let map_text = map.render(&focus, self.config.context.map_tokens, &self.counter());
        let named = wanted.len();
        for path in map
            .ranked_files(&focus)
            .into_iter()
            .chain(workspace_files(self.root, 200))
        {
            if !wanted.contains(&path) {
                wanted.push(path);
            }
        }
        let mut context = String::new();
        // The review agent reviews the latest agent change when there is one: its diff leads.
        if run.agent.kind == agent::AgentKind::Review
            && let Some(diff) = latest_step_diff(self.root)
        {
            context.push_str(&diff);
        }
        let mut listed = Vec::new();
        // The map has its own budget (context.map_tokens): the files' bytes are counted apart.
        let map_block = format!(
            "Repo map (the definitions that matter most, as path:line: signature):\n{map_text}\n"
        );
        let mut map_len = 0;
        let budget = self.config.agent.context_bytes;
        for (i, path) in wanted.iter().enumerate() {
            if i == named && !map_text.is_empty() {
                context.push_str(&map_block);
                map_len = map_block.len();
            }
            let budget = budget + map_len;
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
        if wanted.len() == named && !map_text.is_empty() {
            context.push_str(&map_block);
        }
        if !listed.is_empty() {
            listed.truncate(100);
            context.push_str(&format!("Other files (not shown): {}\n", listed.join(", ")));
        }
        run.context = context;
    }
}

/// How long a coder call waits for its checkpoint to be written (a healthy store takes
/// milliseconds; a store locked by another process would take its whole busy timeout).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(2);

/// Watches a run for the record: its journal (`.agent-ls/runs/`) and its figures, approvals,
/// evaluations and checkpoints in the store, written on the store's own thread. A record that
/// cannot be written costs the record, never the run.
struct Observer<'a> {
    journal: Journal,
    store: Option<StoreThread>,
    run_id: String,
    current: Iteration,
    events: Option<OnEvent<'a>>,
}

impl<'a> Observer<'a> {
    fn open(
        record: Option<&StoreThread>,
        events: Option<OnEvent<'a>>,
        root: &Path,
        run_id: &str,
        run: &Run,
        resumed: bool,
    ) -> Observer<'a> {
        let journal = match (record.is_some(), resumed) {
            (true, true) => Journal::append(root, run_id),
            (true, false) => Journal::create(root, run_id),
            (false, _) => Journal::disabled(run_id),
        };
        let mut o = Observer {
            journal,
            store: record.cloned(),
            run_id: run_id.into(),
            current: Iteration {
                n: run.iterations,
                ..Iteration::default()
            },
            events,
        };
        o.write(
            "agent",
            if resumed { "resumed" } else { "intent" },
            json!({"goal": run.goal, "intent": run.intent, "iterations": run.iterations}),
        );
        let intent = run
            .intent
            .and_then(|i| serde_json::to_value(i).ok())
            .and_then(|v| v.as_str().map(String::from));
        let goal = run.goal.clone();
        o.store("the run's start", move |s, id| {
            s.run_started(id, &goal, intent.as_deref())
        });
        o
    }

    /// A line of the journal, which the live view also gets.
    fn write(&mut self, role: &str, kind: &str, data: serde_json::Value) {
        self.emit(role, kind, data.clone());
        self.journal.write(role, kind, data);
    }

    fn emit(&self, role: &str, kind: &str, data: serde_json::Value) {
        if let Some(events) = self.events {
            events(RunEvent {
                run_id: self.run_id.clone(),
                iteration: self.current.n,
                role: role.to_string(),
                kind: kind.to_string(),
                data,
            });
        }
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
    async fn checkpoint(&mut self, run: &Run) {
        if run.iterations != self.current.n {
            self.flush();
            self.current = Iteration {
                n: run.iterations,
                ..Iteration::default()
            };
            let task = run
                .tasks
                .get(run.task)
                .map(|t| format!("{} {}", t.id, t.title));
            self.emit(
                "agent",
                "iteration",
                json!({"n": run.iterations, "task": task}),
            );
        }
        match serde_json::to_string(run) {
            Ok(state) => {
                let n = run.iterations;
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
    fn model_answered(&mut self, role: Role, r: &crate::model::Response, totals: &Totals) {
        self.journal.model_call(role, r);
        self.emit(
            role.as_str(),
            "model_call",
            json!({"provider": r.provider, "model": r.model, "usage": r.usage, "duration_ms": r.duration_ms,
                   "tokens_total": totals.usage.input_tokens + totals.usage.output_tokens, "cost_usd_total": totals.cost_usd}),
        );
        match role {
            Role::Planner => {
                if let Ok(tasks) = agent::prompts::parse_plan(&r.text) {
                    self.write("planner", "plan", json!({"tasks": tasks}));
                }
            }
            Role::Reflector => {
                let data = match agent::prompts::parse_reflection(&r.text) {
                    Ok(x) => {
                        json!({"task_id": x.task_id, "passed": x.passed, "report": x.report, "next_step": x.next_step})
                    }
                    Err(_) => json!({"text": r.text}),
                };
                self.write("reflector", "reflection", data);
                self.current.reflection = Some(r.text.chars().take(4000).collect());
            }
            Role::Evaluator => {
                if let Ok((score, reason, complete)) = agent::prompts::parse_evaluation(&r.text) {
                    self.write(
                        "evaluator",
                        "evaluation",
                        json!({"score": score, "reason": reason, "complete": complete}),
                    );
                    self.store("an evaluation", move |s, id| {
                        s.evaluation(id, score, &reason)
                    });
                }
            }
            _ => {}
        }
        self.current.tokens += r.usage.input_tokens + r.usage.output_tokens;
        self.current.model_ms += r.duration_ms;
        if role == Role::Coder || self.current.model.is_none() {
            self.current.model = Some(format!("{}/{}", r.provider, r.model));
        }
        self.flush();
    }

    /// What a model call was sent: its size in bytes and tokens (as `tokenizer` counts), the
    /// figures of the context budget.
    fn prompt(&mut self, role: Role, request: &Request, tokens: usize, tokenizer: &str) {
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
        self.journal.write(
            role.as_str(),
            "prompt",
            json!({"messages": request.messages.len(), "bytes": bytes, "tokens": tokens,
                   "tokenizer": tokenizer, "tools": request.tools.iter().map(|t| &t.name).collect::<Vec<_>>()}),
        );
    }

    fn patch(&mut self, changes: &[FileChange], diff: &str, review: &Review) {
        self.write(
            "agent",
            "patch",
            json!({"files": changes.iter().map(|c| &c.path).collect::<Vec<_>>(), "diff": diff, "review": review}),
        );
    }

    /// A tool call and its result; the journal keeps the result's head, the figures its size.
    fn tool(
        &mut self,
        call: &crate::model::ToolCall,
        out: &crate::tools::Output,
        took: std::time::Duration,
    ) {
        self.write(
            "coder",
            "tool_call",
            json!({"id": call.id, "name": call.name, "arguments": call.arguments}),
        );
        self.write(
            "tools",
            "tool_result",
            json!({"id": call.id, "name": call.name, "is_error": out.is_error, "bytes": out.text.len(),
                   "duration_ms": took.as_millis() as u64, "text": crate::tools::cap(&out.text, 2000)}),
        );
    }

    fn approval(&mut self, iteration: u32, accepted: bool, changes: &[FileChange]) {
        self.write("user", "approval", json!({"accepted": accepted}));
        let files: Vec<String> = changes.iter().map(|c| c.path.clone()).collect();
        self.store("an approval", move |s, id| {
            s.approval(id, iteration, accepted, &files)
        });
    }

    fn test_time(&mut self, took: std::time::Duration) {
        self.current.test_ms += took.as_millis() as u64;
    }

    fn tests(&mut self, r: &RunResult, t: &TestSummary) {
        self.write(
            "tests",
            "test_result",
            json!({"state": r.state(), "passed": r.passed, "failed": r.failed, "failures": r.failures.len(),
                   "duration_ms": r.duration_ms, "command": r.command.argv.join(" "), "environment": r.environment}),
        );
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
        self.store("an iteration", move |s, id| s.iteration(id, &it));
    }

    fn finished(&mut self, status: RunStatus, run: &Run, answer: &str) {
        self.write(
            "agent",
            "finished",
            json!({"status": status, "answer": answer, "iterations": run.iterations, "files_changed": run.files_changed}),
        );
        self.flush();
        let tests = run.tests.as_ref().map(|t| (t.passed_count, t.failed_count));
        let (iterations, answer) = (run.iterations, answer.to_string());
        self.store("the run's end", move |s, id| {
            s.run_finished(id, status, iterations, tests, &answer)
        });
    }
}

/// The latest applied agent step of the workspace as a diff, for the review agent.
fn latest_step_diff(root: &Path) -> Option<String> {
    let (store, _) = Store::open(root).ok()?;
    let history = agent_ls_core::edit::history::History::restore(store.load_steps().ok()?);
    let step = history.last_done()?;
    let diff: String = step.changes.iter().map(edit::file_diff).collect();
    Some(format!(
        "The latest agent change (step {}, goal: {}):\n```diff\n{}```\n\n",
        step.id, step.goal, diff
    ))
}

/// The failures of a test run as `get_diagnostics` reports them: each failure at its place.
pub fn diagnostics_of(r: Option<&RunResult>) -> Vec<crate::tools::Diagnostic> {
    let Some(r) = r else {
        return Vec::new();
    };
    r.failures
        .iter()
        .filter_map(|f| {
            let l = f.location.as_ref()?;
            Some(crate::tools::Diagnostic {
                path: l.file.clone(),
                line: l.line,
                source: f.test_id.clone(),
                message: f.message.clone(),
            })
        })
        .collect()
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
