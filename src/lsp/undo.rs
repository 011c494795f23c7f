//! Undo and redo of one agent step from the editor (`agent-ls.undo`, `agent-ls.redo`): the
//! step's reversal is computed from the files as they are now and applied through the editor
//! shell like any agent edit, so the editor's own undo sees it. A job of its own: it reports
//! its end to the session through `AgentMessage::UndoFinished`, and never sees the session.

use tokio::sync::oneshot;

use super::connection::{AgentMessage, Connection, Snapshot, UndoFailed};
use super::jobs;
use super::refused::Refused;
use super::shell::{self, ServerShell};
use agent_ls_core::edit::history::{Reversal, Step};
use agent_ls_core::edit::{self};
use agent_ls_runtime::lock::RunLock;

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
            Err(panicked) => Err(UndoFailed::Panicked(panicked)),
        };
        // Not answered yet: the reversal could not be computed, or the job panicked first.
        if let Some(reply) = reply.take() {
            let _ = reply.send(match &result {
                Ok(()) => Ok(step_id),
                Err(UndoFailed::Reversal(why)) => Err(Refused::Reversal(why.clone())),
                Err(UndoFailed::Apply(why)) => Err(Refused::Failed(why.clone())),
                Err(UndoFailed::Panicked(why)) => Err(Refused::Panicked(why.clone())),
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
    }?;
    if let Some(reply) = reply.take() {
        let _ = reply.send(Ok(step_id));
    }
    let label = format!(
        "agent-ls: {} step {step_id}",
        if u.redo { "redo" } else { "undo" }
    );
    let mut shell = ServerShell {
        snapshot: u.snapshot,
        ..ServerShell::new(c.clone(), label, u.limits)
    };
    let mut result = if reversal.changes.is_empty() {
        Ok(())
    } else {
        shell.apply_now(&reversal.changes).await
    };
    if result.is_ok() {
        result = shell::delete_files(&c, &reversal.deletes).await;
    }
    drop(u.lock);
    result.map_err(|e| UndoFailed::Apply(shell::apply_failure(e)))
}
