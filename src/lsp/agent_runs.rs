//! Agent runs inside the server: a run starts where `git.isolation` says, drives the
//! runtime's loop through the editor shell (`shell.rs`), asks the review question at its end,
//! and commits when `git.commit` says; its progress goes to the client.
//!
//! A run is a task of its own. It reports to the session only through `AgentMessage` (it
//! never sees the session), asks the session's one owner of test runs for its tests, and
//! sends everything for the client through the outbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::notification::Notification;
use tower_lsp_server::ls_types::request::WorkDoneProgressCreate;
use tower_lsp_server::ls_types::{
    MessageType, ProgressToken, Uri, WorkDoneProgress, WorkDoneProgressBegin,
    WorkDoneProgressCreateParams, WorkDoneProgressEnd, WorkDoneProgressReport,
};
use tracing::info;

use super::connection::{AgentMessage, Connection};
use super::convert;
use super::ext;
use super::git_commands;
use super::held;
use super::isolation;
use super::jobs;
use super::review_decision;
use super::rollback;
use super::shell::{self, ServerShell};
use agent_ls_core::agent::{Run, RunStatus};
use agent_ls_core::text::{Buffer, Encoding};
use agent_ls_runtime::config::{Approval, MemoryConfig};
use agent_ls_runtime::drive::{self, Outcome, Shell};
use agent_ls_runtime::git::isolate::Isolated;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::{self, Begin};
use agent_ls_runtime::store::StoreThread;

/// Notification `agent-ls/runFinished`.
pub enum RunFinished {}

impl Notification for RunFinished {
    type Params = Outcome;
    const METHOD: &'static str = ext::RUN_FINISHED;
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

/// Everything a run needs, taken from the session when it starts.
pub struct StartRun {
    pub id: String,
    /// The run as the runtime set it up (its configuration, settings, policy, how it begins).
    pub prepared: runs::Prepared,
    pub connection: Connection,
    pub store: Option<StoreThread>,
    pub cancel: CancellationToken,
    /// agent-ls.accept / agent-ls.reject while a question waits.
    pub decisions: mpsc::UnboundedReceiver<bool>,
    pub lock: RunLock,
    pub git: Option<git_commands::GitContext>,
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
            s.prepared.run.goal().to_string(),
            s.connection.clone(),
            s.store.clone(),
        );
        let mut git = s.git.take();
        let progress = begin_progress(&c, &id, &goal).await;
        let driving = drive_run(s, progress.clone(), (&mut git, &mut store));
        let mut outcome = match jobs::caught(jobs::Kind::AgentRun, driving).await {
            Ok(outcome) => outcome,
            Err(panicked) => {
                let why = panicked.to_string();
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
        match (ask, &git) {
            // eglot alone asks every question in the minibuffer, where RET takes the first
            // choice: the commit offer is a notice there, not a third question of a fix.
            (true, Some(_)) if c.support.confirms_edits => c
                .outbox
                .show_message(MessageType::INFO, git_commands::offer(&ended)),
            (true, Some(cx)) => {
                let asked = git_commands::ask(cx, &ended, &c.outbox);
                let _ = jobs::caught(jobs::Kind::AgentRun, asked).await;
            }
            _ => {}
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
    let place = match place(&mut s, progress.as_ref(), (git, record)).await {
        Ok(place) => place,
        Err(why) => return ended_early(s.id, why.to_string(), started),
    };
    let goal = s.prepared.run.goal().to_string();
    let worktree = place.isolated.as_ref().and_then(|i| i.worktree.as_ref());
    let (on_disk, worktree_lock) = place.worktree.unzip();
    let label = label(&goal, worktree.filter(|_| on_disk.is_some()));
    let review = matches!(s.prepared.begin, Begin::Review(_));
    let limits = s.prepared.config.edit.limits();
    let mut shell = ServerShell {
        approval: s.prepared.policy.approval,
        decisions: std::mem::replace(&mut s.decisions, mpsc::unbounded_channel().1),
        cancel: s.cancel.clone(),
        progress,
        // The session's history is of the checkout's files, which a worktree run leaves alone.
        record: on_disk.is_none().then(|| (s.id.clone(), goal.clone())),
        on_disk,
        ..ServerShell::new(place.connection, label, limits)
    };
    if !review && held::Held::applies(shell.c.support, shell.on_disk.is_some()) {
        shell.held = Some(held::Held::default());
    }
    let job = (
        s.id.as_str(),
        &s.cancel,
        s.store.as_ref(),
        s.connection.root.as_path(),
    );
    let memory = s.prepared.config.memory.clone();
    let (run, mut outcome) = drive(s.prepared, job, &mut shell).await;
    // The user decides on the reviewed change while the workspace is still the run's; a held
    // run's one edit is that decision.
    if shell.held.is_some() {
        settle_held(&mut shell, &run, &mut outcome, s.store.as_ref()).await;
    } else if !review {
        let store = s.store.as_ref();
        settle_review(&mut shell, &run, &mut outcome, (store, memory)).await;
    }
    drop((s.lock, worktree_lock));
    if let Some(i) = place.isolated {
        outcome.branch = Some(i.branch);
        outcome.worktree = i.worktree.map(|w| w.display().to_string());
    }
    outcome
}

/// Where a run works, once `git.isolation` is worked out.
struct Place {
    /// The branch or worktree the run was isolated in, if any.
    isolated: Option<Isolated>,
    /// The connection the run works through: the session's, with a new worktree's folder.
    connection: Connection,
    /// A run in a new worktree of its own: its disk, and its own run lock, held until the
    /// run ends.
    worktree: Option<(agent_ls_runtime::runs::disk::OnDisk, RunLock)>,
}

/// Works out where the run works: a resumed run goes on where it was; a new one starts where
/// `git.isolation` says. A run in a new worktree of its own works there as `agent-ls run
/// --isolated` does: its files, tests, checkpoint, record (`record`, and `s.store`), lock and
/// commit (`git`) are the worktree's.
async fn place(
    s: &mut StartRun,
    progress: Option<&ProgressToken>,
    (git, record): (
        &mut Option<git_commands::GitContext>,
        &mut Option<StoreThread>,
    ),
) -> Result<Place, isolation::NotIsolated> {
    let mut place = Place {
        isolated: None,
        connection: s.connection.clone(),
        worktree: None,
    };
    let goal = s.prepared.run.goal().to_string();
    // Where it works is the runtime's rule (`runs::isolation`): a resumed run stays put.
    let (root, mode) = (s.connection.root.clone(), s.prepared.isolation);
    place.isolated = isolation::isolate(root, mode, goal.clone()).await?;
    let Some(i) = &place.isolated else {
        return Ok(place);
    };
    say_where(&s.connection, progress, &i.describe());
    if !i.new || i.worktree.is_none() {
        return Ok(place);
    }
    let w = isolation::WorktreeRun::start(i, &s.prepared.config, (&s.id, &goal))?;
    place.connection.root = w.root;
    s.store = Some(w.store.clone());
    *record = s.store.clone();
    if let Some(cx) = git.as_mut() {
        cx.root = place.connection.root.clone();
        cx.store = w.store;
    }
    place.worktree = Some((w.on_disk, w.lock));
    Ok(place)
}

/// Drives the run through `shell` (the runtime's run: a review, a resumed run or a new one);
/// its live events go to the client as they happen.
async fn drive(
    prepared: runs::Prepared,
    (id, cancel, store, home): (&str, &CancellationToken, Option<&StoreThread>, &Path),
    shell: &mut ServerShell,
) -> (Run, Outcome) {
    let c = shell.c.clone();
    let outbox = c.outbox.clone();
    let on_event = move |e: agent_ls_core::events::LiveEvent| {
        outbox.notify::<ext::RunEventNotification>(e.to_wire())
    };
    let env = runs::Env {
        root: &c.root,
        home,
        cancel,
        run_id: id.to_string(),
        store,
        events: Some(&on_event),
        on_token: None,
    };
    runs::drive(prepared, env, shell).await
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
    (store, memory): (Option<&StoreThread>, MemoryConfig),
) {
    use agent_ls_core::agent::review::Decision;
    if shell.approval == Approval::Auto || shell.on_disk.is_some() || shell.cancel.is_cancelled() {
        return;
    }
    if let Some(notice) = review_decision::unavailable_notice(&shell.label, outcome) {
        shell.c.outbox.show_message(MessageType::WARNING, notice);
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
        if !roll_back_at_review(shell, run, outcome, memory).await {
            decision = Decision::Kept;
        }
    }
    record_decision(shell, run, outcome, decision, store).await;
}

/// The answer to the review question, in the outcome (runFinished), the run view and the
/// run's journal.
async fn record_decision(
    shell: &ServerShell,
    run: &Run,
    outcome: &mut Outcome,
    decision: agent_ls_core::agent::review::Decision,
    store: Option<&StoreThread>,
) {
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

/// "Roll back run" at the review question: whether the run was rolled back (else the user
/// is told why not, and the change stays).
async fn roll_back_at_review(
    shell: &mut ServerShell,
    run: &Run,
    outcome: &Outcome,
    memory: MemoryConfig,
) -> bool {
    let snapshot = shell.take_snapshot().await;
    let which = (outcome.run_id.as_str(), outcome.checkpoint.is_some());
    let c = &shell.c;
    let limits = (shell.limits, memory);
    match rollback::roll_back_ended_run(c, snapshot, limits, which, run.originals()).await {
        Ok(changed) => {
            (c.report)(AgentMessage::RollbackFinished {
                run_id: Some(outcome.run_id.clone()),
                rolled_back: true,
                changed,
            });
            true
        }
        Err(why) => {
            let id = &outcome.run_id;
            c.outbox.show_message(
                MessageType::WARNING,
                format!("agent-ls: run {id} was not rolled back ({why}); its change stays"),
            );
            false
        }
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
        duration_ms: started.elapsed().as_millis() as u64,
        ..agent_ls_runtime::runs::not_started(run_id, why)
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
        agent_ls_core::text::to_char_index(&rope, convert::position_from_lsp(p), encoding).ok()
    };
    let (Some(start), Some(end)) = (at(range.start), at(range.end)) else {
        return args.goal.clone();
    };
    let path = convert::path_from_uri(uri)
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

/// The end of a run whose edits were held: the review's findings are said (the question that
/// follows is the review question's place), then the run's change goes to the editor. A
/// declined change leaves the files as they were, and the outcome says so.
pub(super) async fn settle_held(
    shell: &mut ServerShell,
    run: &Run,
    outcome: &mut Outcome,
    store: Option<&StoreThread>,
) {
    let Some(held) = shell.held.take() else {
        return;
    };
    let asks_review = shell.approval != Approval::Auto && !held.changes().is_empty();
    let question = asks_review
        .then(|| review_decision::question(&shell.label, outcome))
        .flatten();
    if let Some(notice) = review_decision::unavailable_notice(&shell.label, outcome) {
        shell.c.outbox.show_message(MessageType::WARNING, notice);
    }
    if let (Some(question), Some(review)) = (&question, &outcome.review) {
        let (reply, published) = tokio::sync::oneshot::channel();
        (shell.c.report)(AgentMessage::Reviewed {
            review: Box::new(review.clone()),
            reply,
        });
        let _ = published.await;
        shell.c.outbox.show_message(
            MessageType::WARNING,
            format!("{question}\nThe editor asks next whether to apply the run's change: no leaves the files as they were."),
        );
    }
    let kept = match shell.flush_held(held).await {
        Ok(()) => true,
        Err(e) => {
            shell.c.outbox.show_message(
                MessageType::WARNING,
                format!(
                    "{}: the run's change was not applied ({}); the files are as they were before the run",
                    shell.label,
                    shell::apply_failure(e)
                ),
            );
            false
        }
    };
    if !kept {
        outcome.files_changed.clear();
    }
    if question.is_some() {
        use agent_ls_core::agent::review::Decision;
        let decision = if kept {
            Decision::Kept
        } else {
            Decision::RolledBack
        };
        record_decision(shell, run, outcome, decision, store).await;
    }
}
