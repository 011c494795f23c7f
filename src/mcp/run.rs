//! `agent-ls mcp`'s `run` tool: a goal run by agent-ls's own loop on the workspace's files, as
//! `agent-ls run` runs it. The runtime sets the run up, decides where it works and each
//! approval, and commits (`runs::prepare`, `runs::isolate`, `runs::drive`, `runs::after_run`); this file only reads the arguments and
//! says the outcome. Nobody watches a tool call, so the run is unattended
//! (`runs::disk::Unattended`): under `approval = "confirm"` a change is not applied unless
//! the caller said `yes`, and a protected file is written only with `allow_protected`. With
//! `from`, the step's run is rewound first (`runs::rewind`) and the goal follows its
//! conversation.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use agent_ls_runtime::config::Config;
use agent_ls_runtime::drive;
use agent_ls_runtime::git::isolate::Isolated;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::disk::{OnDisk, Unattended};
use agent_ls_runtime::runs::{self, AfterRun, Begin, RunRequest};
use agent_ls_runtime::store::StoreThread;

use super::wire::{text_result, tool};

/// The tool as clients see it.
pub(super) fn spec() -> Tool {
    tool(
        "run",
        "Run agent-ls's own agent loop on a goal (\"fix the failing tests\", \"make parse keep the last field\"): it plans, edits the workspace's files through its edit engine, runs the tests and retries until they pass or it gives up; every change is a step `agent-ls undo` reverts, and in a git repository the run has a checkpoint `rollback` goes back to. Nobody is asked anything: with approval \"confirm\" a change is applied only with `yes`, and a protected file (.git/, hooks, editor settings, agent-ls's configuration) only with `allow_protected`. Returns the run's outcome (status, answer, files changed, tests) and `notes` (warnings, and the diffs shown but not written).",
        json!({"type": "object", "properties": {
            "goal": {"type": "string", "description": "what the run should achieve"},
            "agent": {"type": "string", "description": "one of the configured agents (default: the configuration's)"},
            "yes": {"type": "boolean", "description": "apply changes without asking, as `agent-ls run --yes`"},
            "allow_protected": {"type": "boolean", "description": "with yes, also write protected files and changes the static scan flagged"},
            "dry_run": {"type": "boolean", "description": "show the proposed change, write nothing"},
            "reproduce": {"type": "boolean", "description": "write a test that fails for the goal's bug before any fix"},
            "from": {"type": "integer", "minimum": 1, "description": "rewind first (docs/rewind.md): take the run of this step back to it, code and conversation together (its later steps undone as `agent-ls undo` does; a file edited since at their lines refuses), then run `goal` (\"instead, ...\") following that run's conversation up to the step"}
        }, "required": ["goal"]}),
    )
    .annotate(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(true),
    )
}

/// Why the call's arguments are no run's request.
#[derive(Debug, thiserror::Error)]
enum BadArgs {
    #[error("`goal` is required: what should the run achieve?")]
    NoGoal,
    #[error("`{0}` must be a string, not {1}")]
    NotString(&'static str, Value),
    #[error("`{0}` must be true or false, not {1}")]
    NotBool(&'static str, Value),
    #[error("`from` must be a step's id (a positive integer), not {0}")]
    NotStep(Value),
    #[error("`from` rewinds the files, so it cannot be a dry run")]
    RewindDry,
}

/// The step `from` names, when the call rewinds first.
fn from_step(args: &Value, request: &RunRequest) -> Result<Option<u64>, BadArgs> {
    let step = match args.get("from") {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v.as_u64().ok_or_else(|| BadArgs::NotStep(v.clone()))?,
    };
    if request.dry_run {
        return Err(BadArgs::RewindDry);
    }
    Ok(Some(step))
}

/// Why the rewind `from` asks for did not happen; nothing changed.
#[derive(Debug, thiserror::Error)]
enum NotRewound {
    #[error(transparent)]
    Lock(#[from] agent_ls_runtime::lock::LockError),
    #[error(transparent)]
    Refused(#[from] runs::rewind::NotRewound),
}

/// The step's run taken back to it on disk, under the workspace's lock, before the run of
/// the goal starts; the run then follows its conversation.
fn rewind_first(
    root: &std::path::Path,
    config: &Config,
    step: u64,
    request: &mut RunRequest,
) -> Result<String, NotRewound> {
    let _lock = RunLock::acquire(root, &format!("rewind to step {step}"))?;
    let limits = config.edit.limits();
    let r = tokio::task::block_in_place(|| runs::rewind::on_disk(root, step, &limits))?;
    request.begin = r.begin();
    Ok(r.describe())
}

/// The run's request, from the call's arguments.
fn request(args: &Value) -> Result<RunRequest, BadArgs> {
    let goal = match args.get("goal") {
        Some(Value::String(g)) if !g.trim().is_empty() => g.clone(),
        Some(Value::String(_)) | None | Some(Value::Null) => return Err(BadArgs::NoGoal),
        Some(other) => return Err(BadArgs::NotString("goal", other.clone())),
    };
    let flag = |name: &'static str| match args.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(BadArgs::NotBool(name, other.clone())),
    };
    let agent = match args.get("agent") {
        None | Some(Value::Null) => None,
        Some(Value::String(a)) => Some(a.clone()),
        Some(other) => return Err(BadArgs::NotString("agent", other.clone())),
    };
    Ok(RunRequest {
        agent,
        reproduce: flag("reproduce")?,
        begin: Begin::New,
        dry_run: flag("dry_run")?,
        allow_protected: flag("allow_protected")?,
        yes: flag("yes")?,
        ..RunRequest::new(goal)
    })
}

/// Why a run could not be placed.
#[derive(Debug, thiserror::Error)]
enum NotPlaced {
    #[error(transparent)]
    Lock(#[from] agent_ls_runtime::lock::LockError),
    #[error("cannot isolate it: {0}")]
    Isolate(#[from] agent_ls_runtime::git::isolate::IsolateError),
}

/// The workspace's run lock, and the worktree's when the run works in one of its own.
struct Locks {
    home: PathBuf,
    _workspace: RunLock,
    _worktree: Option<RunLock>,
}

/// Where the run works: its folder, where it was isolated (`git.isolation`, as for
/// `agent-ls run`: a new branch, or a worktree whose files, tests, record and lock are the
/// run's), and the locks held until it ends. The workspace's lock (one run per workspace,
/// whoever runs it) is taken before isolating, so a branch is never switched under another
/// run.
fn place(
    root: &std::path::Path,
    prepared: &runs::Prepared,
) -> Result<(PathBuf, Option<Isolated>, Locks), NotPlaced> {
    let goal = prepared.run.goal();
    let workspace = RunLock::acquire(root, goal)?;
    let isolated = tokio::task::block_in_place(|| runs::isolate(root, prepared))?;
    let at = isolated
        .as_ref()
        .map_or(root.to_path_buf(), |i| i.root.clone());
    let worktree = match at != root {
        true => Some(RunLock::acquire(&at, goal)?),
        false => None,
    };
    let locks = Locks {
        home: root.to_path_buf(),
        _workspace: workspace,
        _worktree: worktree,
    };
    Ok((at, isolated, locks))
}

/// Runs the goal to its end; `cancel` fires when the client cancels the call or goes away.
pub(super) async fn run(
    root: PathBuf,
    (config, trusted): (Arc<Config>, bool),
    args: &Value,
    cancel: &CancellationToken,
) -> CallToolResult {
    let (mut request, from) = match request(args).and_then(|r| Ok((from_step(args, &r)?, r))) {
        Ok((from, r)) => (r, from),
        Err(why) => return text_result(why.to_string(), true),
    };
    let rewound = match from.map(|step| rewind_first(&root, &config, step, &mut request)) {
        None => None,
        Some(Ok(said)) => Some(said),
        Some(Err(why)) => return text_result(format!("the run did not start: {why}"), true),
    };
    let prepared = match runs::prepare(&config, request) {
        Ok(p) => p,
        Err(e) => return text_result(format!("the run did not start: {e}"), true),
    };
    let (root, isolated, locks) = match place(&root, &prepared) {
        Ok(p) => p,
        Err(why) => return text_result(format!("the run did not start: {why}"), true),
    };
    let home = locks.home.clone();
    let store = StoreThread::open(root.clone(), |opened| {
        if let Err(e) = opened {
            tracing::warn!("the run's figures will not be kept: {e}");
        }
    });
    let run_id = drive::new_run_id();
    let mut shell = Unattended {
        disk: OnDisk::new(&root, prepared.config.clone(), &run_id),
        notes: Vec::new(),
    };
    shell.notes.extend(rewound);
    if let Some(i) = &isolated {
        shell.notes.push(i.describe());
    }
    let env = runs::Env {
        root: &root,
        home: &home,
        cancel,
        run_id,
        store: Some(&store),
        events: None,
        on_token: None,
    };
    let (_, mut outcome) = runs::drive(prepared, env, &mut shell).await;
    if let Some(i) = isolated {
        outcome.branch = Some(i.branch);
        outcome.worktree = i.worktree.map(|w| w.display().to_string());
    }
    // Nobody to ask after the run either: unset, it does not commit.
    let after = runs::after_run(&store, (&root, &config, trusted), &mut outcome, false).await;
    tokio::task::block_in_place(|| store.flush_blocking());
    let mut value = serde_json::to_value(&outcome).unwrap_or_else(|_| json!({}));
    value["notes"] = json!(shell.notes);
    match after {
        AfterRun::Committed { id, subject } => {
            value["committed"] = json!({"id": id, "subject": subject})
        }
        AfterRun::Failed(why) => value["commit_failed"] = json!(why),
        AfterRun::Left | AfterRun::Offer => {}
    }
    CallToolResult::structured(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_checked_before_anything_runs() {
        let said = |args: Value| request(&args).unwrap_err().to_string();
        assert!(said(json!({})).contains("`goal` is required"));
        assert!(request(&json!({"goal": "  "})).is_err());
        assert!(said(json!({"goal": 3})).contains("must be a string"));
        let bad = said(json!({"goal": "fix", "yes": "yes"}));
        assert!(bad.contains("`yes` must be true or false"), "{bad}");
        let r = request(&json!({"goal": "fix", "yes": true, "agent": "careful"})).unwrap();
        assert!(r.yes && !r.dry_run && !r.allow_protected);
        assert_eq!(r.agent.as_deref(), Some("careful"));
        let from = |args: Value| from_step(&args, &request(&args).unwrap());
        assert_eq!(
            from(json!({"goal": "instead", "from": 3})).unwrap(),
            Some(3)
        );
        assert!(from(json!({"goal": "instead", "from": "3"})).is_err());
        assert!(from(json!({"goal": "instead", "from": 3, "dry_run": true})).is_err());
    }
}
