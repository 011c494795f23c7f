//! A run's commit and pull request from the editor: the commands `agent-ls.commit` and
//! `agent-ls.pr`, and after a successful run the commit `git.commit` asks for ("ask": a
//! window/showMessageRequest, "on_success": at once). The git work happens here, on the
//! command's or the run's task, never on the session's.

use std::path::PathBuf;

use serde_json::{Value, json};
use tower_lsp_server::ls_types::MessageType;
use tower_lsp_server::ls_types::notification::Notification;

use super::outbox::Outbox;
use agent_ls_runtime::config::Config;
use agent_ls_runtime::drive::Outcome;
use agent_ls_runtime::git::commit::{CommitError, Committed};
use agent_ls_runtime::git::run::{self as git_run, RunGitError};
use agent_ls_runtime::model::Models;
use agent_ls_runtime::runs::{self, AfterRun};
use agent_ls_runtime::store::StoreThread;

/// Notification `agent-ls/runCommitted`: a run's files were committed after its end.
pub enum RunCommitted {}

impl Notification for RunCommitted {
    type Params = Value;
    const METHOD: &'static str = super::ext::RUN_COMMITTED;
}

/// What a commit or a request needs from the session: the folder, its configuration and
/// trust, and its store.
pub struct GitContext {
    pub root: PathBuf,
    pub config: Config,
    pub trusted: bool,
    pub store: StoreThread,
}

/// The answer of `agent-ls.commit` and the `agent-ls/runCommitted` notification.
fn committed_json(run_id: &str, c: &Committed) -> Value {
    json!({
        "run_id": run_id,
        "commit": c.id,
        "branch": c.branch,
        "subject": c.subject,
        "files": c.files,
    })
}

/// `agent-ls.commit {run?}`: commits the run's files (default: the latest run's).
pub async fn commit(cx: GitContext, run: Option<String>) -> Result<Value, RunGitError> {
    let models = Models::new(&cx.config, Some(&cx.root));
    let setting = (cx.root.as_path(), &cx.config, cx.trusted);
    let (id, c) =
        git_run::commit_recorded(&cx.store, setting, Some(&models), run, (None, false)).await?;
    Ok(committed_json(&id, &c))
}

/// `agent-ls.pr {run?}`: pushes the branch holding the run's commit and opens its request.
pub async fn pr(cx: GitContext, run: Option<String>) -> Result<Value, RunGitError> {
    let rec = cx
        .store
        .call(move |s| git_run::record(s, run.as_deref()))
        .await
        .ok_or(RunGitError::NoStore)??;
    let opened = tokio::task::spawn_blocking(move || {
        git_run::pr_run(&cx.root, &cx.config, cx.trusted, &rec)
    })
    .await
    .map_err(|e| {
        RunGitError::Git(agent_ls_runtime::git::GitError::Io(std::io::Error::other(
            e.to_string(),
        )))
    })??;
    Ok(json!({
        "branch": opened.branch,
        "base": opened.base,
        "push_command": opened.push_command,
        "opened_with": opened.opened.as_ref().map(|(tool, _)| tool),
        "url": opened.opened.as_ref().map(|(_, printed)| printed),
        "compare_url": opened.compare_url,
    }))
}

/// After a run ended done with a checkpoint: with `on_success` its files are committed now
/// (so runFinished carries the commit). Returns whether to ask the user afterwards.
pub async fn on_success(cx: &GitContext, outcome: &mut Outcome, outbox: &Outbox) -> bool {
    let setting = (cx.root.as_path(), &cx.config, cx.trusted);
    match runs::after_run(&cx.store, setting, outcome, true).await {
        AfterRun::Offer => true,
        AfterRun::Committed { id, subject } => {
            let short = &id[..id.len().min(12)];
            outbox.show_message(
                MessageType::INFO,
                format!("agent-ls: committed {short}: {subject}"),
            );
            false
        }
        AfterRun::Failed(why) => {
            outbox.show_message(
                MessageType::WARNING,
                format!("agent-ls: the run's files were not committed: {why}"),
            );
            false
        }
        AfterRun::Left => false,
    }
}

/// The commit offered as a notice, for a client that asks every question in one line
/// (eglot alone): the files are left uncommitted and the notice says how to commit them.
pub fn offer(outcome: &Outcome) -> String {
    let n = outcome.files_changed.len();
    format!(
        "agent-ls: the run's {n} file{} ({}) are not committed; the code action Agent: Commit (M-x eglot-code-actions) or `agent-ls commit` commits them, and Agent: Undo takes the change back",
        if n == 1 { "" } else { "s" },
        outcome.files_changed.join(", ")
    )
}

/// Asks whether to commit the run's files ("Commit" / "Not now") and commits on "Commit";
/// the commit is told with `agent-ls/runCommitted`.
pub async fn ask(cx: &GitContext, outcome: &Outcome, outbox: &Outbox) {
    let n = outcome.files_changed.len();
    let question = format!(
        "agent-ls: commit the run's {n} file{} ({})?",
        if n == 1 { "" } else { "s" },
        outcome.files_changed.join(", ")
    );
    let answer = outbox
        .ask(MessageType::INFO, question, &["Not now", "Commit"])
        .await;
    if answer.as_deref() != Some("Commit") {
        return;
    }
    if let Some(c) = commit_run(cx, &outcome.run_id, outbox).await {
        outbox.notify::<RunCommitted>(committed_json(&outcome.run_id, &c));
    }
}

/// Commits the run's files, telling the user what became of it.
async fn commit_run(cx: &GitContext, run_id: &str, outbox: &Outbox) -> Option<Committed> {
    let models = Models::new(&cx.config, Some(&cx.root));
    let setting = (cx.root.as_path(), &cx.config, cx.trusted);
    let made = git_run::commit_recorded(
        &cx.store,
        setting,
        Some(&models),
        Some(run_id.to_string()),
        (None, false),
    )
    .await;
    match made {
        Ok((_, c)) => {
            let short = &c.id[..c.id.len().min(12)];
            outbox.show_message(
                MessageType::INFO,
                format!("agent-ls: committed {short}: {}", c.subject),
            );
            Some(c)
        }
        Err(RunGitError::Commit(CommitError::NothingToCommit)) => None,
        Err(e) => {
            outbox.show_message(
                MessageType::WARNING,
                format!("agent-ls: the run's files were not committed: {e}"),
            );
            None
        }
    }
}
