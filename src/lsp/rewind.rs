//! `agent-ls.rewind` (docs/rewind.md): a run taken back to one of its steps from the editor,
//! code and conversation together, and a new run of the user's instruction from there. The
//! runtime decides it (`runs::rewind::plan`, on the open buffers' texts, else the disk); the
//! later steps' reversal goes through workspace/applyEdit like an undo, so unsaved buffers
//! and the editor's own undo stay right; then the session marks the steps undone and starts
//! the new run under the same lock. A job of its own: the store and the journal are read
//! here, never on the session's task.

use std::collections::BTreeMap;

use serde::Deserialize;
use tokio::sync::oneshot;
use tower_lsp_server::jsonrpc::{Error, Result};

use super::connection::{AgentMessage, Connection, Rewound, Snapshot};
use super::jobs;
use super::refused::Refused;
use super::shell::{self, ServerShell};
use agent_ls_core::edit;
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::rewind::{self, Rewind};

/// Arguments of `agent-ls.rewind`: the step to go back to, and what to do from there.
#[derive(Debug, Clone, Deserialize)]
pub struct RewindArgs {
    pub step: u64,
    #[serde(alias = "instruction")]
    pub goal: String,
}

/// `agent-ls.rewind`'s argument: `{step, goal}`.
pub fn args(first: Option<&serde_json::Value>) -> Result<RewindArgs> {
    let first = first.cloned().unwrap_or(serde_json::Value::Null);
    let args: RewindArgs = serde_json::from_value(first).map_err(|e| {
        Error::invalid_params(format!(
            "agent-ls.rewind takes {{step, goal}} (the step's id, as agent-ls.status and the run view list them, and the new instruction): {e}"
        ))
    })?;
    if args.goal.trim().is_empty() {
        return Err(Error::invalid_params(
            "agent-ls.rewind needs a goal: what to do instead from the step",
        ));
    }
    Ok(args)
}

/// What a rewind needs, taken from the session when it starts.
pub struct RewindStart {
    pub args: RewindArgs,
    pub snapshot: Snapshot,
    pub connection: Connection,
    pub limits: edit::Limits,
    /// The command's answer, given once the new run has started (or why not).
    pub reply: oneshot::Sender<std::result::Result<serde_json::Value, Refused>>,
    pub lock: RunLock,
}

/// Starts the rewind on a task of its own, under the panic guard; the session hears of its
/// end whatever happens.
pub fn spawn_rewind(r: RewindStart) {
    tokio::spawn(async move {
        let report = r.connection.report.clone();
        let job = take_back(r.args.step, r.snapshot, r.connection, r.limits);
        let rewind = match jobs::caught(jobs::Kind::Rollback, job).await {
            Ok(done) => done,
            Err(panicked) => Err(Refused::Panicked(panicked)),
        };
        report(AgentMessage::RewindFinished(Box::new(Rewound {
            rewind,
            goal: r.args.goal,
            lock: r.lock,
            reply: r.reply,
        })));
    });
}

/// The rewind's files: planned on the buffers (else the disk), applied through the editor,
/// then settled in the store.
async fn take_back(
    step: u64,
    snapshot: Snapshot,
    c: Connection,
    limits: edit::Limits,
) -> std::result::Result<Rewind, Refused> {
    jobs::injected_panic(jobs::Kind::Rollback);
    let texts: BTreeMap<String, String> = snapshot
        .iter()
        .map(|(rel, (_, b))| (rel.clone(), b.text()))
        .collect();
    let root = c.root.clone();
    let planned = tokio::task::spawn_blocking(move || {
        rewind::plan(&root, step, &limits, |rel| {
            texts
                .get(rel)
                .cloned()
                .or_else(|| std::fs::read_to_string(root.join(rel)).ok())
        })
    })
    .await;
    let r = match planned {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => return Err(Refused::Failed(e.to_string())),
        Err(e) => return Err(Refused::Failed(e.to_string())),
    };
    let label = format!("agent-ls: rewind run {} to step {}", r.run_id, r.step);
    let mut shell = ServerShell {
        snapshot,
        ..ServerShell::new(c.clone(), label, limits)
    };
    let failed = |e| Refused::Failed(format!("could not rewind: {}", shell::apply_failure(e)));
    if !r.changes.is_empty() {
        shell.apply_now(&r.changes).await.map_err(failed)?;
    }
    shell::delete_files(&c, &r.deletes).await.map_err(failed)?;
    let (root, settled) = (c.root.clone(), r.clone());
    match tokio::task::spawn_blocking(move || rewind::settle(&root, &settled)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("the rewind of run {} was not recorded: {e}", r.run_id),
        Err(e) => tracing::warn!("the rewind of run {} was not recorded: {e}", r.run_id),
    }
    Ok(r)
}

/// The command's answer once the new run started: its id, and what the rewind did.
pub fn answer(run_id: &str, r: &Rewind) -> serde_json::Value {
    serde_json::json!({
        "run_id": run_id,
        "rewound": {"run_id": r.run_id, "step": r.step, "undone": r.undone, "files": r.files()},
    })
}
