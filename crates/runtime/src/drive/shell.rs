//! What the loop needs from a front end (`Shell`: the files, approval, applying, the tests,
//! progress), what became of a proposed change (`Verdict`, `ApplyError`), and the review of a
//! change before approval, which every shell shows. The driver is the same for every surface;
//! only the shell differs.

use tokio_util::sync::CancellationToken;

use crate::tests_run::{RunError, RunResult};
use crate::trust::Review;
use agent_ls_core::agent;
use agent_ls_core::edit::{FileChange, FileText};

/// How the loop reaches the user and the files.
#[allow(async_fn_in_trait)]
pub trait Shell {
    /// The current text of a workspace file (the editor's buffer when it has one).
    fn read(&self, relative: &str) -> FileText;
    /// Shows the change, with what the review found (protected files, risky constructs),
    /// and answers whether to apply it. A protected file needs the user's confirmation of that
    /// file by name, whatever the approval mode; a change it may not make is `Refused`, and
    /// the model hears why.
    async fn approve(&mut self, changes: &[FileChange], diff: &str, review: &Review) -> Verdict;
    /// Applies an approved change. A file that changed since the change was computed gets the
    /// change re-located onto its new text (`edit::rebase`); where that is impossible the
    /// answer is `Stale`, and the step is redone.
    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError>;
    /// Runs the workspace's tests (the server's through its one owner of test runs), or
    /// `command` in their place under the same policy (a tool's narrowed run or allowlisted
    /// command, whose result is the model's, not the editor's diagnostics).
    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError>;
    /// The editor's open buffers, for the tools that read off the loop's task.
    fn buffers(&self) -> Vec<(String, FileText)> {
        Vec::new()
    }
    /// Asks whether `argv` may run to install `library` as a dev dependency for the tester's
    /// property tests (outside the sandbox: it downloads). Only a front end that can ask (or
    /// was told to approve) says yes; the others leave it uninstalled.
    async fn approve_install(&mut self, _library: &str, _argv: &[String]) -> bool {
        false
    }
    /// Asks whether a tool call may run that an `ask` rule holds for the user's yes; `why`
    /// names the rule. A front end with no one to ask refuses, saying why (the driver adds
    /// the rule to what the model hears).
    async fn approve_call(
        &mut self,
        _name: &str,
        _arguments: &serde_json::Value,
        _why: &str,
    ) -> Verdict {
        Verdict::Refused("there is no one to ask here".into())
    }
    fn progress(&mut self, message: &str);
    fn warn(&mut self, message: &str);
    /// The reviewer's result on the run's change; `report` tells it in lines (the summary,
    /// then each finding at its place), and `loud` says it must not be missed (a review that
    /// could not be had in gate mode). A shell that can show the findings at their places
    /// (ACP, as a tool call with locations) does that instead.
    fn reviewed(&mut self, _result: &agent::review::ReviewResult, report: &str, loud: bool) {
        if loud {
            self.warn(report);
        } else {
            self.progress(report);
        }
    }
    /// The editor's own diagnostics, when its add-on forwards them (`agent-ls/diagnostics`,
    /// docs/project-lsp.md): the run then checks its edits with them and starts no language
    /// server of its own.
    fn editor_diagnostics(&self) -> Option<std::sync::Arc<crate::lsp_client::Forwarded>> {
        None
    }
    /// Called before each step, so `read` sees the latest text (the server takes a fresh
    /// snapshot of the editor's buffers here).
    async fn refresh(&mut self) {}
    /// The plan's task the next change works on ("T1 fix the failing tests") and the
    /// iteration it is made in, for the history and the run view.
    fn task(&mut self, _task: &str, _iteration: u32) {}
}

/// What became of a proposed change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    Rejected,
    /// Not applied, for this reason, which the model hears (a protected file nobody allowed).
    Refused(String),
}

/// The review of a change before approval: the protected files it writes and the risky
/// constructs it introduces.
pub fn review(changes: &[FileChange]) -> Review {
    Review {
        protected: crate::trust::protected::in_changes(changes)
            .into_iter()
            .map(|(p, why)| (p, why.to_string()))
            .collect(),
        findings: changes
            .iter()
            .flat_map(|c| {
                crate::trust::scan::introduced(&c.path, c.original.as_deref(), &c.new_text)
            })
            .collect(),
        fixes: Vec::new(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// The files changed meanwhile and the change could not be re-located.
    Stale(String),
    Failed(String),
}
