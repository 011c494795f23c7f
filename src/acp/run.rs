//! One run of the loop for a session: where it works (the folder, or the branch or worktree
//! `git.isolation` asks for), the runtime's run with the ACP shell, and the live view of its
//! events: the plan, the model's prose as thoughts, the tools it calls as tool calls.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    self, Cost, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, SessionUpdate, StopReason,
    ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
    UsageUpdate,
};
use tokio_util::sync::CancellationToken;

use agent_ls_core::agent::RunStatus;
use agent_ls_core::events::{LiveEvent, RunEvent};
use agent_ls_runtime::config::Config;
use agent_ls_runtime::drive;
use agent_ls_runtime::runs::{self, AfterRun, Begin, RunRequest};
use agent_ls_runtime::store::StoreThread;

use super::client::{ClientFs, notify, say, text_chunk};
use super::output;
use super::shell::AcpShell;

/// Where the run of `goal` works: the session's folder, or as `git.isolation` says a new
/// branch there or a new worktree (said in the session). `None` when it cannot start so (a
/// dirty tree on `"branch"`), which is said too.
pub(super) fn isolated_root(
    conn: &ConnectionTo<Client>,
    session: &str,
    root: PathBuf,
    cfg: &Config,
    goal: &str,
) -> Option<PathBuf> {
    // Where a new run works is the runtime's rule, as for every surface.
    let mode = runs::isolation(cfg, &RunRequest::new(goal));
    let (text, root) = match agent_ls_runtime::git::isolate::start(&root, mode, goal) {
        Ok(None) => return Some(root),
        Ok(Some(i)) => (format!("agent-ls: {}\n", i.describe()), Some(i.root)),
        Err(e) => (format!("agent-ls: cannot isolate the run: {e}\n"), None),
    };
    say(conn, session, text);
    root
}

/// What a session asks of one run: its goal, the id it runs under (a resumed run keeps the
/// session's), the agent chosen for it (`None`: the configuration's), and what the session
/// spent before it (the cost its usage updates count from).
pub(super) struct Ask {
    pub goal: String,
    pub run_id: String,
    pub agent: Option<String>,
    pub spent_usd: f64,
}

/// One run of the loop for a session, through the runtime's run; the stop reason for the
/// prompt's answer and what the run spent. `begin` is new, a recorded run's checkpoint
/// (`Begin::Resume`) or a rewound run's conversation (`Begin::Rewound`, `/rewind`). `/test BUG` makes the bug the goal, reproduced with a test
/// first. Its files are committed when it went well as `git.commit` says (unset: offered,
/// `/commit` takes the offer).
pub(super) async fn run(
    (config, trusted): (Config, bool),
    root: PathBuf,
    ask: Ask,
    begin: Begin,
    (session, conn, fs): (String, ConnectionTo<Client>, ClientFs),
    cancel: CancellationToken,
) -> (StopReason, f64) {
    let goal = ask.goal.clone();
    let _lock = match agent_ls_runtime::lock::RunLock::acquire(&root, &goal) {
        Ok(l) => l,
        Err(e) => {
            say(&conn, &session, format!("agent-ls: {e}"));
            return (StopReason::EndTurn, 0.0);
        }
    };
    let run_id = ask.run_id.clone();
    let mut request = RunRequest {
        begin,
        agent: ask.agent.clone(),
        ..RunRequest::new(goal.clone())
    };
    if let Some(bug) = drive::test_command(&goal) {
        request.goal = bug.to_string();
        request.reproduce = true;
    }
    let prepared = match runs::prepare(&config, request) {
        Ok(p) => p,
        Err(e) => {
            say(&conn, &session, format!("agent-ls: {e}"));
            return (StopReason::EndTurn, 0.0);
        }
    };
    let store = StoreThread::open(root.clone(), |_| {});
    let peer = (conn.clone(), session.clone(), fs);
    let mut shell = AcpShell::new(peer, root.clone(), goal.clone(), run_id.clone());
    shell.config = prepared.config.clone();
    let usage = Usage {
        window: prepared.config.model.context_tokens as u64,
        spent_usd: ask.spent_usd,
    };
    let on_event = live_view(conn.clone(), session.clone(), root.clone(), usage);
    let env = runs::Env {
        root: &root,
        home: &root,
        cancel: &cancel,
        run_id,
        store: Some(&store),
        events: Some(&on_event),
        on_token: None,
    };
    let (_, mut outcome) = runs::drive(prepared, env, &mut shell).await;
    let after = runs::after_run(&store, (&root, &config, trusted), &mut outcome, true).await;
    store.flush_blocking();
    say(&conn, &session, outcome.answer.clone());
    tell_after(&conn, &session, after, &outcome.files_changed);
    let stop = if outcome.status == RunStatus::Cancelled {
        StopReason::Cancelled
    } else {
        StopReason::EndTurn
    };
    (stop, outcome.cost_usd.unwrap_or(0.0))
}

/// Says what became of a finished run's files: committed, offered to `/commit`, or not
/// committed and why.
fn tell_after(conn: &ConnectionTo<Client>, session: &str, after: AfterRun, files: &[String]) {
    match after {
        AfterRun::Committed { id, subject } => say(
            conn,
            session,
            format!("agent-ls: committed {}: {subject}", &id[..id.len().min(12)]),
        ),
        AfterRun::Offer => say(
            conn,
            session,
            format!(
                "agent-ls: the run's files ({}) are not committed; /commit commits them",
                files.join(", ")
            ),
        ),
        AfterRun::Failed(why) => say(
            conn,
            session,
            format!("agent-ls: the run's files were not committed: {why}"),
        ),
        AfterRun::Left => {}
    }
}

/// What a run's usage updates count from: the model's window, and the session's spending
/// before the run.
#[derive(Clone, Copy)]
struct Usage {
    window: u64,
    spent_usd: f64,
}

/// ACP's usage update after a model call: the tokens the call's context held (its prompt and
/// answer), the window, and the session's cost so far when `[prices]` prices the model.
fn usage_update(usage: Usage, call: &agent_ls_core::events::ModelCall) -> SessionUpdate {
    let tokens = |key: &str| call.usage[key].as_u64().unwrap_or(0);
    let used = tokens("input_tokens") + tokens("output_tokens");
    let mut update = UsageUpdate::new(used, usage.window);
    if let Some(cost) = call.cost_usd_total {
        update = update.cost(Cost::new(usage.spent_usd + cost, "USD"));
    }
    SessionUpdate::UsageUpdate(update)
}

/// What the client sees of a run's events as they come: the plan, the model's words as
/// prose thoughts (its JSON and its edit blocks are not thoughts), the tools it calls.
fn live_view(
    conn: ConnectionTo<Client>,
    session: String,
    root: PathBuf,
    usage: Usage,
) -> impl Fn(LiveEvent) + Send + Sync {
    let plan = Mutex::new(PlanView::default());
    let thoughts = Mutex::new(output::Thoughts::default());
    move |e: LiveEvent| {
        if let Ok(mut plan) = plan.lock()
            && let Some(entries) = plan.follow(&e.event)
        {
            notify(&conn, &session, SessionUpdate::Plan(Plan::new(entries)));
        }
        let lines = match (&e.event, thoughts.lock()) {
            (RunEvent::Token { role, text }, Ok(mut t)) => t.token(*role, text),
            (other, Ok(mut t)) => {
                let mut lines = t.flush();
                lines.extend(output::sentence(other));
                lines
            }
            _ => Vec::new(),
        };
        for line in lines {
            notify(
                &conn,
                &session,
                SessionUpdate::AgentThoughtChunk(text_chunk(format!("{line}\n"))),
            );
        }
        if let RunEvent::ModelCall(call) = &e.event {
            notify(&conn, &session, usage_update(usage, call));
        }
        event(&conn, &session, &root, &e.event);
    }
}

/// The plan as the client sees it: the planner's tasks, each pending, in progress (the task
/// the current iteration works on) or completed (those before it, and all once the run is
/// done). ACP replaces the whole plan with each update.
#[derive(Default)]
pub(super) struct PlanView {
    tasks: Vec<(String, String)>,
    current: Option<usize>,
    done: bool,
}

impl PlanView {
    /// The plan's entries after `e`, when `e` changed them.
    pub(super) fn follow(&mut self, e: &RunEvent) -> Option<Vec<PlanEntry>> {
        match e {
            RunEvent::Plan { tasks } => {
                self.tasks = tasks
                    .iter()
                    .map(|t| (t.id.clone(), t.title.clone()))
                    .collect();
                self.current = None;
            }
            RunEvent::Iteration { task, .. } => {
                let task = task.as_deref()?;
                let i = self
                    .tasks
                    .iter()
                    .position(|(id, _)| task.split(' ').next() == Some(id.as_str()))?;
                if self.current == Some(i) {
                    return None;
                }
                self.current = Some(i);
            }
            RunEvent::Finished {
                status: RunStatus::Done,
                ..
            } => self.done = true,
            _ => return None,
        }
        if self.tasks.is_empty() {
            return None;
        }
        Some(
            self.tasks
                .iter()
                .enumerate()
                .map(|(i, (_, title))| {
                    let status = match self.current {
                        _ if self.done => PlanEntryStatus::Completed,
                        Some(c) if i < c => PlanEntryStatus::Completed,
                        Some(c) if i == c => PlanEntryStatus::InProgress,
                        _ => PlanEntryStatus::Pending,
                    };
                    PlanEntry::new(title.clone(), PlanEntryPriority::Medium, status)
                })
                .collect(),
        )
    }
}

/// A run event as the client sees it: the tools the model calls and their results.
pub(super) fn event(conn: &ConnectionTo<Client>, session: &str, root: &Path, e: &RunEvent) {
    match e {
        RunEvent::ToolCall(call) => {
            let kind = acp_kind(agent_ls_runtime::tools::kind_of(&call.name));
            let id = format!("tool_{}", call.id);
            notify(
                conn,
                session,
                SessionUpdate::ToolCall(
                    ToolCall::new(id, output::tool_title(&call.name, &call.arguments))
                        .kind(kind)
                        .status(ToolCallStatus::InProgress)
                        .locations(output::tool_locations(root, &call.arguments))
                        .raw_input(call.arguments.clone()),
                ),
            );
        }
        RunEvent::ToolResult {
            id, is_error, text, ..
        } => {
            let id = format!("tool_{id}");
            let (failed, text) = (*is_error, text.clone());
            notify(
                conn,
                session,
                SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    id,
                    ToolCallUpdateFields::new()
                        .status(if failed {
                            ToolCallStatus::Failed
                        } else {
                            ToolCallStatus::Completed
                        })
                        .content(vec![ToolCallContent::Content(schema::Content::new(text))]),
                )),
            );
        }
        _ => {}
    }
}

/// ACP's name for a kind of tool.
fn acp_kind(kind: agent_ls_runtime::tools::ToolKind) -> ToolKind {
    use agent_ls_runtime::tools::ToolKind as Kind;
    match kind {
        Kind::Read => ToolKind::Read,
        Kind::Search => ToolKind::Search,
        Kind::Execute => ToolKind::Execute,
        Kind::Edit => ToolKind::Edit,
        Kind::Other => ToolKind::Other,
    }
}
