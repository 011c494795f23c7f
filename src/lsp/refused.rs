//! `Refused`: why a run, an undo, a rollback or a resume did not start or did not go through.
//! The session answers a command with it when it cannot start the job, and the undo and
//! rollback jobs answer with it when they fail; it sits below both, so neither imports the
//! other to name it. The text is the command's error message.

use super::jobs::Panicked;
use agent_ls_core::edit::history::StepError;
use agent_ls_runtime::drive::AgentError;

/// Why the session will not start a run, an undo, a rollback or a resume, or why the job did
/// not go through.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("a run is in progress ({id}: {goal}); cancel it first with agent-ls.cancel")]
    RunInProgress { id: String, goal: String },
    #[error("an undo of step {0} is in progress")]
    UndoInProgress(u64),
    #[error("a rollback is in progress")]
    RollbackInProgress,
    #[error("agent-ls needs a workspace folder to run the agent")]
    NoWorkspaceForRun,
    #[error("no workspace folder")]
    NoWorkspace,
    #[error("the goal is empty")]
    EmptyGoal,
    /// The agent the command named cannot be used (`choose_agent` says why).
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("the undo history is not loaded yet")]
    HistoryNotLoaded,
    #[error("no applied step {0} to undo (agent-ls.status lists the steps)")]
    NoSuchStep(u64),
    #[error("nothing to {}", if *.redo { "redo" } else { "undo" })]
    NothingTo { redo: bool },
    /// The step's reversal cannot be computed from the files as they are now.
    #[error(transparent)]
    Reversal(StepError),
    /// The job could not do it (the editor or the disk did not take a change, git failed);
    /// the text says what and why.
    #[error("{0}")]
    Failed(String),
    /// The job failed inside agent-ls (a panic, caught and reported).
    #[error(transparent)]
    Panicked(#[from] Panicked),
}
