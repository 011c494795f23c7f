//! A run on the files on disk, outside an editor: what `agent-ls run` and MCP's `run` tool
//! share. `OnDisk` reads, writes (each write a step of the undo history) and runs the tests;
//! `Unattended` is the shell of a run nobody watches (MCP without elicitation, a script):
//! it is never present, so the policy decides every question (`drive::policy`), and what it
//! would have shown is kept as notes for the caller's answer.

use std::path::{Path, PathBuf};

use agent_ls_core::edit::{FileChange, FileText};
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::drive::{ApplyError, ChangeQuestion, Shell};
use crate::tests_run::{RunError, RunResult};
use crate::trust::sandbox::Sandbox;

/// The workspace's files and tests, for a run working on disk.
pub struct OnDisk {
    pub root: PathBuf,
    pub config: Config,
    /// The run's id, which its steps carry (a rollback of an interrupted run finds them by it).
    pub run_id: String,
    /// The plan's task the change being written works on, for the history.
    task: String,
}

impl OnDisk {
    pub fn new(root: &Path, config: Config, run_id: &str) -> OnDisk {
        OnDisk {
            root: root.to_path_buf(),
            config,
            run_id: run_id.to_string(),
            task: String::new(),
        }
    }

    pub fn read(&self, relative: &str) -> FileText {
        crate::files::read_for_plan(&self.root, relative)
    }

    /// Writes the changes, then records them as a step of the workspace's history, so
    /// `agent-ls undo` (and the editor, on its next start) can revert them. A history that
    /// cannot be written costs only that: the warning is returned.
    pub fn write(&self, changes: &[FileChange]) -> Result<Option<String>, ApplyError> {
        crate::files::write_changes(&self.root, changes)
            .map_err(|e| ApplyError::Failed(e.to_string()))?;
        let recorded = crate::steps::record(&self.root, changes.to_vec(), &self.run_id, &self.task);
        Ok(recorded
            .err()
            .map(|e| format!("the change is written but not in the undo history: {e}")))
    }

    pub fn task(&mut self, task: &str) {
        self.task = task.to_string();
    }

    /// The configured tests, or `command` in their place, in the sandbox.
    pub async fn run_tests(
        &self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        let sandbox = Sandbox::from_config(&self.config.sandbox);
        let test = match command {
            Some(argv) => crate::tests_run::with_command(&self.config.test, argv),
            None => self.config.test.clone(),
        };
        crate::tests_run::run(&self.root, &test, &sandbox, cancel).await
    }
}

/// The shell of a run nobody watches: never present, so no question is put to anyone.
pub struct Unattended {
    pub disk: OnDisk,
    /// The warnings and the changes shown (a dry run's, a refused one's), in order.
    pub notes: Vec<String>,
}

impl Shell for Unattended {
    fn read(&self, relative: &str) -> FileText {
        self.disk.read(relative)
    }

    fn present(&self) -> bool {
        false
    }

    // Never asked: the policy does not ask when no one is present; if it did, no is safe.
    async fn ask_change(&mut self, _question: &ChangeQuestion<'_>) -> bool {
        false
    }

    async fn confirm_protected(&mut self, _path: &str, _why: &str) -> bool {
        false
    }

    fn show_change(&mut self, q: &ChangeQuestion<'_>, written: bool) {
        if !written {
            self.notes.push(q.diff.to_string());
        }
    }

    async fn write(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        if let Some(warning) = self.disk.write(changes)? {
            self.notes.push(warning);
        }
        Ok(())
    }

    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        self.disk.run_tests(cancel, command).await
    }

    fn progress(&mut self, message: &str) {
        tracing::info!("{message}");
    }

    fn warn(&mut self, message: &str) {
        self.notes.push(message.to_string());
    }

    fn task(&mut self, task: &str, _iteration: u32) {
        self.disk.task(task);
    }
}
