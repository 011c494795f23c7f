//! `agent-ls mcp`'s git tools (docs/mcp.md, docs/git.md): `checkpoint` records the workspace
//! as a git checkpoint now, and `rollback` goes back to one, or rolls back a recorded
//! agent-ls run, as `agent-ls rollback` does.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};

use agent_ls_runtime::drive::{RecordedRunError, recorded_run};
use agent_ls_runtime::git::checkpoint::{self, RollbackError, RolledBack, RunFiles};
use agent_ls_runtime::git::{GitError, Repo, since};

use super::wire::{object, text_result, tool};

/// Why `rollback` put nothing back.
#[derive(Debug, thiserror::Error)]
enum RollbackToolError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("there is no checkpoint {0} (dropped by `agent-ls gc`?)")]
    NoCheckpoint(String),
    #[error(transparent)]
    Recorded(#[from] RecordedRunError),
    /// Files changed since, or left out: said with this tool's `force: true`, not the
    /// command line's `--force`.
    #[error("{}", .0.to_string().replace("--force", "force: true"))]
    Refused(RollbackError),
    #[error(transparent)]
    Rollback(RollbackError),
}

/// Where a checkpoint taken through MCP is named: `refs/agent-ls/checkpoints/mcp_<hex>`.
const PREFIX: &str = "mcp_";

/// The two tools, with what a host may assume of them: `checkpoint` writes no file of the
/// workspace but adds a ref and objects to the repository, so it is not read-only (MCP's
/// read-only means no change to the environment); `rollback` rewrites and deletes files.
pub(super) fn tools() -> Vec<Tool> {
    let checkpoint = tool(
        "checkpoint",
        "Record the whole workspace now (tracked changes and untracked files git does not ignore) as a git checkpoint, without touching the index, HEAD or any file; returns its id for `rollback`. Needs a git repository.",
        json!({"type": "object", "properties": {}}),
    )
    .with_raw_output_schema(object(json!({
        "type": "object",
        "properties": {
            "checkpoint": {"type": "string"},
            "commit": {"type": "string"},
            "left_out": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["checkpoint", "commit", "left_out"]
    })))
    .annotate(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(false),
    );
    let rollback = tool(
        "rollback",
        "Roll back to a checkpoint `checkpoint` took (every file changed, created or deleted since, by anyone, is put back as it was; ignored files are never touched), or roll back a whole agent-ls run by its id (only the files the run changed; refused, naming them, when they changed since). `run` defaults to the last checkpoint taken in this session, else the latest agent-ls run. `force` rolls back even over later changes.",
        json!({"type": "object", "properties": {
            "run": {"type": "string", "description": "a checkpoint id from `checkpoint`, or an agent-ls run id"},
            "force": {"type": "boolean", "description": "roll back even files changed since the run"}
        }}),
    )
    .with_raw_output_schema(object(json!({
        "type": "object",
        "properties": {
            "run": {"type": "string"},
            "checkpoint": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}},
            "already_rolled_back": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["run", "checkpoint", "files", "already_rolled_back"]
    })))
    .annotate(
        ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .idempotent(false)
            .open_world(false),
    );
    vec![checkpoint, rollback]
}

/// `checkpoint`: takes one, remembered in `last` as this session's.
pub(super) async fn take(root: PathBuf, last: Arc<Mutex<Option<String>>>) -> CallToolResult {
    let done = tokio::task::spawn_blocking(move || {
        let repo = Repo::discover(&root)?;
        let id = format!("{PREFIX}{:08x}", fastrand::u32(..));
        let taken = checkpoint::take(&repo, &id)?;
        Ok::<_, GitError>((id, taken))
    })
    .await;
    match done {
        Ok(Ok((id, taken))) => {
            if let Ok(mut last) = last.lock() {
                *last = Some(id.clone());
            }
            let left_out: Vec<&String> = taken.left_out.iter().map(|(p, _)| p).collect();
            let mut result = CallToolResult::structured(
                json!({"checkpoint": id, "commit": taken.id, "left_out": left_out}),
            );
            if let Some(w) = taken.warning() {
                result.content.push(rmcp::model::ContentBlock::text(w));
            }
            result
        }
        Ok(Err(e)) => text_result(format!("no checkpoint was taken: {e}"), true),
        Err(e) => text_result(format!("no checkpoint was taken: {e}"), true),
    }
}

/// `rollback`: to a checkpoint taken here, or of a recorded run.
pub(super) async fn rollback(
    root: PathBuf,
    args: &Value,
    last: Arc<Mutex<Option<String>>>,
) -> CallToolResult {
    let run = args.get("run").and_then(Value::as_str).map(str::to_string);
    let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
    let session = last.lock().ok().and_then(|l| l.clone());
    let done = tokio::task::spawn_blocking(move || roll_back(&root, run.or(session), force)).await;
    match done {
        Ok(Ok((run, checkpoint, r))) => CallToolResult::structured(
            json!({"run": run, "checkpoint": checkpoint, "files": r.done, "already_rolled_back": r.already}),
        ),
        Ok(Err(e)) => text_result(format!("nothing was rolled back: {e}"), true),
        Err(e) => text_result(format!("nothing was rolled back: {e}"), true),
    }
}

/// The rollback itself: the run or checkpoint's id, its commit and the files put back (and
/// those that already were).
fn roll_back(
    root: &Path,
    run: Option<String>,
    force: bool,
) -> Result<(String, String, RolledBack), RollbackToolError> {
    let repo = Repo::discover(root)?;
    let (id, commit, left): (String, String, RunFiles) = match run {
        Some(id) if id.starts_with(PREFIX) => {
            let Some(commit) = checkpoint::existing(&repo, &id) else {
                return Err(RollbackToolError::NoCheckpoint(id));
            };
            let left = since::changed(&repo, &commit)?;
            (id, commit, left)
        }
        run => {
            let r = recorded_run(root, &repo, run.as_deref())?;
            (r.run_id, r.checkpoint, r.files)
        }
    };
    match checkpoint::rollback(&repo, &commit, &left, force) {
        Ok(files) => {
            if !files.done.is_empty() {
                agent_ls_runtime::memory::note_rollback_in(root, &id);
            }
            Ok((id, commit, files))
        }
        Err(e @ (RollbackError::ChangedSince(_) | RollbackError::LeftOut(_))) => {
            Err(RollbackToolError::Refused(e))
        }
        Err(e) => Err(RollbackToolError::Rollback(e)),
    }
}
