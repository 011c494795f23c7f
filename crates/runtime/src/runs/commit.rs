//! What happens to a run's files when it went well, decided once for every surface: the run
//! is eligible when it is done, has a checkpoint, changed files and was not rolled back at
//! the end; then `git.commit` says commit, offer, or leave them. Where it is unset, a surface
//! that can ask after a run (the editor, an ACP client) offers, and the others leave them.

use std::path::Path;

use crate::config::{CommitMode, Config};
use crate::git::commit::CommitError;
use crate::git::run::{self as git_run, RunGitError};
use crate::model::Models;
use crate::store::StoreThread;
use agent_ls_core::agent::RunStatus;
use agent_ls_core::agent::review::Decision;

use crate::drive::Outcome;

/// What became of a run's files after it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterRun {
    /// Left as they are.
    Left,
    /// Committed (`git.commit = "on_success"`): the commit's id and subject.
    Committed { id: String, subject: String },
    /// The commit is for the user to take (`git.commit = "ask"`, in a trusted folder).
    Offer,
    /// The commit was tried and failed, saying why (the files stay).
    Failed(String),
}

/// Whether a run's files may be committed at all.
pub fn eligible(outcome: &Outcome) -> bool {
    outcome.status == RunStatus::Done
        && outcome.checkpoint.is_some()
        && outcome.decision != Some(Decision::RolledBack)
        && !outcome.files_changed.is_empty()
}

/// Commits the run's files, or says they are to be offered, as `git.commit` says; `can_ask`:
/// the surface can ask the user after the run. The commit is noted in `outcome`.
pub async fn after_run(
    store: &StoreThread,
    (root, config, trusted): (&Path, &Config, bool),
    outcome: &mut Outcome,
    can_ask: bool,
) -> AfterRun {
    if !eligible(outcome) {
        return AfterRun::Left;
    }
    let default = if can_ask {
        CommitMode::Ask
    } else {
        CommitMode::Never
    };
    match CommitMode::or_default(config.git.commit, default) {
        CommitMode::Never => AfterRun::Left,
        // Committing runs the repository's hooks, which an untrusted folder may not: asking
        // would only lead to a refusal.
        CommitMode::Ask if trusted && can_ask => AfterRun::Offer,
        CommitMode::Ask => AfterRun::Left,
        CommitMode::OnSuccess => {
            let models = Models::new(config, Some(root));
            let setting = (root, config, trusted);
            let run = Some(outcome.run_id.clone());
            match git_run::commit_recorded(store, setting, Some(&models), run, (None, false)).await
            {
                Ok((_, c)) => {
                    outcome.commit = Some(c.id.clone());
                    outcome.branch = c.branch.or(outcome.branch.take());
                    AfterRun::Committed {
                        id: c.id,
                        subject: c.subject,
                    }
                }
                Err(RunGitError::Commit(CommitError::NothingToCommit)) => AfterRun::Left,
                Err(e) => AfterRun::Failed(e.to_string()),
            }
        }
    }
}
