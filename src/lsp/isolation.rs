//! `git.isolation` for runs started from the editor, worked out in the run's job before its
//! first step (the session does no IO). `"branch"` switches the checkout to a new branch from
//! HEAD: from the same commit in a clean tree no file changes, so the editor's buffers stay
//! right. `"worktree"` is refused: the editor's buffers are this checkout's, so a run in
//! another worktree could be neither shown nor applied through them (docs/git.md says more).

use std::path::PathBuf;

use agent_ls_runtime::config::Isolation;
use agent_ls_runtime::git::isolate::{self, IsolateError, Isolated};

/// Why a run from the editor does not start where `git.isolation` says; the text is the
/// run's answer, shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum NotIsolated {
    #[error("cannot isolate the run: {0}")]
    Isolate(#[from] IsolateError),
    #[error(
        "cannot isolate the run: git.isolation = \"worktree\" is for `agent-ls run --isolated` and ACP; the editor's buffers are this checkout's, so a run in another worktree could not be shown or applied through them. In the editor use \"branch\", or open a worktree made by `agent-ls run --isolated` as the workspace"
    )]
    WorktreeInEditor,
    #[error("cannot isolate the run: {0}")]
    Job(String),
}

/// Where a run of `goal` from the editor works: `None` for the checkout as it is, else the
/// new branch (or the worktree the workspace is already in). Nothing changes when it refuses.
pub async fn isolate(
    root: PathBuf,
    mode: Isolation,
    goal: String,
) -> Result<Option<Isolated>, NotIsolated> {
    let job = tokio::task::spawn_blocking(move || match mode {
        Isolation::None => Ok(None),
        Isolation::Branch => Ok(isolate::start(&root, mode, &goal)?),
        // A workspace that is one of our worktrees (opened after `agent-ls run --isolated`)
        // is isolated already: the run goes on there, on its branch.
        Isolation::Worktree => match isolate::already(&root)? {
            Some(there) => Ok(Some(there)),
            None => Err(NotIsolated::WorktreeInEditor),
        },
    });
    job.await.map_err(|e| NotIsolated::Job(e.to_string()))?
}
