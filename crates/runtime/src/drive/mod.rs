//! Performs the agent's effects and feeds the results back into `agent::step`. Shared by the
//! headless `agent-ls run` and the server (and any other surface): only the `Shell` (how
//! approval, applying, tests and progress reach the user) differs, so the loops cannot drift
//! apart. Each effect is performed by one method that returns the event it produced; what the
//! run reads besides (its prompts, context and memory) is handed in as `Event::Input`, so the
//! driver changes a run only through `agent::step` (or its two halves, `agent::advance`). The
//! journal and the store watch the run from one `Observer` (`observer.rs`); a run is set up by
//! `setup.rs`; what a front end provides is its `Shell` (`shell.rs`), and `Drive` itself is
//! `driver.rs`. None of those files uses this one: it is the top of the driver.

mod checkpoint;
mod checks;
mod dev_dependency;
mod driver;
mod lsp_check;
mod map;
mod observer;
pub mod policy;
mod recall;
mod review_target;
mod setup;
mod shell;
/// Why no more model calls may be made, when the run's spending (`totals`, as `[prices]`
/// counts it) has reached `cap`: the words name the cap, what was spent, and that the work
/// so far stays.
fn over_cap(cap: Option<f64>, totals: &Totals) -> Option<String> {
    let (cap, spent) = (cap?, totals.cost_usd?);
    (spent >= cap).then(|| {
        format!(
            "the run has spent ${spent:.4} on model calls, its cap is ${cap:.4} (agent.max_cost_usd, --max-cost): it stops here and keeps its work"
        )
    })
}

#[cfg(test)]
mod tests;
mod trial;

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::model::{Message, ModelError, OnToken, Request, Role, Totals};
use crate::store::Store;
use crate::tests_run::{self, RunEnd, RunError, RunResult, diagnostics_of, summary};
use agent_ls_core::agent::{self, Effect, Event, FailureKind, Input, Run, RunStatus};
use agent_ls_core::edit::{self, FileChange, FileText};
use agent_ls_core::events::RunEvent;
pub use checkpoint::{RecordedRun, RecordedRunError, recorded_run};
pub use driver::Drive;
use observer::Observer;
pub use observer::OnEvent;
pub use policy::Policy;
pub use review_target::{ReviewDiffError, ReviewTarget, review_diff};
pub use setup::{
    AgentError, ChosenAgent, ResumeError, choose_agent, new_run, new_run_id, recorded_store,
    reproduce_first, resume_point, run_settings, test_command,
};
pub use shell::{ApplyError, ChangeQuestion, Shell, Verdict, rebase, review};

/// How many ranked files in a row may be too big for what is left of the context's budget
/// before the rest are only named.
const MISSES: usize = 16;

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
    /// The git checkpoint taken before the run's first write (a commit id), when there is one:
    /// `agent-ls diff` and `agent-ls rollback` work from it.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub checkpoint: Option<String>,
    /// The commit made of the run's files when it ended (`git.commit`), else null.
    #[serde(default)]
    pub commit: Option<String>,
    /// The branch the run's repository is on (null: no checkpoint, or a detached HEAD).
    #[serde(default)]
    pub branch: Option<String>,
    /// The worktree an isolated run worked in (`git.isolation = "worktree"`), else null.
    #[serde(default)]
    pub worktree: Option<String>,
    /// Why a failed run failed, when the cause has a kind of its own.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub failure_kind: Option<FailureKind>,
    /// The latest review of the run's diff (`agent.review`), when one was made or tried.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub review: Option<agent::review::ReviewResult>,
    /// What the tester did (docs/tester.md): its tests and their runs before and after the
    /// fix, when it was called.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub tester: Option<agent::tester::Record>,
    /// What the user decided about the reviewed change when the editor asked (a review with
    /// findings, a verdict `incorrect`, or none to be had): `kept` or `rolled_back`. Absent
    /// when nobody was asked.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub decision: Option<agent::review::Decision>,
    /// The errors the project's language server found in the run's edits and sent back to
    /// the model (docs/project-lsp.md), as `path:line:column: error: message`.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub edit_errors: Vec<String>,
    /// Where the failing tests pointed when the run began (docs/locate.md), most suspicious
    /// first; absent when nothing was looked for or found.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub suspects: Vec<agent_ls_core::locate::Suspect>,
    /// The workspace file's keys this run ignored (an untrusted folder's `test.command`, a
    /// user-only key): a script that reads only `--json` learns it too, not stderr alone.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub ignored_config: Vec<String>,
}

impl TestCounts {
    /// The run's last test result, counted.
    fn of(run: &Run) -> TestCounts {
        run.tests().map_or(TestCounts::default(), |t| TestCounts {
            passed: t.passed_count,
            failed: t.failed_count,
            stopped: t.stopped.clone(),
        })
    }
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct TestCounts {
    pub passed: u32,
    pub failed: u32,
    /// Why the last run came to no result (a timeout, a sandbox limit), when it was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// What a run's effects share while it goes: its recorder and figures, and what one effect
/// leaves for the next (the last whole test run, the tools the last model call was offered:
/// the only ones its calls may use, among them the run's MCP servers' tools).
struct Going<'o> {
    observer: Observer<'o>,
    totals: Totals,
    failure_kind: Option<FailureKind>,
    last_tests: Option<RunResult>,
    offered: Vec<String>,
    mcp: crate::mcp_client::McpTools,
    /// The run's git checkpoint, taken before its first write.
    git: checkpoint::GitState,
    run_id: String,
    /// What the run met and tried, for memory across runs.
    trail: recall::Trail,
    /// The run's repo map and its phase timings.
    map: map::RunMap,
    /// The latest answer's bytes that were not UTF-8.
    bad_bytes: Vec<String>,
    /// The last change a dry run showed (with its review), the run's answer.
    shown: Option<String>,
    /// The run's instruction files and skills (docs/instructions.md, docs/skills.md).
    instructions: crate::instructions::Tracker,
    /// The permission rules and hooks at the run's check points.
    gate: crate::hooks::Gate,
    /// The project's language servers, which check each applied edit.
    lsp: lsp_check::RunServers,
    /// Where the failing tests point (docs/locate.md): `None` until it was looked for, then
    /// what was found (`None` when it could not be known, or was not looked for).
    located: Option<Option<crate::locate::Located>>,
}

/// How a drive begins: a new run, a resumed one, or a review of a given diff.
enum Begin {
    New,
    Resume,
    Review(String, Vec<agent::review::ChangedFile>),
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
        self.drive(run, shell, run_id, Begin::New).await
    }

    /// Reviews `diff` (the user's own change, `agent-ls review`): the reviewer's turn alone,
    /// recorded like a run, its review in the outcome.
    pub async fn review(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        run_id: String,
        (diff, files): (String, Vec<agent::review::ChangedFile>),
    ) -> Outcome {
        let id = run_id.clone();
        let outcome = self
            .drive(run, shell, run_id, Begin::Review(diff, files))
            .await;
        // A review alone is counted with the reviews, not among the runs and their pass rate.
        if let Some(store) = self.record {
            store.send("the review's kind", move |s| s.mark_review_only(&id));
        }
        outcome
    }

    /// Goes on with a run from its checkpoint (see `agent::resume`), under the same id: its
    /// journal is appended to and its store row updated.
    pub async fn resume(&self, run: &mut Run, shell: &mut impl Shell, run_id: String) -> Outcome {
        self.drive(run, shell, run_id, Begin::Resume).await
    }

    async fn drive(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        run_id: String,
        begin: Begin,
    ) -> Outcome {
        let started = Instant::now();
        let resumed = matches!(begin, Begin::Resume);
        let mut going = self.open(run, shell, &run_id, resumed).await;
        let first = match begin {
            Begin::Resume => agent::resume(run),
            Begin::New => agent::step(run, Event::Start),
            Begin::Review(diff, files) => agent::start_review(run, diff, files),
        };
        shell.refresh().await;
        let (phase, answer) = self.perform_all(run, shell, &mut going, first).await;
        self.finish(run, going, shell, (run_id, started), phase, answer)
            .await
    }

    /// Before the first step: the recorder, the prompts and the context figures, the run's
    /// MCP servers (started now and ended with the run), and the coder's context.
    async fn open<'o>(
        &'o self,
        run: &mut Run,
        shell: &mut impl Shell,
        run_id: &str,
        resumed: bool,
    ) -> Going<'o> {
        let mut observer = Observer::open(
            self.record,
            self.events,
            self.root,
            run_id,
            run,
            resumed,
            crate::memory::known_secrets(self.config),
        );
        // A rewound run says so once, as it starts; resumed, it goes on in the same journal.
        if let Some(e) = run.earlier().filter(|_| !resumed) {
            observer.record(RunEvent::Rewound {
                from: e.run_id.clone(),
                step: e.step,
                messages: e.messages.len(),
            });
        }
        let instructions = self.prompts_and_instructions(run, shell, &mut observer);
        let (mcp, warnings) = crate::mcp_client::McpTools::connect(
            &self.config.mcp.servers,
            self.root,
            Duration::from_secs(self.config.mcp.call_timeout_secs.max(1)),
        )
        .await;
        for w in warnings {
            shell.warn(&w);
        }
        let mut map = map::RunMap::start(self.root, text_buffers(shell));
        let mut lsp = self.run_servers(shell);
        if run.agent().kind == agent::AgentKind::Build && !resumed {
            let goal_files = self.named_files(run.goal(), None);
            self.errors_before(&goal_files, &mut lsp, shell, &mut observer);
        }
        let t = Instant::now();
        let context = self.context(run, shell, &mut map);
        hand_in(run, Input::Context(lsp.with_before(context)));
        map.phases.context_ms = t.elapsed().as_millis() as u64;
        Going {
            observer,
            totals: Totals::default(),
            failure_kind: None,
            last_tests: None,
            offered: Vec::new(),
            mcp,
            git: checkpoint::GitState::NotYet,
            run_id: run_id.to_string(),
            trail: recall::Trail::new(self),
            map,
            bad_bytes: Vec::new(),
            shown: None,
            instructions,
            gate: crate::hooks::Gate::new(self.config, self.root),
            lsp,
            located: None,
        }
    }

    /// The run's prompts and instruction files handed in, with the journal's `context` line
    /// (and an `instructions` line when the budget cut a file).
    fn prompts_and_instructions(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) -> crate::instructions::Tracker {
        let (prompts, used, problems) = crate::config::load_prompts(&self.config.prompt_dirs);
        hand_in(run, Input::Prompts(prompts));
        for p in problems {
            shell.warn(&p);
        }
        let (mut instructions, problems) =
            crate::instructions::Tracker::new(self.root, self.config);
        instructions.work_in(&self.goal_folders(run.goal()));
        let told = instructions.prompt();
        for p in problems.iter().chain(&told.joined.cut) {
            shell.warn(p);
        }
        hand_in(run, Input::Instructions(told.text));
        observer.record(RunEvent::Context {
            agent: run.agent().name.clone(),
            prompt_files: used,
            tokenizer: self.counter().name().into(),
            context_tokens: self.config.model.context_tokens,
            map_tokens: self.config.context.map_tokens,
            instructions: told.joined.used.clone(),
            skills: told.skills,
        });
        if let Some(cut) = told.joined.cut {
            let files = told.joined.used;
            observer.record(RunEvent::Instructions {
                files,
                cut: Some(cut),
            });
        }
        instructions
    }

    /// Performs the effects, feeding each one's event back into `agent::step`, until one
    /// finishes the run: its final phase and answer.
    async fn perform_all(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        going: &mut Going<'_>,
        first: Vec<Effect>,
    ) -> (agent::Phase, String) {
        let mut queue: std::collections::VecDeque<Effect> = first.into();
        while let Some(effect) = queue.pop_front() {
            // A cancel between effects ends the run before anything else is done.
            if self.cancel.is_cancelled() && !matches!(effect, Effect::Finish { .. }) {
                queue.clear();
                queue.extend(agent::step(run, Event::Cancel));
                continue;
            }
            let event = match self.perform(effect, run, shell, going).await {
                Next::Finish(phase, answer) => return (phase, answer),
                Next::Continue => continue,
                Next::Event(e) => e,
            };
            shell.refresh().await;
            // Only a step that asks a model reads the context, and building it ranks the
            // whole repo map (half a second on 20,000 files): the core writes a step's model
            // call last, from the run as the step left it, so the context is gathered and
            // handed in only when `advance` says the step calls a model. The run holds the
            // step's test result by then, so the prompt shows the files the failures name.
            let stepped = agent::advance(run, event);
            if stepped.calls_model() {
                self.find_suspects(run, shell, going).await;
                let mut context = self.context(run, shell, &mut going.map);
                // The suspects lead the prompts until the run first changes a file: then the
                // tests run again and say more than the first coverage did.
                if let Some(Some(found)) = &going.located
                    && !found.suspects.is_empty()
                    && run.files_changed().is_empty()
                {
                    let text = found.render(self.root);
                    context
                        .pieces
                        .insert(0, agent::context::Piece { path: None, text });
                }
                // The errors before the first edit, if they came meanwhile (never waited for).
                let (lsp, observer) = (&mut going.lsp, &mut going.observer);
                self.catch_up(lsp, false, shell, observer).await;
                hand_in(run, Input::Context(going.lsp.with_before(context)));
                if let Some(told) = going.instructions.update(run.files_changed()) {
                    if let Some(cut) = &told.joined.cut {
                        shell.warn(cut);
                    }
                    let (files, cut) = (told.joined.used, told.joined.cut);
                    going.observer.record(RunEvent::Instructions { files, cut });
                    hand_in(run, Input::Instructions(told.text));
                }
            }
            queue.extend(stepped.effects(run));
            going.observer.phase(run);
        }
        (
            agent::Phase::Failed,
            "the run ended without an answer".into(),
        )
    }

    /// Performs one effect.
    async fn perform(
        &self,
        effect: Effect,
        run: &mut Run,
        shell: &mut impl Shell,
        going: &mut Going<'_>,
    ) -> Next {
        let g = going;
        let event = match effect {
            Effect::Finish { status, answer } => return Next::Finish(status, answer),
            Effect::Progress(m) => {
                let (n, of) = (run.iterations().max(1), run.budget().max_iterations);
                shell.progress(&format!("{m} (iteration {n} of {of})"));
                return Next::Continue;
            }
            Effect::Warn(m) => {
                shell.warn(&m);
                g.observer.record(RunEvent::Warning { message: m });
                return Next::Continue;
            }
            Effect::Repair { class, reason } => {
                shell.warn(&format!("repair: {class}: {reason}"));
                let (class, reason) = (class.to_string(), reason);
                g.observer.record(RunEvent::Repair { class, reason });
                return Next::Continue;
            }
            Effect::Reviewed(result) => {
                self.reviewed(run, &result, shell, &mut g.observer);
                return Next::Continue;
            }
            Effect::Tested(record) => {
                g.observer.tester(&record);
                shell.progress(&record.summary());
                return Next::Continue;
            }
            Effect::CallModel {
                role,
                messages,
                tools,
            } => {
                let event = self.model_turn(run, (role, messages, tools), g).await;
                // The answer's bytes that were not UTF-8 (none: a clean answer).
                hand_in(run, Input::BadBytes(std::mem::take(&mut g.bad_bytes)));
                event
            }
            Effect::RunTools(calls) => {
                g.instructions.saw(&calls);
                let tools = (g.offered.as_slice(), &g.mcp, &g.gate);
                self.run_tools(calls, shell, &mut g.observer, tools, &mut g.last_tests)
                    .await
            }
            Effect::Locate(plan) => self.locate(&plan, shell).await,
            Effect::AskApproval { changes, diff } => {
                self.approve(run, (&changes, &diff), shell, g).await
            }
            Effect::Apply(changes) => self.write(run, &changes, shell, g).await,
            Effect::DiffRun { files } => self.run_diff(&g.git, files).await,
            Effect::TryTests(plan) => {
                let tried = trial::try_tests(self.root, self.config, self.cancel, &plan).await;
                self.unless_cancelled(Event::TestsTried(tried))
            }
            Effect::DevDependency(library) => self.dev_dependency(&library, shell).await,
            Effect::RunTests => self.whole_test_run(run, shell, g).await,
        };
        Next::Event(event)
    }

    /// A change written after the run's checkpoint, read back for the core's after-write
    /// check (`Input::Written`), and checked by the project's language server.
    async fn write(
        &self,
        run: &mut Run,
        changes: &[FileChange],
        shell: &mut impl Shell,
        g: &mut Going<'_>,
    ) -> Event {
        let mark = Self::editor_mark(&g.lsp);
        let id = g.run_id.clone();
        self.checkpoint_before_write(&id, (&mut g.git, &mut g.observer), shell)
            .await;
        let before: Vec<FileText> = changes.iter().map(|c| shell.read(&c.path)).collect();
        let event = self.apply(run, changes, shell).await;
        if event != Event::Applied {
            return event;
        }
        hand_in(run, Input::Written(read_back(shell, changes, &before)));
        // The project's language server on the written files: its new errors, if any.
        let (lsp, observer) = (&mut g.lsp, &mut g.observer);
        self.check_applied(run, (changes, mark), lsp, shell, observer)
            .await
    }

    /// A review of the run's diff was made (or could not be): journaled, counted, shown.
    fn reviewed(
        &self,
        run: &Run,
        result: &agent::review::ReviewResult,
        shell: &mut impl Shell,
        observer: &mut Observer<'_>,
    ) {
        observer.review(result);
        let line = result.report();
        // An unavailable review in gate mode leaves the change unreviewed: say so loudly; in
        // advise mode it is a note like any other.
        let loud = run.settings().review == agent::review::ReviewMode::Gate
            && matches!(result, agent::review::ReviewResult::Unavailable { .. });
        shell.reviewed(result, &line, loud);
    }

    /// A model call for the run, with the tools it offers (the run's MCP servers' among
    /// them), and the reflector's answer kept for memory.
    async fn model_turn(
        &self,
        run: &Run,
        (role, messages, tools): (Role, Vec<Message>, Vec<String>),
        g: &mut Going<'_>,
    ) -> Event {
        let mut mcp_specs = g.mcp.specs(&tools);
        mcp_specs.extend(g.instructions.tool_specs(&tools));
        g.offered = tools.clone();
        g.offered.extend(mcp_specs.iter().map(|s| s.name.clone()));
        if role == Role::Coder {
            let t = Instant::now();
            g.observer.checkpoint(run).await;
            g.map.phases.store_ms += t.elapsed().as_millis() as u64;
        }
        g.map.requested();
        let call = (role, messages, tools, mcp_specs);
        let (observer, totals, kind) = (&mut g.observer, &mut g.totals, &mut g.failure_kind);
        let event = self
            .call_model(run, call, observer, totals, (kind, &mut g.bad_bytes))
            .await;
        if let Event::ModelAnswered {
            role: Role::Reflector,
            text,
        } = &event
        {
            g.trail.reflected(text);
        }
        event
    }

    /// The workspace's whole test run; once the run's first failures are known, what earlier
    /// runs remembered of them is handed in before their result is stepped.
    async fn whole_test_run(
        &self,
        run: &mut Run,
        shell: &mut impl Shell,
        g: &mut Going<'_>,
    ) -> Event {
        let baseline = run.phase() == agent::Phase::Baseline;
        let (observer, kind) = (&mut g.observer, &mut g.failure_kind);
        let event = self
            .run_tests(shell, observer, kind, baseline, &mut g.last_tests)
            .await;
        if matches!(event, Event::TestsFinished(_)) && g.trail.tested(g.last_tests.as_ref()) {
            let t = Instant::now();
            let section = self.recall(&g.trail, &mut g.observer).await;
            g.map.phases.memory_ms += t.elapsed().as_millis() as u64;
            if let Some(section) = section {
                hand_in(run, Input::Memory(section));
            }
        }
        event
    }

    /// `event`, or the cancel that came while it was made.
    fn unless_cancelled(&self, event: Event) -> Event {
        if self.cancel.is_cancelled() {
            Event::Cancel
        } else {
            event
        }
    }

    /// The run's end: its MCP servers stop, the record of it, and its outcome.
    async fn finish(
        &self,
        run: &Run,
        mut going: Going<'_>,
        shell: &mut impl Shell,
        (run_id, started): (String, Instant),
        phase: agent::Phase,
        answer: String,
    ) -> Outcome {
        let ended = Instant::now();
        let branch = self
            .record_run_files((&going.git, &mut going.observer), run.files_changed())
            .await;
        let checkpoint = going.git.id();
        let status = RunStatus::from_phase(phase);
        let files = run.files_changed();
        let status_name = serde_json::to_value(status).unwrap_or_default();
        let status_name = status_name.as_str().unwrap_or("");
        going.gate.after_run(status_name, &answer, files).await;
        // What the after_run hooks report comes before the run's last line and its end.
        checks::tell(&going.gate, shell, &mut going.observer);
        let t = Instant::now();
        self.remember(run, &going.trail, status, &run_id).await;
        going.map.phases.memory_ms += t.elapsed().as_millis() as u64;
        let Going {
            mut observer,
            totals,
            mut failure_kind,
            mcp,
            mut map,
            lsp,
            shown: going_shown,
            located,
            ..
        } = going;
        let suspects = located.flatten().map(|l| l.suspects).unwrap_or_default();
        // Said again at the end, where the run's answer is read.
        if let Some(w) = mcp.withdrawn_warning() {
            shell.warn(&w);
        }
        mcp.shutdown().await;
        let edit_errors = lsp.reported.clone();
        lsp.shutdown().await;
        map.phases.end_ms = ended.elapsed().as_millis() as u64;
        observer.phases(&map.finish_phases());
        if run.partial() {
            failure_kind = Some(FailureKind::Partial);
        }
        observer.finished(status, run, &answer);
        // A dry run proposes: its answer is the change it would have written.
        let (status, answer) = match going_shown {
            Some(diff) => (RunStatus::Proposed, diff),
            None => (status, answer),
        };
        let tests = TestCounts::of(run);
        Outcome {
            run_id,
            status,
            answer,
            iterations: run.iterations(),
            files_changed: run.files_changed().to_vec(),
            tests,
            tokens: totals.usage.input_tokens + totals.usage.output_tokens,
            duration_ms: started.elapsed().as_millis() as u64,
            cost_usd: totals.cost_usd,
            checkpoint,
            commit: None,
            branch,
            worktree: None,
            failure_kind: failure_kind.filter(|_| status == RunStatus::Failed),
            review: run.last_review().cloned(),
            tester: run.tester_record().cloned(),
            decision: None,
            edit_errors,
            suspects,
            ignored_config: Vec::new(),
        }
    }

    /// A model call: the request (within the model's window), the answer streamed to the
    /// terminal and the live view, and the event it makes.
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
        (failure_kind, bad_bytes): (&mut Option<FailureKind>, &mut Vec<String>),
    ) -> Event {
        if let Some(spent) = over_cap(self.config.agent.max_cost_usd, totals) {
            *failure_kind = Some(FailureKind::Cost);
            return Event::ModelFailed { role, error: spent };
        }
        let offered = !tools.is_empty() || !mcp_specs.is_empty();
        let request = self.request(run, role, messages, (tools, mcp_specs), observer);
        let shown = &*observer;
        // Only the coder's prose streams to the terminal; a role whose answer is data gets
        // one line once it is read (below). Whether the streamed text ended its line.
        let line_open = std::sync::atomic::AtomicBool::new(false);
        let stream = |text: &str| {
            if let Some(f) = self.on_token.filter(|_| role == Role::Coder)
                && !text.is_empty()
            {
                f(text);
                line_open.store(!text.ends_with('\n'), std::sync::atomic::Ordering::Relaxed);
            }
            shown.token(role, text);
        };
        let on_token: Option<OnToken<'_>> =
            (self.on_token.is_some() || self.events.is_some()).then_some(&stream);
        let answer = self
            .models
            .call(role, &request, self.cancel, on_token)
            .await;
        if let Some(f) = self.on_token {
            // The next status line starts on a line of its own.
            if line_open.into_inner() {
                f("\n");
            }
            if let Ok(r) = &answer
                && let Some(line) = agent::prompts::role_summary(role, &r.text)
            {
                f(&format!("agent-ls: {line}\n"));
            }
        }
        match answer {
            Ok(r) => {
                totals.add(&r);
                observer.model_answered(role, &r, totals);
                *bad_bytes = r.bad_bytes.clone();
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

    /// The request of a model call, recorded: level 3 of the context budget fits the
    /// conversation to the model's window with room for the answer, and a turn's first call
    /// may be made to read first (agent.first_tool).
    fn request(
        &self,
        run: &Run,
        role: Role,
        messages: Vec<Message>,
        (tools, mcp_specs): (Vec<String>, Vec<crate::model::ToolSpec>),
        observer: &mut Observer<'_>,
    ) -> Request {
        let counter = self.counter();
        let window = self
            .config
            .model
            .context_tokens
            .saturating_sub(self.config.model.max_tokens as usize);
        let fitted = agent::window::fit(messages, window, |t| counter.count(t));
        if fitted.dropped > 0 {
            observer.record(RunEvent::ContextCut {
                role,
                dropped_messages: fitted.dropped,
                tokens: fitted.tokens,
                window,
                tokenizer: counter.name().into(),
            });
        }
        let first = &self.config.agent.first_tool;
        // The turn's first call only: `tool_steps` counts rounds that learned nothing.
        let tool_choice = (role == Role::Coder
            && run.tool_rounds() == 0
            && !first.is_empty()
            && tools.contains(first))
        .then(|| first.clone());
        let mut specs = crate::tools::specs_named(&tools);
        specs.extend(mcp_specs);
        // A turn offered only the reading tools edits nothing (planning, explaining,
        // reviewing), which the response cache tells apart from the coder's editing turns.
        let reading_only = matches!(
            run.phase(),
            agent::Phase::Planning | agent::Phase::Explaining | agent::Phase::Reviewing
        );
        let request = Request {
            messages: fitted.messages,
            tools: specs,
            tool_choice,
            reading_only,
            question: Some(run.goal().to_string()),
            ..Request::default()
        };
        observer.prompt(role, &request, fitted.tokens, counter.name());
        request
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
        (allowed, mcp, gate): (&[String], &crate::mcp_client::McpTools, &crate::hooks::Gate),
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
        let mut refused = Vec::with_capacity(calls.len());
        for call in &calls {
            let why = checks::call_allowed(
                &call.name,
                &call.arguments,
                (shell, &self.policy),
                (observer, gate),
            )
            .await;
            refused.push(why.map(Output::error));
            checks::tell(gate, shell, observer);
        }
        let reads: Vec<_> = calls
            .iter()
            .zip(&refused)
            .map(|(call, refused)| {
                let reading = agent_ls_core::agent::agents::READ_TOOLS
                    .contains(&call.name.as_str())
                    && allowed.contains(&call.name)
                    && refused.is_none();
                reading.then(|| self.read_tool(call.clone(), snapshot.clone(), limits))
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
            let (mut out, took) = match (by_index.remove(&i), refused[i].take()) {
                (Some(r), _) => r,
                (None, Some(why)) => (why, Duration::ZERO),
                (None, None) => {
                    let started = Instant::now();
                    let out = self
                        .run_tool(&call, shell, (allowed, mcp), &limits, last_tests)
                        .await;
                    (out, started.elapsed())
                }
            };
            let after = gate
                .after_call(&call.name, &call.arguments, &out.text)
                .await;
            checks::tell(gate, shell, observer);
            if let Some(why) = after {
                out.text = format!("{}\n\nA hook says: {why}", out.text);
            }
            observer.tool(&call, &out, took);
            results.push((call, out.text));
        }
        Event::ToolResults(results)
    }

    /// A reading tool, started now on a blocking thread within `agent.tool_timeout_secs`:
    /// its output and how long it took.
    fn read_tool(
        &self,
        call: crate::model::ToolCall,
        snapshot: std::sync::Arc<crate::tools::Snapshot>,
        limits: crate::tools::Limits,
    ) -> impl std::future::Future<Output = (crate::tools::Output, Duration)> + use<> {
        use crate::tools::Output;
        let timeout = Duration::from_secs(self.config.agent.tool_timeout_secs.max(1));
        let started = Instant::now();
        let job =
            tokio::task::spawn_blocking(move || crate::tools::run(&call, &*snapshot, &limits));
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
        if call.name == crate::skills::TOOL {
            return crate::skills::read_tool(self.root, &call.arguments, limits);
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
        let command = match self.command_of(call) {
            Ok(command) => command,
            Err(why) => return why,
        };
        let whole = command.is_none() && call.name == "run_tests";
        match shell.run_tests(self.cancel, command).await {
            Ok(r) => {
                let text = r.model_summary();
                // A whole run is what the server knows now; a narrowed one says less.
                if whole {
                    *last_tests = Some(r);
                }
                Output::ok(crate::tools::cap(&text, limits.result_bytes))
            }
            Err(e) => Output::error(e.to_string()),
        }
    }

    /// The command a running tool asks for: `None` for the whole test run, or the model's
    /// answer when the call cannot run.
    fn command_of(
        &self,
        call: &crate::model::ToolCall,
    ) -> Result<Option<Vec<String>>, crate::tools::Output> {
        use crate::tools::Output;
        match call.name.as_str() {
            "run_tests" => match call.arguments.get("filter").and_then(|f| f.as_str()) {
                Some(filter) if !filter.trim().is_empty() => {
                    tests_run::narrowed(self.root, &self.config.test, filter.trim())
                        .map(Some)
                        .map_err(|e| Output::error(e.to_string()))
                }
                _ => Ok(None),
            },
            "run_command" => {
                let argv = agent_ls_core::permissions::argv_of(&call.arguments);
                match argv.is_empty() {
                    false => Ok(Some(argv)),
                    true => Err(Output::error("`argv` must be a non-empty list of strings")),
                }
            }
            other => Err(Output::error(format!(
                "`{other}` cannot be called here (an editing tool is a proposal: call it alone, or answer with edits)"
            ))),
        }
    }

    async fn locate(&self, plan: &edit::EditPlan, shell: &mut impl Shell) -> Event {
        shell.refresh().await;
        let limits = self.config.edit.limits();
        Event::Located(edit::apply_plan(plan, self.root, &limits, |rel| {
            shell.read(rel)
        }))
    }

    /// The tester's property test needs `library` (installed only as the policy allows).
    async fn dev_dependency(&self, library: &str, shell: &mut impl Shell) -> Event {
        let (root, config, cancel) = (self.root, self.config, self.cancel);
        let how = (shell, &self.policy);
        let ready = dev_dependency::ensure(root, config, cancel, library, how).await;
        self.unless_cancelled(Event::DevDependency(ready))
    }

    async fn approve(
        &self,
        run: &Run,
        (changes, diff): (&[FileChange], &str),
        shell: &mut impl Shell,
        g: &mut Going<'_>,
    ) -> Event {
        g.trail.proposed(diff);
        let (observer, gate, shown) = (&mut g.observer, &g.gate, &mut g.shown);
        if self.cancel.is_cancelled() {
            return Event::Cancel;
        }
        let mut review = review(changes);
        let before = gate.before_change(changes, diff).await;
        checks::tell(gate, shell, observer);
        match before {
            crate::hooks::ChangeGate::Refuse(why) => {
                shell.warn(&why);
                observer.approval(run.iterations(), false, changes);
                return Event::Refused(why);
            }
            // An ask rule makes the file one the user must name, as a protected file is.
            crate::hooks::ChangeGate::Ask(asks) => review.protected.extend(asks),
            crate::hooks::ChangeGate::Go => {}
        }
        // A change the gate sent back: its preview and question name what it is to fix.
        if let Some(sent) = agent::review::sent_back(run.settings().review, run.last_review()) {
            review.fixes = sent
                .findings
                .iter()
                .map(|f| crate::trust::Fix {
                    path: changes
                        .iter()
                        .any(|c| c.path == f.path)
                        .then(|| f.path.clone()),
                    text: f.one_line(),
                })
                .collect();
        }
        observer.patch(changes, diff, &review);
        let asked = !review.is_clean();
        gate.approval_needed(changes, asked).await;
        checks::tell(gate, shell, observer);
        let verdict = self.decide(changes, diff, &review, shell).await;
        observer.approval(run.iterations(), verdict == Verdict::Approved, changes);
        if self.cancel.is_cancelled() {
            return Event::Cancel;
        }
        match verdict {
            Verdict::Approved => Event::Approved,
            Verdict::Rejected => Event::Rejected,
            Verdict::Shown => {
                *shown = Some(format!("{diff}{}", review.describe()));
                Event::Rejected
            }
            Verdict::Refused(why) => {
                shell.warn(&format!("the change was not applied: {why}"));
                Event::Refused(why)
            }
        }
    }

    /// The approval policy's decision on a change (`policy::change`), and the questions it
    /// puts to the user through the shell.
    async fn decide(
        &self,
        changes: &[FileChange],
        diff: &str,
        review: &crate::trust::Review,
        shell: &mut impl Shell,
    ) -> Verdict {
        let mut decision = policy::change(&self.policy, review, shell.present());
        loop {
            let question = |why| ChangeQuestion {
                changes,
                diff,
                review,
                why,
            };
            return match decision {
                policy::Decision::Write => {
                    shell.show_change(&question(policy::Asked::Approval), true);
                    Verdict::Approved
                }
                policy::Decision::Refuse(why) => {
                    shell.show_change(&question(policy::Asked::Approval), false);
                    Verdict::Refused(why)
                }
                policy::Decision::Reject(why) => {
                    shell.show_change(&question(policy::Asked::Approval), false);
                    shell.warn(&why);
                    Verdict::Rejected
                }
                policy::Decision::Show => {
                    shell.show_change(&question(policy::Asked::Approval), false);
                    Verdict::Shown
                }
                policy::Decision::Ask(why) => {
                    if shell.ask_change(&question(why)).await {
                        Verdict::Approved
                    } else {
                        Verdict::Rejected
                    }
                }
                policy::Decision::Confirm { files, then } => {
                    for (path, why) in &files {
                        if !shell.confirm_protected(path, why).await {
                            return Verdict::Refused(policy::not_confirmed(path, why));
                        }
                    }
                    decision = *then;
                    continue;
                }
            };
        }
    }

    /// Writes an approved change through the shell, moved first onto the files' text now:
    /// a change is never written over text it was not computed for (`edit::rebase`; a file
    /// deleted meanwhile, or typing at the change's lines, makes it `Stale`).
    async fn apply(&self, run: &Run, changes: &[FileChange], shell: &mut impl Shell) -> Event {
        let task = run
            .current_task()
            .map(|t| format!("{} {}", t.id, t.title))
            .unwrap_or_default();
        shell.task(&task, run.iterations());
        shell.refresh().await;
        let current = match rebase(changes, shell, &self.config.edit.limits()) {
            Ok(c) => c,
            Err(e) => return apply_error(e),
        };
        match shell.write(&current).await {
            Ok(()) => Event::Applied,
            Err(e) => apply_error(e),
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
                // Said when it happens: a run that goes on and ends done would otherwise
                // never tell that a test run timed out, or passed only past a limit.
                if let Some(why) = r.stopped().or_else(|| r.shaped()) {
                    shell.warn(&why);
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
    /// What the coder sees now, gathered before every model call: the files the goal names,
    /// those the run's last test report points at, then the rest of the project's small text
    /// files, within the byte budget.
    /// Looks once per run for where the failing tests point, when they fail and their report
    /// names no file of the project's own (a traceback that ends in the test), the coder
    /// is about to be asked, and `agent.locate` is on. What it found, or why not, is said.
    async fn find_suspects(&self, run: &Run, shell: &mut impl Shell, going: &mut Going<'_>) {
        if going.located.is_some()
            || !self.config.agent.locate
            || run.agent().kind != agent::AgentKind::Build
        {
            return;
        }
        let Some(tests) = run.tests().filter(|t| !t.passed) else {
            return;
        };
        if self.points_at_code(&tests.report) {
            going.located = Some(None);
            return;
        }
        shell.progress("finding where the failing tests point (their line coverage)");
        let t = Instant::now();
        let found = crate::locate::locate(self.root, self.config, self.cancel).await;
        going.map.phases.locate_ms = Some(t.elapsed().as_millis() as u64);
        going.located = Some(match found {
            Ok(mut found) => {
                // The coverage's ranking, combined with the failing tests' call path.
                let places: Vec<(String, u32)> =
                    crate::tests_run::failures_in(self.root, &tests.report)
                        .iter()
                        .flat_map(|f| f.location.iter().chain(f.frames.iter()))
                        .map(|l| (l.file.clone(), l.line))
                        .collect();
                agent_ls_core::locate::prefer_on_path(&mut found.suspects, &places);
                shell.progress(&found.summary());
                Some(found)
            }
            Err(e) => {
                shell.progress(&format!("no fault localisation: {e}"));
                None
            }
        });
    }

    /// Whether the failure report already says where the bug is: every failure the runner's
    /// parser reads is located in a source file of the project's own, not in a test. One
    /// failing assertion in a test, or one that names no place, and it does not: a crash in
    /// the project beside it says where it broke, not why the other test failed (a TypeError
    /// in `curry.__call__` beside `assert is_valid(...) is None`). A report the parsers do not
    /// read points at code when it names a project's source file; only a source file counts
    /// (pytest's header names its config, `configfile: pyproject.toml`), and a warning's place
    /// does not (`more.py:1653: DeprecationWarning`, in the run's summary).
    fn points_at_code(&self, report: &str) -> bool {
        let own = |f: &str| {
            agent_ls_core::syntax::Lang::of(f, "").is_some()
                && !crate::locate::is_test_file(f)
                && self.inside(f)
        };
        let failures = crate::tests_run::failures_in(self.root, report);
        if !failures.is_empty() {
            return failures.iter().all(|f| {
                f.location
                    .as_ref()
                    .is_some_and(|l| own(&l.file) && !self.in_rust_test(&l.file, l.line))
            });
        }
        let said: String = report
            .lines()
            .filter(|l| !l.contains("Warning:"))
            .collect::<Vec<_>>()
            .join("\n");
        self.named_files("", Some(&said)).iter().any(|f| own(f))
    }

    /// Whether `line` of `path` is in a Rust file's own tests (a `#[cfg(test)]` module, a
    /// `#[test]` function): a unit test's failed assertion is there, beside the code.
    fn in_rust_test(&self, path: &str, line: u32) -> bool {
        if !path.ends_with(".rs") {
            return false;
        }
        match crate::files::read_for_plan(self.root, path) {
            agent_ls_core::edit::FileText::Text(text) => {
                agent_ls_core::locate::rust_test_ranges(&text)
                    .iter()
                    .any(|(a, b)| *a <= line && line <= *b)
            }
            _ => false,
        }
    }

    fn context(
        &self,
        run: &Run,
        shell: &impl Shell,
        run_map: &mut map::RunMap,
    ) -> agent::context::Context {
        let report = run.tests().map(|t| t.report.as_str());
        let mut wanted = self.named_files(run.goal(), report);
        // The repo map, ranked toward the files above and the names the goal and the failure
        // mention; then the best-ranked files in full while the budget lasts, then the rest.
        let buffers = text_buffers(shell);
        let map = run_map.map(self.root, (&wanted, run.files_changed()), &buffers);
        let mut mentioned = run.goal().to_string();
        if let Some(report) = report {
            mentioned.push('\n');
            mentioned.push_str(report);
        }
        let focus = crate::repomap::Focus {
            files: wanted.clone(),
            idents: crate::repomap::idents_of(&mentioned),
        };
        let t = Instant::now();
        let (map_text, ranked) =
            map.render_ranked(&focus, self.config.context.map_tokens, &self.counter());
        run_map.phases.rank_ms += t.elapsed().as_millis() as u64;
        let named = wanted.len();
        // A big repository ranks tens of thousands of files: a set, not a scan a file.
        let mut seen: std::collections::HashSet<String> = wanted.iter().cloned().collect();
        for path in ranked
            .into_iter()
            .chain(run_map.rest(self.root).iter().cloned())
        {
            if seen.insert(path.clone()) {
                wanted.push(path);
            }
        }
        let mut context = agent::context::Context::default();
        // The review agent reviews the latest agent change when there is one: its diff leads.
        if run.agent().kind == agent::AgentKind::Review
            && let Some(diff) = latest_step_diff(self.root)
        {
            context.pieces.push(agent::context::Piece {
                path: None,
                text: diff,
            });
        }
        self.fill_context(&mut context, &wanted, named, &map_text, shell);
        context
    }

    /// Whether `path` names a file inside the workspace: a goal or a test's output may name
    /// any path (`/home/me/secrets.py`, `../other/x.py`), and what is named here is read into
    /// the prompt.
    fn inside(&self, path: &str) -> bool {
        crate::files::resolve(self.root, path).is_ok_and(|p| p.is_file())
    }

    /// The folders the goal names ("explain what svc/api.py does", "tidy svc/"): a named
    /// file's folder, or a named folder itself. A folder the goal names is one the run works
    /// in, so its AGENTS.md belongs in the first request, not one call later.
    fn goal_folders(&self, goal: &str) -> Vec<String> {
        let mut folders: Vec<String> = Vec::new();
        for word in goal.split(|c: char| c.is_whitespace() || c == '`' || c == '\'' || c == '"') {
            let w = word.trim_matches(|c: char| c == ',' || c == '.' || c == ':' || c == ';');
            let Ok(path) = crate::files::resolve(self.root, w) else {
                continue;
            };
            let folder = if path.is_dir() {
                w.trim_start_matches("./").trim_end_matches('/').to_string()
            } else if path.is_file() {
                match w.trim_start_matches("./").rsplit_once('/') {
                    Some((dir, _)) => dir.to_string(),
                    None => continue,
                }
            } else {
                continue;
            };
            if !folder.is_empty() && !folders.contains(&folder) {
                folders.push(folder);
            }
        }
        folders
    }

    /// The files that the goal names, then those a test report's lines point at.
    fn named_files(&self, goal: &str, report: Option<&str>) -> Vec<String> {
        let mut wanted: Vec<String> = Vec::new();
        for word in goal.split(|c: char| c.is_whitespace() || c == '`' || c == '\'' || c == '"') {
            let w = word.trim_matches(|c: char| c == ',' || c == '.' || c == ':' || c == ';');
            if !w.is_empty() && self.inside(w) {
                wanted.push(w.to_string());
            }
        }
        for line in report.unwrap_or("").lines() {
            for token in line
                .split(|c: char| c.is_whitespace() || c == '"' || c == '(' || c == ')' || c == ',')
            {
                let path = token
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("./");
                if path.contains('.') && self.inside(path) && !wanted.iter().any(|w| w == path) {
                    wanted.push(path.to_string());
                }
            }
        }
        wanted
    }

    /// Appends the `wanted` files whole while agent.context_bytes lasts, the repo map after
    /// the first `named` of them (the map has its own budget, context.map_tokens, so its
    /// bytes are counted apart), and names the files left unread. The prompt then keeps what
    /// fits its own budget (`Context::render`).
    fn fill_context(
        &self,
        context: &mut agent::context::Context,
        wanted: &[String],
        named: usize,
        map_text: &str,
        shell: &impl Shell,
    ) {
        use agent::context::Piece;
        let map = (!map_text.is_empty()).then(|| Piece {
            path: None,
            text: format!(
                "Repo map (the definitions that matter most, as path:line: signature):\n{map_text}\n"
            ),
        });
        let budget = self.config.agent.context_bytes;
        let mut used = 0;
        let mut missed = 0;
        for (i, path) in wanted.iter().enumerate() {
            if i == named
                && let Some(map) = &map
            {
                context.pieces.push(map.clone());
            }
            // Once the budget is spent, or a run of files did not fit in what is left, the
            // rest are only named, not read: this runs before every step, and a big
            // repository ranks tens of thousands of files, which read one by one until one
            // fits took most of a second. Only the first few are named at all.
            if used >= budget || missed >= MISSES {
                if i > named && context.unread.len() >= agent::context::MAX_NAMED {
                    break;
                }
                context.unread.push(path.clone());
                continue;
            }
            let FileText::Text(text) = shell.read(path) else {
                continue;
            };
            let bytes = path.len() + text.len() + 10;
            if used + bytes > budget {
                missed += usize::from(i >= named);
                context.unread.push(path.clone());
                continue;
            }
            missed = 0;
            used += bytes;
            context.pieces.push(Piece {
                path: Some(path.clone()),
                text,
            });
        }
        if wanted.len() == named
            && let Some(map) = map
        {
            context.pieces.push(map);
        }
    }
}

/// The editor's unsaved texts, by path.
fn text_buffers(shell: &impl Shell) -> std::collections::HashMap<String, String> {
    shell
        .buffers()
        .into_iter()
        .filter_map(|(p, t)| match t {
            FileText::Text(t) => Some((p, t)),
            _ => None,
        })
        .collect()
}

/// Hands the run what it reads but does not decide on (its prompts, context, memory): an
/// event that produces no effect.
/// The files of `changes` as `shell` holds them after the write, for the core's after-write
/// check: only those that held the change's original text before it (`before`), since the
/// shell re-locates a change onto a file the user changed meanwhile.
fn read_back(
    shell: &impl Shell,
    changes: &[FileChange],
    before: &[FileText],
) -> Vec<(String, String)> {
    changes
        .iter()
        .zip(before)
        .filter(|(c, b)| match (b, &c.original) {
            (FileText::Text(t), Some(o)) => t == o,
            (FileText::Missing, None) => true,
            _ => false,
        })
        .filter_map(|(c, _)| match shell.read(&c.path) {
            FileText::Text(t) => Some((c.path.clone(), t)),
            _ => None,
        })
        .collect()
}

fn apply_error(e: ApplyError) -> Event {
    match e {
        ApplyError::Stale(e) => Event::Stale(e),
        ApplyError::Failed(e) => Event::ApplyFailed(e),
    }
}

fn hand_in(run: &mut Run, input: Input) {
    let effects = agent::step(run, Event::Input(input));
    debug_assert!(effects.is_empty(), "an input produced effects: {effects:?}");
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
