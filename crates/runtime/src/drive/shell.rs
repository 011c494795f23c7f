//! What the loop needs from a front end (`Shell`: the files, the questions, writing, the
//! tests, progress), what became of a proposed change (`Verdict`, `ApplyError`), and the
//! review of a change before approval, which every shell shows. The driver is the same for
//! every surface; only the shell differs.

use tokio_util::sync::CancellationToken;

use super::policy::Asked;
use crate::tests_run::{RunError, RunResult};
use crate::trust::Review;
use agent_ls_core::agent;
use agent_ls_core::edit::{FileChange, FileText};

/// How the loop reaches the user and the files. A shell asks and shows; what needs a question
/// and what the model hears is the driver's (`policy.rs`), and so is the stale-text rule: the
/// driver moves a change onto the files' text now (`edit::rebase`) before `write`.
#[allow(async_fn_in_trait)]
pub trait Shell {
    /// The current text of a workspace file (the editor's buffer when it has one).
    fn read(&self, relative: &str) -> FileText;
    /// The text now, bypassing any cache a shell keeps for its reads: what a change is
    /// checked against just before it is written.
    fn fresh(&self, relative: &str) -> FileText {
        self.read(relative)
    }
    /// Whether someone is there to answer a question (a terminal, an editor, a client that
    /// asks permission). Where nobody is, what needs a question is refused.
    fn present(&self) -> bool;
    /// Shows the change, with what the review found, and asks whether to write it; `why`
    /// says why it is asked.
    async fn ask_change(&mut self, question: &ChangeQuestion<'_>) -> bool;
    /// Asks the user to confirm, by the file's name, that the change may write the protected
    /// file `path` (`why` says why it is protected). A plain yes does not do.
    async fn confirm_protected(&mut self, path: &str, why: &str) -> bool;
    /// Shows a change that is not asked about: one written without a question (`written`),
    /// or one that is not written (a dry run, a refusal, nobody to ask).
    fn show_change(&mut self, _question: &ChangeQuestion<'_>, _written: bool) {}
    /// Writes an approved change, already moved onto the files' current text. A file the
    /// shell finds changed again meanwhile is `Stale`, and the step is redone.
    async fn write(&mut self, changes: &[FileChange]) -> Result<(), ApplyError>;
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
    /// property tests (outside the sandbox: it downloads).
    async fn ask_install(&mut self, _library: &str, _argv: &[String]) -> bool {
        false
    }
    /// Asks whether a tool call may run that an `ask` rule holds for the user's yes; `why`
    /// names the rule.
    async fn ask_call(&mut self, _name: &str, _arguments: &serde_json::Value, _why: &str) -> bool {
        false
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
    /// Called before each step and before each write, so `read` sees the latest text (the
    /// server takes a fresh snapshot of the editor's buffers here, ACP forgets its reads).
    async fn refresh(&mut self) {}
    /// The plan's task the next change works on ("T1 fix the failing tests") and the
    /// iteration it is made in, for the history and the run view.
    fn task(&mut self, _task: &str, _iteration: u32) {}
}

/// A change put to the user: the files, their diff, what the review found, and why it is
/// asked.
pub struct ChangeQuestion<'a> {
    pub changes: &'a [FileChange],
    pub diff: &'a str,
    pub review: &'a Review,
    pub why: Asked,
}

/// What became of a proposed change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approved,
    Rejected,
    /// Not applied, for this reason, which the model hears (a protected file nobody allowed).
    Refused(String),
    /// Shown and not written (a dry run).
    Shown,
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

/// `edit::rebase` against what the shell reads now: the changes moved onto the files' text,
/// `Stale` when that is impossible (a file deleted meanwhile among them), `Failed` when a file
/// may not be read.
pub fn rebase(
    changes: &[FileChange],
    shell: &impl Shell,
    limits: &agent_ls_core::edit::Limits,
) -> Result<Vec<FileChange>, ApplyError> {
    let mut refused = None;
    let current = agent_ls_core::edit::rebase(
        changes,
        |path| match shell.fresh(path) {
            FileText::Text(t) => Some(t),
            FileText::Missing => None,
            FileText::Refused(why) => {
                refused.get_or_insert(why);
                None
            }
        },
        limits,
    );
    if let Some(why) = refused {
        return Err(ApplyError::Failed(why));
    }
    current.map_err(|e| ApplyError::Stale(e.to_string()))
}
