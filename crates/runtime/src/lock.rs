//! One run per workspace: an advisory lock on `.agent-ls/run.lock`, held for as long as a run
//! (or an undo) goes on and released by the kernel when its process dies, so a crash never
//! leaves a workspace locked. The file also says who holds it, for the refusal's message.
//!
//! IO only; it decides nothing about runs.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const FILE: &str = ".agent-ls/run.lock";

/// Who holds the lock, as written in the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    pub goal: String,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "a run is in progress in this workspace (process {}: {:?}); wait for it to end or cancel it",
        .0.pid, .0.goal
    )]
    Held(Holder),
    #[error(
        "a run is in progress in this workspace (its lock file {} does not say which); wait for it to end",
        .0.display()
    )]
    HeldByUnknown(PathBuf),
    #[error("cannot take the run lock {}: {}", .0.display(), .1)]
    Io(PathBuf, std::io::Error),
}

/// The lock, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Takes the workspace's lock for a run working on `goal`, or says at once who has it.
    /// A second attempt from the same process is refused too (the lock belongs to the open
    /// file, not to the process).
    pub fn acquire(root: &Path, goal: &str) -> Result<RunLock, LockError> {
        let path = root.join(FILE);
        let io = |e| LockError::Io(path.clone(), e);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(match serde_json::from_str::<Holder>(&text) {
                    Ok(holder) => LockError::Held(holder),
                    Err(_) => LockError::HeldByUnknown(path),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        let holder = Holder {
            pid: std::process::id(),
            goal: goal.to_string(),
        };
        let text = serde_json::to_string(&holder).unwrap_or_default();
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        Ok(RunLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_run_is_refused_naming_the_first_until_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::acquire(dir.path(), "fix the tests").unwrap();
        match RunLock::acquire(dir.path(), "something else") {
            Err(LockError::Held(h)) => {
                assert_eq!(h.pid, std::process::id());
                assert_eq!(h.goal, "fix the tests");
            }
            other => panic!("{other:?}"),
        }
        drop(first);
        assert!(RunLock::acquire(dir.path(), "something else").is_ok());
    }
}
