//! Agent runs (and undo/redo) inside the server: the `Shell` that reaches the editor
//! (approval through change annotations or `window/showMessageRequest`, edits through
//! `workspace/applyEdit` with version checks before and after, the disk kept in step for the
//! tests) and progress.
//!
//! A run is a task of its own. It reports to the session only through `AgentMessage` (it
//! never sees the session), asks the session's one owner of test runs for its tests, and
//! sends everything for the client through the outbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::{ApplyWorkspaceEdit, WorkDoneProgressCreate};
use tower_lsp_server::ls_types::{
    ApplyWorkspaceEditParams, MessageType, ProgressToken, Uri, WorkDoneProgress,
    WorkDoneProgressBegin, WorkDoneProgressCreateParams, WorkDoneProgressEnd,
    WorkDoneProgressReport, WorkspaceEdit,
};
use tracing::{info, warn};

use super::Report;
use super::ext;
use super::git_commands;
use super::isolation;
use super::jobs;
use super::outbox::Outbox;
use super::review_decision;
use super::rollback;
use super::session::Refused;
use super::workspace_edit::{self, EditSupport, Target};
use agent_ls_core::agent::{Run, RunStatus};
use agent_ls_core::edit::history::{Reversal, Step, StepFile};
use agent_ls_core::edit::{self, FileChange, FileText};
use agent_ls_core::text::{Buffer, Encoding};
use agent_ls_runtime::config::{Approval, Config};
use agent_ls_runtime::drive::{self, ApplyError, Drive, Outcome, Shell, Verdict};
use agent_ls_runtime::files;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::model::Models;
use agent_ls_runtime::store::StoreThread;
use agent_ls_runtime::tests_run::{RunError, RunResult};
use agent_ls_runtime::trust::Review;

/// Notification `agent-ls/runFinished`.
pub enum RunFinished {}

impl Notification for RunFinished {
    type Params = Outcome;
    const METHOD: &'static str = super::ext::RUN_FINISHED;
}

/// Arguments of `agent-ls.run`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct RunArgs {
    pub goal: String,
    pub uri: Option<Uri>,
    pub range: Option<tower_lsp_server::ls_types::Range>,
    /// The agent to run it: build, plan, review or a custom one (default: agent.default_agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// `agent-ls.review`: the run is a review of this change, and nothing else.
    #[serde(skip)]
    pub review: Option<drive::ReviewTarget>,
    /// Reproduce the goal's bug with a test before any fix (the code action "Agent: write a
    /// failing test for this"; docs/tester.md).
    #[serde(default)]
    pub reproduce: bool,
}

/// The open documents of the workspace, by path relative to its root.
pub type Snapshot = HashMap<String, (Uri, Buffer)>;

/// What a run (or an undo) tells the session, or asks of it.
pub enum AgentMessage {
    /// The open documents as they are now.
    Snapshot { reply: oneshot::Sender<Snapshot> },
    /// Answer once every document named holds its text (the `didChange` that follows an
    /// applied edit); the asker gives up after its own deadline.
    AwaitTexts {
        want: Vec<(Uri, String)>,
        reply: oneshot::Sender<()>,
    },
    /// Run the tests through the session's one owner of test runs.
    RunTests {
        reply: oneshot::Sender<Result<RunResult, RunError>>,
        /// A tool's narrowed run or command in place of the tests; its result is the
        /// model's and is not published as diagnostics.
        command: Option<Vec<String>>,
    },
    /// An agent step was applied and confirmed: record it in the history.
    StepApplied {
        run_id: String,
        goal: String,
        task: String,
        /// The run's iteration that made it.
        iteration: u32,
        changes: Vec<FileChange>,
        files: Vec<StepFile>,
    },
    /// The run ended.
    Finished { id: String, outcome: Box<Outcome> },
    /// The run's review, about to be asked about: its findings go on their lines now, so the
    /// user sees them in the files while deciding. Answered once they are in the outbox, so
    /// they reach the client before the question.
    Reviewed {
        review: Box<agent_ls_core::agent::review::ReviewResult>,
        reply: oneshot::Sender<()>,
    },
    /// A rollback ended; `rolled_back` when the run's files are back to its checkpoint,
    /// `changed` when that changed any file.
    RollbackFinished {
        run_id: Option<String>,
        rolled_back: bool,
        changed: bool,
    },
    /// An undo (or redo) ended.
    UndoFinished {
        step: u64,
        redo: bool,
        goal: String,
        result: Result<(), UndoFailed>,
    },
}

/// Why an undo or redo did not happen; the text follows "could not undo step N: ".
#[derive(Debug, thiserror::Error)]
pub enum UndoFailed {
    /// The reversal cannot be computed from the files as they are now.
    #[error("{0}")]
    Reversal(String),
    /// The editor or the disk did not take it.
    #[error("{0}")]
    Apply(String),
}

/// The editor said it applied an edit, but these documents do not hold it.
#[derive(Debug, thiserror::Error)]
#[error("the editor reported the change as applied, but {} does not hold it (was it declined?)", .0.join(", "))]
struct NotHeld(Vec<String>);

/// Why the disk could not be brought in step with an applied edit.
#[derive(Debug, thiserror::Error)]
enum DiskSync {
    #[error("{0}")]
    Refused(String),
    #[error("{0} has unsaved changes around the agent's edit; save it so the tests see the change")]
    UnsavedAround(String),
    #[error("{0} was created or deleted on disk meanwhile")]
    CreatedOrDeleted(String),
    #[error(transparent)]
    Write(#[from] files::FileError),
}

/// The open documents whose file the server wrote on disk under the editor's buffer (for a
/// client without `agent-ls/saveFiles`), until the editor reads or saves the file again.
/// Such an editor knows the file changed behind it: Emacs asks "changed on disk; discard your
/// edits?" before it applies the next edit to that buffer, and reverting reopens the document
/// at a new version, which refuses the edit. So the next edit to such a file is written to the
/// disk first, and whichever the answer, the buffer and the disk end up holding it.
#[derive(Clone, Default)]
pub struct WrittenUnder(std::sync::Arc<std::sync::Mutex<std::collections::HashSet<Uri>>>);

impl WrittenUnder {
    fn mark(&self, uri: &Uri) {
        if let Ok(mut set) = self.0.lock() {
            set.insert(uri.clone());
        }
    }

    pub fn forget(&self, uri: &Uri) {
        if let Ok(mut set) = self.0.lock() {
            set.remove(uri);
        }
    }

    fn contains(&self, uri: &Uri) -> bool {
        self.0.lock().is_ok_and(|set| set.contains(uri))
    }
}

/// What a run needs from the client connection, the same for every run of a session.
#[derive(Clone)]
pub struct Connection {
    pub outbox: Outbox,
    pub report: Report<AgentMessage>,
    pub root: PathBuf,
    pub encoding: Encoding,
    pub support: EditSupport,
    pub progress: bool,
    pub written_under: WrittenUnder,
}

/// Everything a run needs, taken from the session when it starts.
pub struct StartRun {
    pub id: String,
    pub goal: String,
    pub config: Config,
    pub connection: Connection,
    pub store: Option<StoreThread>,
    pub cancel: CancellationToken,
    pub decisions: mpsc::UnboundedReceiver<bool>,
    /// An interrupted run's checkpoint to go on from (agent-ls.resume).
    pub resume: Option<Run>,
    /// The agent the command named, in place of the configuration's default.
    pub agent: Option<drive::ChosenAgent>,
    /// Held until the run ends: one run per workspace.
    pub lock: RunLock,
    /// What committing the run's files needs (`git.commit`), when there is a store.
    pub git: Option<git_commands::GitContext>,
    /// `agent-ls.review`: review this change instead of running the goal.
    pub review: Option<drive::ReviewTarget>,
    /// The tester reproduces the goal's bug with a test first (`RunArgs::reproduce`).
    pub reproduce: bool,
}

/// Runs the loop to its end on a task of its own; the outcome goes back to the session. The
/// loop runs under the panic guard: a panic ends the run "failed" with the panic's message,
/// and the session still hears of the end, so it is never left busy.
pub fn spawn(mut s: StartRun) {
    tokio::spawn(async move {
        let started = Instant::now();
        // `store` is where the run is recorded: the session's, or a worktree run's own.
        let (id, goal, c, mut store) = (
            s.id.clone(),
            s.goal.clone(),
            s.connection.clone(),
            s.store.clone(),
        );
        let mut git = s.git.take();
        let progress = begin_progress(&c, &id, &goal).await;
        let driving = drive_run(s, progress.clone(), (&mut git, &mut store));
        let mut outcome = match jobs::caught(jobs::Kind::AgentRun, driving).await {
            Ok(outcome) => outcome,
            Err(why) => {
                // The store would list the run as interrupted, and offer to resume what panicked.
                if let Some(store) = store {
                    let (id, why) = (id.clone(), why.clone());
                    store.send("a failed run", move |s| {
                        s.run_finished(&id, RunStatus::Failed, 0, None, &why)
                    });
                }
                ended_early(id.clone(), why, started)
            }
        };
        match progress {
            Some(token) => c.outbox.progress(
                token,
                WorkDoneProgress::End(WorkDoneProgressEnd {
                    message: Some(outcome.status.as_str().into()),
                }),
            ),
            None => c.outbox.log_message(
                MessageType::INFO,
                format!(
                    "agent-ls: {} ({}): {}",
                    agent_ls_core::agent::one_line(&goal),
                    outcome.status.as_str(),
                    outcome.answer
                ),
            ),
        }
        // With git.commit = "on_success" the files are committed before runFinished; with
        // "ask" the question comes after it, so an unanswered one keeps nothing waiting.
        let ask = match &git {
            Some(cx) => {
                let committing = git_commands::on_success(cx, &mut outcome, &c.outbox);
                jobs::caught(jobs::Kind::AgentRun, committing)
                    .await
                    .unwrap_or(false)
            }
            None => false,
        };
        info!(run = %id, status = outcome.status.as_str(), ms = started.elapsed().as_millis() as u64, "agent run finished");
        let ended = outcome.clone();
        (c.report)(AgentMessage::Finished {
            id,
            outcome: Box::new(outcome),
        });
        if let (true, Some(cx)) = (ask, &git) {
            let asked = git_commands::ask(cx, &ended, &c.outbox);
            let _ = jobs::caught(jobs::Kind::AgentRun, asked).await;
        }
    });
}

/// Creates the run's `$/progress` token when the client takes progress, and begins it.
async fn begin_progress(c: &Connection, id: &str, goal: &str) -> Option<ProgressToken> {
    let token = ProgressToken::String(format!("agent-ls/run/{id}"));
    let created = c.progress
        && c.outbox
            .request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
                token: token.clone(),
            })
            .await
            .is_ok();
    if !created {
        return None;
    }
    c.outbox.progress(
        token.clone(),
        WorkDoneProgress::Begin(WorkDoneProgressBegin {
            title: "agent-ls".into(),
            message: Some(agent_ls_core::agent::one_line(goal)),
            // The client's cancel button sends window/workDoneProgress/cancel.
            cancellable: Some(true),
            ..Default::default()
        }),
    );
    Some(token)
}

/// The run to drive, the approval mode it asks for, and whether it is resumed: a resumed run
/// as it was checkpointed, or a new one for the goal with the chosen agent applied.
fn initial_run(s: &mut StartRun) -> (agent_ls_core::agent::Run, Approval, bool) {
    let mut settings = drive::run_settings(&s.config, &s.goal);
    if s.reproduce {
        drive::reproduce_first(&mut settings);
    }
    let mut approval = s.config.agent.approval;
    if let Some(chosen) = &s.agent {
        chosen.apply(&mut settings);
        approval = chosen.approval.unwrap_or(approval);
    }
    let run = agent_ls_core::agent::Run::new(&s.goal, settings);
    match s.resume.take() {
        Some(checkpoint) => (checkpoint, approval, true),
        None => (run, approval, false),
    }
}

/// The loop itself. The run lock is released as this returns (or unwinds), before the
/// session hears of the end: a client that starts the next run on runFinished must find the
/// workspace free.
async fn drive_run(
    mut s: StartRun,
    progress: Option<ProgressToken>,
    (git, record): (
        &mut Option<git_commands::GitContext>,
        &mut Option<StoreThread>,
    ),
) -> Outcome {
    jobs::injected_panic(jobs::Kind::AgentRun);
    let started = Instant::now();
    // A resumed run goes on where it was; a new one starts where `git.isolation` says.
    let isolated = match s.resume {
        Some(_) => None,
        None => {
            let (root, mode) = (s.connection.root.clone(), s.config.git.isolation);
            match isolation::isolate(root, mode, s.goal.clone()).await {
                Ok(i) => i,
                Err(why) => return ended_early(s.id, why.to_string(), started),
            }
        }
    };
    if let Some(i) = &isolated {
        say_where(&s.connection, progress.as_ref(), &i.describe());
    }
    // A run in a new worktree of its own works there as `agent-ls run --isolated` does: its
    // files, tests, checkpoint, record, lock and commit are the worktree's.
    let mut conn = s.connection.clone();
    let (mut on_disk, mut worktree_lock) = (None, None);
    if let Some(i) = isolated.as_ref().filter(|i| i.new && i.worktree.is_some()) {
        let w = match isolation::WorktreeRun::start(i, &s.config, &s.goal) {
            Ok(w) => w,
            Err(why) => return ended_early(s.id, why.to_string(), started),
        };
        conn.root = w.root;
        s.store = Some(w.store.clone());
        *record = s.store.clone();
        if let Some(cx) = git.as_mut() {
            cx.root = conn.root.clone();
            cx.store = w.store;
        }
        (on_disk, worktree_lock) = (Some(w.on_disk), Some(w.lock));
    }
    let c = &conn;
    // The configuration is the workspace's, and so are the paths in it (a replay file).
    let models = Models::new(&s.config, Some(&s.connection.root));
    let (mut run, approval, resumed) = initial_run(&mut s);
    let mut shell = ServerShell {
        c: c.clone(),
        approval,
        label: label(
            &s.goal,
            isolated
                .as_ref()
                .and_then(|i| i.worktree.as_ref())
                .filter(|_| on_disk.is_some()),
        ),
        snapshot: HashMap::new(),
        decisions: s.decisions,
        cancel: s.cancel.clone(),
        progress,
        limits: s.config.edit.limits(),
        // The session's history is of the checkout's files, which a worktree run leaves alone.
        record: on_disk.is_none().then(|| (s.id.clone(), s.goal.clone())),
        task: String::new(),
        iteration: 0,
        review: Review::default(),
        exact_disk: false,
        on_disk: on_disk.take(),
    };
    let outbox = c.outbox.clone();
    let on_event = move |e: agent_ls_core::events::LiveEvent| {
        outbox.notify::<ext::RunEventNotification>(e.to_wire())
    };
    let driver = Drive {
        models: &models,
        config: &s.config,
        root: &c.root,
        cancel: &s.cancel,
        on_token: None,
        record: s.store.as_ref(),
        events: Some(&on_event),
    };
    let mut outcome = if let Some(target) = s.review.clone() {
        // The change is git's, made off the async threads.
        let root = c.root.clone();
        let started = Instant::now();
        match tokio::task::spawn_blocking(move || drive::review_diff(&root, &target)).await {
            Ok(Ok(change)) => {
                driver
                    .review(&mut run, &mut shell, s.id.clone(), change)
                    .await
            }
            Ok(Err(e)) => ended_early(s.id.clone(), format!("nothing reviewed: {e}"), started),
            Err(e) => ended_early(s.id.clone(), format!("nothing reviewed: {e}"), started),
        }
    } else if resumed {
        driver.resume(&mut run, &mut shell, s.id.clone()).await
    } else {
        driver.run(&mut run, &mut shell, s.id.clone()).await
    };
    // The user decides on the reviewed change while the workspace is still the run's.
    if s.review.is_none() {
        settle_review(&mut shell, &run, &mut outcome, s.store.as_ref()).await;
    }
    drop((s.lock, worktree_lock));
    if let Some(i) = isolated {
        outcome.branch = Some(i.branch);
        outcome.worktree = i.worktree.map(|w| w.display().to_string());
    }
    outcome
}

/// The review question at a run's end (`review_decision`): for a run of the editor's buffers
/// whose review has something to say, unless its changes apply without asking. "Roll back
/// run" goes through `rollback::roll_back_ended_run`; the session then marks the run's steps
/// undone as after `agent-ls.rollback`. The decision goes into the outcome (runFinished), the
/// journal and the run view.
async fn settle_review(
    shell: &mut ServerShell,
    run: &Run,
    outcome: &mut Outcome,
    store: Option<&StoreThread>,
) {
    use agent_ls_core::agent::review::Decision;
    if shell.approval == Approval::Auto || shell.on_disk.is_some() || shell.cancel.is_cancelled() {
        return;
    }
    let Some(question) = review_decision::question(&shell.label, outcome) else {
        return;
    };
    shell.progress("waiting for your decision on the review");
    if let Some(review) = &outcome.review {
        let (reply, published) = oneshot::channel();
        (shell.c.report)(AgentMessage::Reviewed {
            review: Box::new(review.clone()),
            reply,
        });
        let _ = published.await;
    }
    let full = review_decision::full_review(outcome);
    let (outbox, cancel) = (shell.c.outbox.clone(), shell.cancel.clone());
    let mut decision =
        review_decision::ask(&outbox, &mut shell.decisions, &cancel, &question, &full).await;
    if decision == Decision::RolledBack {
        // The rollback reads the run's record: what the run sent the store is written first.
        if let Some(store) = store {
            store.call(|_| ()).await;
        }
        let snapshot = shell.take_snapshot().await;
        let which = (outcome.run_id.as_str(), outcome.checkpoint.is_some());
        let c = &shell.c;
        match rollback::roll_back_ended_run(c, snapshot, shell.limits, which, run.originals()).await
        {
            Ok(changed) => (c.report)(AgentMessage::RollbackFinished {
                run_id: Some(outcome.run_id.clone()),
                rolled_back: true,
                changed,
            }),
            Err(why) => {
                c.outbox.show_message(
                    MessageType::WARNING,
                    format!(
                        "agent-ls: run {} was not rolled back ({why}); its change stays",
                        outcome.run_id
                    ),
                );
                decision = Decision::Kept;
            }
        }
    }
    outcome.decision = Some(decision);
    let event = agent_ls_core::events::RunEvent::Decision { decision };
    shell.c.outbox.notify::<ext::RunEventNotification>(
        agent_ls_core::events::LiveEvent {
            run_id: outcome.run_id.clone(),
            iteration: run.iterations(),
            event: event.clone(),
        }
        .to_wire(),
    );
    // The run's journal gets the decision after its `finished` line (a run without a journal
    // gets none).
    if store.is_some() {
        let (root, id) = (shell.c.root.clone(), outcome.run_id.clone());
        let _ = tokio::task::spawn_blocking(move || {
            if agent_ls_runtime::journal::path_of(&root, &id).is_some() {
                agent_ls_runtime::journal::Journal::append(&root, &id).record(&event);
            }
        })
        .await;
    }
}

/// What the run's questions and edits are labelled with: the goal, and for a run in a
/// worktree of its own the folder its changes are written in (not the editor's buffers).
fn label(goal: &str, worktree: Option<&PathBuf>) -> String {
    let goal = agent_ls_core::agent::one_line(goal);
    match worktree {
        Some(w) => format!("agent-ls: {goal} (in the worktree {})", w.display()),
        None => format!("agent-ls: {goal}"),
    }
}

/// Says where an isolated run works: in the run's progress, and in the log (which a client
/// without progress shows as the run's log too).
fn say_where(c: &Connection, progress: Option<&ProgressToken>, where_: &str) {
    let text = format!("agent-ls: {where_}");
    if let Some(token) = progress {
        c.outbox.progress(
            token.clone(),
            WorkDoneProgress::Report(WorkDoneProgressReport {
                message: Some(where_.to_string()),
                ..Default::default()
            }),
        );
    }
    c.outbox.log_message(MessageType::INFO, text);
}

/// The outcome of a run that ends without the loop's own: refused before its first step (so
/// nothing was written), or panicked. Failed, with `why` as its answer, which the session shows.
fn ended_early(run_id: String, why: String, started: Instant) -> Outcome {
    Outcome {
        run_id,
        status: RunStatus::Failed,
        answer: why,
        iterations: 0,
        files_changed: Vec::new(),
        tests: Default::default(),
        tokens: 0,
        duration_ms: started.elapsed().as_millis() as u64,
        cost_usd: None,
        checkpoint: None,
        commit: None,
        branch: None,
        worktree: None,
        failure_kind: None,
        review: None,
        tester: None,
        decision: None,
    }
}

/// What an undo or redo needs: the step, which way, and the documents as the session had them.
pub struct UndoStart {
    pub step: Step,
    pub redo: bool,
    pub snapshot: Snapshot,
    pub connection: Connection,
    pub limits: edit::Limits,
    /// The command's answer: the step's id once its reversal is computed, or why not.
    pub reply: oneshot::Sender<Result<u64, Refused>>,
    pub lock: RunLock,
}

/// Computes and applies an undo or redo through workspace/applyEdit like any agent edit (so
/// the editor's own undo sees it), on a task of its own: the files not open in the editor
/// are read here, never on the session's task. It runs under the panic guard: the command
/// and the session hear of its end whatever happens.
pub fn spawn_undo(u: UndoStart) {
    let UndoStart {
        step,
        redo,
        snapshot,
        connection,
        limits,
        reply,
        lock,
    } = u;
    tokio::spawn(async move {
        let (step_id, goal, report) = (step.id, step.goal.clone(), connection.report.clone());
        let mut reply = Some(reply);
        let job = UndoJob {
            step,
            redo,
            snapshot,
            c: connection,
            limits,
            lock,
        };
        let result = match jobs::caught(jobs::Kind::Undo, undo(job, &mut reply)).await {
            Ok(result) => result,
            Err(why) => Err(UndoFailed::Apply(why)),
        };
        // Not answered yet: the reversal could not be computed, or the job panicked first.
        if let Some(reply) = reply.take() {
            let _ = reply.send(match &result {
                Ok(()) => Ok(step_id),
                Err(UndoFailed::Reversal(why)) => Err(Refused::Reversal(why.clone())),
                Err(UndoFailed::Apply(why)) => Err(Refused::Failed(why.clone())),
            });
        }
        report(AgentMessage::UndoFinished {
            step: step_id,
            redo,
            goal,
            result,
        });
    });
}

/// An undo's parts once the command's reply is taken out.
struct UndoJob {
    step: Step,
    redo: bool,
    snapshot: Snapshot,
    c: Connection,
    limits: edit::Limits,
    lock: RunLock,
}

/// The undo itself; `reply` is answered as soon as the reversal is computed. The lock is
/// released as this returns (or unwinds).
async fn undo(
    u: UndoJob,
    reply: &mut Option<oneshot::Sender<Result<u64, Refused>>>,
) -> Result<(), UndoFailed> {
    jobs::injected_panic(jobs::Kind::Undo);
    let c = u.c;
    let step_id = u.step.id;
    let current = |rel: &str| match u.snapshot.get(rel) {
        Some((_, b)) => Some(b.text()),
        None => std::fs::read_to_string(c.root.join(rel)).ok(),
    };
    let reversal = if u.redo {
        edit::history::reapply(&u.step, current, &u.limits).map(|changes| Reversal {
            changes,
            deletes: Vec::new(),
        })
    } else {
        edit::history::revert(&u.step, current, &u.limits)
    };
    let reversal = reversal.map_err(|e| UndoFailed::Reversal(e.to_string()))?;
    if let Some(reply) = reply.take() {
        let _ = reply.send(Ok(step_id));
    }
    let mut shell = ServerShell {
        c: c.clone(),
        approval: Approval::Auto,
        label: format!(
            "agent-ls: {} step {step_id}",
            if u.redo { "redo" } else { "undo" }
        ),
        snapshot: u.snapshot,
        decisions: mpsc::unbounded_channel().1,
        cancel: CancellationToken::new(),
        progress: None,
        limits: u.limits,
        record: None,
        task: String::new(),
        iteration: 0,
        review: Review::default(),
        exact_disk: false,
        on_disk: None,
    };
    let mut result = if reversal.changes.is_empty() {
        Ok(())
    } else {
        shell.apply(&reversal.changes).await
    };
    if result.is_ok() {
        result = delete_files(&c, &reversal.deletes).await;
    }
    drop(u.lock);
    result.map_err(|(ApplyError::Stale(e) | ApplyError::Failed(e))| UndoFailed::Apply(e))
}

/// Applies changes that restore known texts (a rollback) through workspace/applyEdit like an
/// undo, without asking, then writes exactly their texts to the disk the editor did not save.
pub(super) async fn apply_restore(
    c: &Connection,
    snapshot: Snapshot,
    limits: edit::Limits,
    label: String,
    changes: &[FileChange],
) -> Result<(), ApplyError> {
    if changes.is_empty() {
        return Ok(());
    }
    let mut shell = ServerShell {
        c: c.clone(),
        approval: Approval::Auto,
        label,
        snapshot,
        decisions: mpsc::unbounded_channel().1,
        cancel: CancellationToken::new(),
        progress: None,
        limits,
        record: None,
        task: String::new(),
        iteration: 0,
        review: Review::default(),
        exact_disk: true,
        on_disk: None,
    };
    shell.apply(changes).await
}

/// Deletes files an undone step created: through workspace/applyEdit when the client can
/// delete (so an open editor closes), then on disk if the file is still there.
pub(super) async fn delete_files(c: &Connection, paths: &[String]) -> Result<(), ApplyError> {
    use tower_lsp_server::ls_types::{
        DeleteFile, DeleteFileOptions, DocumentChangeOperation, DocumentChanges, ResourceOp,
    };
    if paths.is_empty() {
        return Ok(());
    }
    if c.support.delete_files {
        let ops = paths
            .iter()
            .filter_map(|p| Uri::from_file_path(c.root.join(p)))
            .map(|uri| {
                DocumentChangeOperation::Op(ResourceOp::Delete(DeleteFile {
                    uri,
                    options: Some(DeleteFileOptions {
                        recursive: Some(false),
                        ignore_if_not_exists: Some(true),
                    }),
                    annotation_id: None,
                }))
            })
            .collect();
        let edit = WorkspaceEdit {
            document_changes: Some(DocumentChanges::Operations(ops)),
            ..Default::default()
        };
        send_edit(&c.outbox, edit, None).await?;
    }
    for p in paths {
        let path = c.root.join(p);
        if path.exists() {
            std::fs::remove_file(&path)
                .map_err(|e| ApplyError::Failed(format!("cannot delete {p}: {e}")))?;
        }
    }
    Ok(())
}

/// Sends `workspace/applyEdit` and reads the client's answer; `applied: false` is a refusal.
async fn send_edit(
    outbox: &Outbox,
    edit: WorkspaceEdit,
    label: Option<String>,
) -> Result<(), ApplyError> {
    match outbox
        .request::<ApplyWorkspaceEdit>(ApplyWorkspaceEditParams { label, edit })
        .await
    {
        Ok(r) if r.applied => Ok(()),
        Ok(r) => {
            Err(ApplyError::Failed(r.failure_reason.unwrap_or_else(|| {
                "the change was rejected in the editor".into()
            })))
        }
        Err(e) => Err(ApplyError::Failed(format!(
            "the editor did not answer workspace/applyEdit: {e}"
        ))),
    }
}

struct ServerShell {
    c: Connection,
    approval: Approval,
    label: String,
    /// The open documents of the workspace, as of the last refresh.
    snapshot: Snapshot,
    decisions: mpsc::UnboundedReceiver<bool>,
    cancel: CancellationToken,
    /// The run's `$/progress` token, when the client takes progress.
    progress: Option<ProgressToken>,
    limits: edit::Limits,
    /// The plan's task the change being applied works on, for the history.
    task: String,
    iteration: u32,
    /// The run and goal an applied change is recorded under in the history; `None` for an
    /// undo or redo, which moves an existing step instead.
    record: Option<(String, String)>,
    /// The review of the change being applied, for the preview's labels.
    review: Review,
    /// The disk gets exactly each change's new text, whatever it holds now (a rollback, which
    /// restores known contents; forced, it overwrites the user's changes on purpose).
    exact_disk: bool,
    /// A run in a worktree of its own: it reads and writes that worktree's disk and runs its
    /// tests there, since no editor buffer is its.
    on_disk: Option<isolation::OnDisk>,
}

impl ServerShell {
    async fn take_snapshot(&self) -> Snapshot {
        // The editor's buffers are the checkout's, not the worktree's.
        if self.on_disk.is_some() {
            return Snapshot::new();
        }
        let (reply, answer) = oneshot::channel();
        (self.c.report)(AgentMessage::Snapshot { reply });
        answer.await.unwrap_or_default()
    }

    fn current_text(&self, rel: &str) -> Option<String> {
        match self.read(rel) {
            FileText::Text(t) => Some(t),
            _ => None,
        }
    }

    /// Asks with window/showMessageRequest, or takes an agent-ls.accept/reject command,
    /// whichever comes first. No timeout: the user may take their time.
    async fn ask(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> bool {
        let files: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        let mut flagged = if review.findings.is_empty() {
            String::new()
        } else {
            format!(
                " The static scan flagged: {}.",
                review.findings_joined("; ")
            )
        };
        // A change the review gate sent back: the findings it is to fix, one a line.
        if !review.fixes.is_empty() {
            flagged.push_str(&format!(
                " It is meant to fix the reviewer's findings:\n{}",
                review.fixes_joined("\n")
            ));
        }
        loop {
            let request = self.c.outbox.ask(
                MessageType::INFO,
                format!(
                    "{}: apply the proposed change to {}?{flagged}",
                    self.label,
                    files.join(", ")
                ),
                &["Accept", "Reject", "Show diff"],
            );
            let answer = tokio::select! {
                r = request => r,
                d = self.decisions.recv() => d.map(|yes| if yes { "Accept".to_string() } else { "Reject".to_string() }),
                _ = self.cancel.cancelled() => None,
            };
            match answer.as_deref() {
                Some("Accept") => return true,
                Some("Show diff") => self.c.outbox.show_message(MessageType::INFO, diff),
                _ => return false,
            }
        }
    }

    /// Asks whether the change may write one protected file, with a button that names it;
    /// agent-ls.reject (or a cancel) refuses.
    async fn allow_protected(&mut self, path: &str, why: &str) -> bool {
        let allow = format!("Allow {path}");
        let request = self.c.outbox.ask(
            MessageType::WARNING,
            format!(
                "{}: the change writes {path}, which is protected: {why}. Allow the agent to write it?",
                self.label
            ),
            &[&allow, "Refuse"],
        );
        tokio::select! {
            r = request => r.is_some_and(|title| title == allow),
            // agent-ls.accept does not name the file, so it allows nothing here.
            _ = self.decisions.recv() => false,
            _ = self.cancel.cancelled() => false,
        }
    }

    /// Waits until the editor's buffers hold the new text (the `didChange` after an applied
    /// edit can come after the reply), for at most 5 seconds.
    async fn confirm_applied(&mut self, changes: &[FileChange]) -> Result<(), NotHeld> {
        // The documents open now, which includes those the editor opened as it applied the
        // edit (Neovim loads a buffer for a file it creates or edits, and reports its text
        // only after a debounce): each must come to hold its change.
        self.snapshot = self.take_snapshot().await;
        let want: Vec<(Uri, String)> = changes
            .iter()
            .filter_map(|c| {
                // A file not open in the editor: it applied the edit to a buffer it did not
                // report to us, or to the file; the disk check settles it.
                let (uri, _) = self.snapshot.get(&c.path)?;
                Some((uri.clone(), c.new_text.clone()))
            })
            .collect();
        if !want.is_empty() {
            let (reply, answer) = oneshot::channel();
            (self.c.report)(AgentMessage::AwaitTexts { want, reply });
            let landed = tokio::time::timeout(Duration::from_secs(5), answer).await;
            self.snapshot = self.take_snapshot().await;
            if !matches!(landed, Ok(Ok(()))) {
                let pending = changes
                    .iter()
                    .filter(|c| {
                        self.snapshot
                            .get(&c.path)
                            .is_some_and(|(_, b)| b.text() != c.new_text)
                    })
                    .map(|c| c.path.clone())
                    .collect();
                return Err(NotHeld(pending));
            }
        }
        Ok(())
    }

    /// Asks an editor that can (`agent-ls/saveFiles`) to save the documents the step wrote,
    /// so its buffers and the disk agree with no conflict; returns the paths it saved. A
    /// document that held unsaved typing of the user's is saved with it, and the user is told.
    async fn save_in_editor(&mut self, changes: &[FileChange]) -> Vec<String> {
        if !self.c.support.save_files || changes.is_empty() {
            return Vec::new();
        }
        let mut files = Vec::new();
        let mut with_typing = Vec::new();
        for c in changes {
            let Ok(uri) = workspace_edit::file_uri(&self.c.root, &c.path) else {
                continue;
            };
            let (uri, version) = match self.snapshot.get(&c.path) {
                Some((uri, b)) => (uri.clone(), Some(b.version())),
                None => (uri, None),
            };
            // The buffer held text the disk did not: the user's unsaved typing.
            if let (FileText::Text(disk), Some(original)) =
                (files::read_for_plan(&self.c.root, &c.path), &c.original)
                && disk != *original
            {
                with_typing.push(c.path.clone());
            }
            files.push(ext::FileToSave { uri, version });
        }
        let asked = self
            .c
            .outbox
            .request::<ext::SaveFiles>(ext::SaveFilesParams { files });
        let saved = match tokio::time::timeout(Duration::from_secs(10), asked).await {
            Ok(Ok(r)) => r.saved,
            Ok(Err(e)) => {
                warn!("the editor did not save the agent's files: {e}");
                return Vec::new();
            }
            Err(_) => {
                warn!("the editor did not answer agent-ls/saveFiles within 10 s");
                return Vec::new();
            }
        };
        let saved: Vec<String> = changes
            .iter()
            .filter(|c| {
                workspace_edit::file_uri(&self.c.root, &c.path)
                    .is_ok_and(|u| saved.iter().any(|s| same_file(s, &u)))
            })
            .map(|c| c.path.clone())
            .collect();
        let told: Vec<&String> = with_typing.iter().filter(|p| saved.contains(p)).collect();
        if !told.is_empty() {
            self.c.outbox.show_message(
                MessageType::INFO,
                format!(
                    "agent-ls saved {} with your unsaved changes in it, so the tests run on what you see",
                    told.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", ")
                ),
            );
        }
        saved
    }

    /// For a client without `agent-ls/saveFiles`: writes the change to the files the server
    /// already wrote under the editor's buffer before the edit is sent (see `WrittenUnder`).
    /// Returns the writes that put the disk back, for an edit that does not land.
    fn write_early(&self, changes: &[FileChange]) -> Result<Vec<FileChange>, ApplyError> {
        if self.c.support.save_files {
            return Ok(Vec::new());
        }
        let early: Vec<FileChange> = changes
            .iter()
            .filter(|c| {
                self.snapshot
                    .get(&c.path)
                    .is_some_and(|(uri, _)| self.c.written_under.contains(uri))
            })
            .cloned()
            .collect();
        let mut restore = Vec::new();
        for c in &early {
            if let FileText::Text(disk) = files::read_for_plan(&self.c.root, &c.path) {
                restore.push(FileChange {
                    path: c.path.clone(),
                    original: Some(c.new_text.clone()),
                    new_text: disk,
                    edits: Vec::new(),
                    inverse: Vec::new(),
                });
            }
        }
        self.sync_disk(&early)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        Ok(restore)
    }

    /// Tests run on the disk, which holds neither the editor's edit (editors do not save) nor,
    /// in a buffer with unsaved work, that work. The agent's change alone is written: the new
    /// text where the disk matched the buffer, else the change re-located onto the disk's text,
    /// so the user's unsaved typing is never saved behind their back. A new file the editor
    /// created as it applied the edit (empty, or already holding the text) is the step's.
    fn sync_disk(&self, changes: &[FileChange]) -> Result<(), DiskSync> {
        let mut writes = Vec::new();
        for c in changes {
            let disk = match files::read_for_plan(&self.c.root, &c.path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                FileText::Refused(why) => return Err(DiskSync::Refused(why)),
            };
            match (&disk, &c.original) {
                _ if self.exact_disk => writes.push(c.clone()),
                (None, None) => writes.push(c.clone()),
                (Some(d), None) if *d == c.new_text => {}
                (Some(d), None) if d.is_empty() => writes.push(c.clone()),
                (Some(d), Some(o)) if d == o => writes.push(c.clone()),
                (Some(d), Some(_)) if *d == c.new_text => {}
                (Some(d), Some(_)) => match edit::relocate(c, d, &self.limits) {
                    Some(moved) => writes.push(moved),
                    None => return Err(DiskSync::UnsavedAround(c.path.clone())),
                },
                (None, Some(_)) | (Some(_), None) => {
                    return Err(DiskSync::CreatedOrDeleted(c.path.clone()));
                }
            }
        }
        files::write_changes(&self.c.root, &writes)?;
        // An editor that cannot save on request now holds a buffer whose file changed behind
        // it; the next edit to it is written first.
        if !self.c.support.save_files {
            for w in &writes {
                if let Some((uri, _)) = self.snapshot.get(&w.path) {
                    self.c.written_under.mark(uri);
                }
            }
        }
        Ok(())
    }
}

/// Whether two file URIs name the same file (clients differ in how they escape a path).
fn same_file(a: &Uri, b: &Uri) -> bool {
    a == b
        || matches!(
            (super::convert::path_from_uri(a), super::convert::path_from_uri(b)),
            (Some(x), Some(y)) if x == y
        )
}

impl Shell for ServerShell {
    fn read(&self, relative: &str) -> FileText {
        match self.snapshot.get(relative) {
            Some((_, b)) if b.needs_resync() => FileText::Refused(format!(
                "{relative} is out of sync with the editor; close and reopen it"
            )),
            Some((_, b)) => FileText::Text(b.text()),
            None => files::read_for_plan(&self.c.root, relative),
        }
    }

    async fn refresh(&mut self) {
        self.snapshot = self.take_snapshot().await;
    }

    async fn approve(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> Verdict {
        self.review = review.clone();
        // A protected file is allowed only by a button that names it, whatever the mode.
        for (path, why) in &review.protected {
            if !self.allow_protected(path, why).await {
                return Verdict::Refused(format!(
                    "the user did not allow writing the protected file {path} ({why}); leave it alone"
                ));
            }
        }
        let yes = match self.approval {
            // Applying without asking stops at a risky construct: it becomes a question.
            Approval::Auto if review.findings.is_empty() => true,
            // The editor asks when it applies the annotated edit (VS Code's preview, whose
            // labels carry the review).
            // A worktree run's change is written on disk, with no preview: it is asked here.
            Approval::Confirm if self.c.support.change_annotations && self.on_disk.is_none() => {
                true
            }
            _ => self.ask(changes, diff, review).await,
        };
        if yes {
            Verdict::Approved
        } else {
            Verdict::Rejected
        }
    }

    /// Always asked, whatever the approval mode: the install runs a command, outside the
    /// sandbox, which no change preview shows.
    async fn approve_install(&mut self, library: &str, argv: &[String]) -> bool {
        let request = self.c.outbox.ask(
            MessageType::INFO,
            format!(
                "{}: the tester's property test needs {library}. Install it as a dev dependency (`{}`)?",
                self.label,
                argv.join(" ")
            ),
            &["Install", "Don't install"],
        );
        tokio::select! {
            r = request => r.is_some_and(|title| title == "Install"),
            // agent-ls.accept answers a change's question, not this one (and may be one the
            // user gave before this was asked): it approves no install.
            _ = self.decisions.recv() => false,
            _ = self.cancel.cancelled() => false,
        }
    }

    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        if let Some(disk) = &self.on_disk {
            return disk.write(&self.c.root, changes, &self.limits);
        }
        // Never send an edit against a buffer older than the one it was computed for: if the
        // user typed meanwhile, move the change onto the new text, or redo the step.
        self.snapshot = self.take_snapshot().await;
        let current = edit::rebase(changes, |p| self.current_text(p), &self.limits)
            .map_err(|e| ApplyError::Stale(e.to_string()))?;
        let targets: HashMap<String, Target> = current
            .iter()
            .filter_map(|c| {
                let (uri, b) = self.snapshot.get(&c.path)?;
                Some((
                    c.path.clone(),
                    Target {
                        uri: uri.clone(),
                        version: Some(b.version()),
                    },
                ))
            })
            .collect();
        let support = EditSupport {
            change_annotations: self.c.support.change_annotations
                && self.approval == Approval::Confirm,
            ..self.c.support
        };
        let review = std::mem::take(&mut self.review);
        let edit = workspace_edit::to_workspace_edit(
            &current,
            &targets,
            &self.c.root,
            self.c.encoding,
            support,
            &self.label,
            &|path| review.note_for(path),
        )
        .map_err(|e| ApplyError::Failed(e.to_string()))?;
        let early = self.write_early(&current)?;
        let sent = send_edit(&self.c.outbox, edit, Some(self.label.clone())).await;
        if sent.is_err() && early.is_empty() {
            return sent;
        }
        let held = self.confirm_applied(&current).await;
        // An edit the editor refused but whose text the buffer holds anyway: it re-read the
        // file written first (Emacs, answered "yes" to "changed on disk"), at a new version.
        if held.is_err() {
            // The disk goes back to what it held; the error below says why.
            let _ = files::write_changes(&self.c.root, &early);
            sent?;
        }
        if let Err(why) = held {
            // A buffer that moved past the version the edit was sent for means the user typed
            // while the edit was in flight, and the editor refused the stale edit: redo the
            // step on the fresh text rather than calling it a rejection.
            let typed = current.iter().any(|c| {
                let sent = targets.get(&c.path).and_then(|t| t.version);
                let now = self.snapshot.get(&c.path).map(|(_, b)| b.version());
                matches!((sent, now), (Some(s), Some(n)) if n > s)
            });
            return Err(if typed {
                ApplyError::Stale(format!("{why} while the edit was sent"))
            } else {
                ApplyError::Failed(why.to_string())
            });
        }
        // The editor saves what it can; the disk is brought in step for the rest.
        let saved = self.save_in_editor(&current).await;
        // Files written before the edit already hold it (re-located around unsaved typing).
        let unsaved: Vec<FileChange> = current
            .iter()
            .filter(|c| !saved.contains(&c.path) && !early.iter().any(|e| e.path == c.path))
            .cloned()
            .collect();
        self.sync_disk(&unsaved)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        if let Some((run_id, goal)) = &self.record {
            let files = Step::files_after(&current, |path| {
                self.snapshot.get(path).map(|(_, b)| b.version())
            });
            (self.c.report)(AgentMessage::StepApplied {
                run_id: run_id.clone(),
                goal: goal.clone(),
                task: self.task.clone(),
                iteration: self.iteration,
                changes: current,
                files,
            });
        }
        Ok(())
    }

    fn buffers(&self) -> Vec<(String, FileText)> {
        self.snapshot
            .keys()
            .map(|rel| (rel.clone(), self.read(rel)))
            .collect()
    }

    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        if let Some(disk) = &self.on_disk {
            return disk.run_tests(&self.c.root, cancel, command).await;
        }
        let (reply, answer) = oneshot::channel();
        (self.c.report)(AgentMessage::RunTests { reply, command });
        // The run's own cancel reaches the test run through agent-ls.cancel, which cancels
        // both; a cancel that only ends the run stops waiting here.
        tokio::select! {
            r = answer => r.unwrap_or(Err(RunError::Superseded)),
            _ = cancel.cancelled() => Err(RunError::Superseded),
        }
    }

    fn progress(&mut self, message: &str) {
        info!("agent: {message}");
        match &self.progress {
            Some(token) => self.c.outbox.progress(
                token.clone(),
                WorkDoneProgress::Report(WorkDoneProgressReport {
                    message: Some(message.to_string()),
                    ..Default::default()
                }),
            ),
            // A client without workDoneProgress follows the run in its log instead.
            None => self
                .c
                .outbox
                .log_message(MessageType::INFO, format!("agent-ls: {message}")),
        }
    }

    fn warn(&mut self, message: &str) {
        warn!("agent: {message}");
        self.c
            .outbox
            .show_message(MessageType::WARNING, format!("agent-ls: {message}"));
    }

    fn task(&mut self, task: &str, iteration: u32) {
        self.task = task.to_string();
        self.iteration = iteration;
    }
}

/// Builds the goal of a run from a command's arguments: a selection adds its text.
pub fn goal_with_selection(
    args: &RunArgs,
    documents: &HashMap<Uri, Buffer>,
    root: &Path,
    encoding: Encoding,
) -> String {
    let (Some(uri), Some(range)) = (&args.uri, &args.range) else {
        return args.goal.clone();
    };
    let Some(buffer) = documents.get(uri) else {
        return args.goal.clone();
    };
    let rope = buffer.rope();
    let at = |p: tower_lsp_server::ls_types::Position| {
        agent_ls_core::text::to_char_index(&rope, super::convert::position_from_lsp(p), encoding)
            .ok()
    };
    let (Some(start), Some(end)) = (at(range.start), at(range.end)) else {
        return args.goal.clone();
    };
    let path = super::convert::path_from_uri(uri)
        .and_then(|p| {
            p.strip_prefix(root)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| uri.as_str().to_string());
    let selected: String = rope.slice(start.min(end)..end.max(start)).into();
    format!(
        "{}\n\nThe selection is in {path}, lines {}-{}:\n```\n{selected}\n```",
        args.goal,
        range.start.line + 1,
        range.end.line + 1
    )
}
