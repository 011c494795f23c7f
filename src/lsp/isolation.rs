//! `git.isolation` for runs started from the editor, worked out in the run's job before its
//! first step (the session does no IO). `"branch"` switches the checkout to a new branch from
//! HEAD: from the same commit in a clean tree no file changes, so the editor's buffers stay
//! right. `"worktree"` makes a worktree that no editor buffer belongs to: the run works there
//! as `agent-ls run --isolated` does (its tools, tests, checkpoint, record and lock are the
//! worktree's), writing its files on disk after the usual approval (docs/git.md says more).

use std::path::PathBuf;

use agent_ls_runtime::config::{Config, Isolation};
use agent_ls_runtime::git::isolate::{self, IsolateError, Isolated};
use agent_ls_runtime::lock::{LockError, RunLock};
use agent_ls_runtime::runs::disk::OnDisk;
use agent_ls_runtime::store::StoreThread;
use tracing::warn;

/// Why a run from the editor does not start where `git.isolation` says; the text is the
/// run's answer, shown to the user.
#[derive(Debug, thiserror::Error)]
pub enum NotIsolated {
    #[error("cannot isolate the run: {0}")]
    Isolate(#[from] IsolateError),
    #[error("cannot isolate the run: {0}")]
    Lock(#[from] LockError),
    #[error("cannot isolate the run: {0}")]
    Job(#[from] tokio::task::JoinError),
}

/// Where a run of `goal` from the editor works: `None` for the checkout as it is, else the
/// new branch, the new worktree, or the worktree the workspace is already in (opened after
/// `agent-ls run --isolated`: the run goes on there, through its buffers). Nothing changes
/// when it refuses.
pub async fn isolate(
    root: PathBuf,
    mode: Isolation,
    goal: String,
) -> Result<Option<Isolated>, NotIsolated> {
    let job = tokio::task::spawn_blocking(move || isolate::start(&root, mode, &goal));
    Ok(job.await??)
}

/// What a run in a new worktree of its own works with, in place of the session's.
pub struct WorktreeRun {
    /// The run's folder in the worktree.
    pub root: PathBuf,
    /// The worktree's store: the run's record describes the worktree's files.
    pub store: StoreThread,
    /// The worktree's run lock, held until the run ends.
    pub lock: RunLock,
    pub on_disk: OnDisk,
}

impl WorktreeRun {
    /// Takes the new worktree `i` for run `run_id` of `goal` with the workspace's
    /// configuration. No editor buffer is the worktree's, so the run reads and writes its
    /// disk, and its tests run there (not through the session's test runs, whose results are
    /// the checkout's diagnostics), as `agent-ls run --isolated` does (`runs::disk::OnDisk`).
    pub fn start(
        i: &Isolated,
        config: &Config,
        (run_id, goal): (&str, &str),
    ) -> Result<WorktreeRun, NotIsolated> {
        let root = i.root.clone();
        let lock = RunLock::acquire(&root, goal)?;
        let store = StoreThread::open(root.clone(), |opened| {
            if let Err(e) = opened {
                warn!("the worktree run's figures will not be kept: {e}");
            }
        });
        Ok(WorktreeRun {
            root,
            store,
            lock,
            on_disk: OnDisk::new(&i.root, config.clone(), run_id),
        })
    }
}
