//! `agent-ls mcp`'s git tools (docs/mcp.md, docs/git.md): `checkpoint` records the workspace
//! as a git checkpoint now, and `rollback` goes back to one, or rolls back a recorded
//! agent-ls run, as `agent-ls rollback` does.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rmcp::model::{CallToolResult, Tool, ToolAnnotations};
use serde_json::{Value, json};

use agent_ls_runtime::config::MemoryConfig;
use agent_ls_runtime::git::checkpoint;
use agent_ls_runtime::git::{GitError, Repo};
use agent_ls_runtime::runs::rollback::{self, CHECKPOINT_PREFIX, NotRolledBack, Target};

use super::wire::{object, text_result, tool};

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
        "Roll back to a checkpoint `checkpoint` took (every file changed, created or deleted since, by anyone, is put back as it was; ignored files are never touched), or roll back a whole agent-ls run by its id (only the files the run changed; refused, naming them, when they changed since). `run` defaults to the newest of the two: the last checkpoint taken (by any session) or the latest agent-ls run. A second rollback of the same run or checkpoint, over files changed since the first, is refused. `force` rolls back even over later changes.",
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

/// `checkpoint`: takes one.
pub(super) async fn take(root: PathBuf) -> CallToolResult {
    let done = tokio::task::spawn_blocking(move || {
        let repo = Repo::discover(&root)?;
        let id = format!("{CHECKPOINT_PREFIX}{:08x}", fastrand::u32(..));
        let taken = checkpoint::take(&repo, &id)?;
        Ok::<_, GitError>((id, taken))
    })
    .await;
    match done {
        Ok(Ok((id, taken))) => {
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

/// `rollback`: to a checkpoint, or of a recorded run (`runs::rollback`).
pub(super) async fn rollback(root: PathBuf, args: &Value, memory: MemoryConfig) -> CallToolResult {
    let target = Target::named(args.get("run").and_then(Value::as_str).map(str::to_string));
    let force = args.get("force").and_then(Value::as_bool).unwrap_or(false);
    let done = tokio::task::spawn_blocking(move || {
        let planned = rollback::plan(&root, &target, force, &BTreeMap::new())?;
        let files = rollback::write(&planned)?;
        if !files.is_empty() {
            rollback::settle(&planned, &memory)?;
        }
        Ok::<_, NotRolledBack>((planned, files))
    })
    .await;
    match done {
        Ok(Ok((p, files))) => CallToolResult::structured(
            json!({"run": p.id, "checkpoint": p.checkpoint, "files": files, "already_rolled_back": p.already}),
        ),
        Ok(Err(e)) if e.refusal().is_some() => text_result(
            format!("nothing was rolled back: {e} (force: true rolls back anyway)"),
            true,
        ),
        Ok(Err(e)) => text_result(format!("nothing was rolled back: {e}"), true),
        Err(e) => text_result(format!("nothing was rolled back: {e}"), true),
    }
}
