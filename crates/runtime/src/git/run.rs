//! A run's commit and pull request as every surface makes them (the CLI, the editor, ACP):
//! the run's record from the store, its message, the commit made as the user and recorded
//! with the run, and the push and request that follow. Both run the repository's own
//! programs (hooks, filters, credential helpers), so they need a trusted folder.

use std::path::Path;

use super::checkpoint::RunFiles;
use super::commit::{self, CommitError, CommitOptions, Committed};
use super::pr::{self, PrError};
use super::{GitError, Repo, message};
use crate::config::Config;
use crate::model::Models;
use crate::store::{Store, StoreError, StoreThread};

/// What the store holds of a run, for its commit and request.
#[derive(Debug, Clone)]
pub struct RunRecord {
    pub run_id: String,
    pub checkpoint: String,
    /// What the run left in each file it changed.
    pub files: RunFiles,
    /// The commit made of its files, if one was.
    pub commit: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunGitError {
    #[error("run {0} has no git checkpoint (it wrote nothing, or not in a repository)")]
    NoCheckpoint(String),
    #[error("there is no run {0} here; `agent-ls runs` lists this workspace's runs")]
    Unknown(String),
    #[error("no run has a git checkpoint here yet")]
    NoRun,
    #[error("run {0} did not finish, so what it changed is not known")]
    NotFinished(String),
    #[error("the run's files are unreadable: {0}")]
    Unreadable(String),
    #[error(
        "this folder is not trusted, and {0} runs the repository's own programs (git hooks, filters, credential helpers); `agent-ls trust` trusts it"
    )]
    Untrusted(&'static str),
    #[error("run {0} changed no files: nothing to commit")]
    NoFiles(String),
    #[error("run {0} has no commit yet; `agent-ls commit {0}` makes one")]
    NoCommit(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the store cannot be opened, so the run's record is not known")]
    NoStore,
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Commit(#[from] CommitError),
    #[error(transparent)]
    Pr(#[from] PrError),
}

/// The run `run` (default: the latest with a checkpoint) as the store has it.
pub fn record(store: &Store, run: Option<&str>) -> Result<RunRecord, RunGitError> {
    let Some((run_id, checkpoint, files)) = store.git_run(run)? else {
        return Err(match run {
            Some(r) if store.resume_point(r)?.is_none() => RunGitError::Unknown(r.to_string()),
            Some(r) => RunGitError::NoCheckpoint(r.to_string()),
            None => RunGitError::NoRun,
        });
    };
    let files = files.ok_or_else(|| RunGitError::NotFinished(run_id.clone()))?;
    let files: RunFiles =
        serde_json::from_str(&files).map_err(|e| RunGitError::Unreadable(e.to_string()))?;
    let commit = store.git_commit_of(&run_id)?;
    Ok(RunRecord {
        run_id,
        checkpoint,
        files,
        commit,
    })
}

/// Commits the run's files with `message`, or one the model writes (`models`), or the plain
/// one. The caller records the commit with the run (`Store::git_commit`).
pub async fn commit_run(
    root: &Path,
    config: &Config,
    trusted: bool,
    models: Option<&Models>,
    rec: &RunRecord,
    (message, force): (Option<String>, bool),
) -> Result<Committed, RunGitError> {
    if !trusted {
        return Err(RunGitError::Untrusted("committing"));
    }
    if rec.files.is_empty() {
        return Err(RunGitError::NoFiles(rec.run_id.clone()));
    }
    let repo = blocking({
        let root = root.to_path_buf();
        move || Repo::discover(&root)
    })
    .await?;
    let message = match message {
        Some(m) => m,
        None => {
            let names: Vec<String> = rec.files.keys().cloned().collect();
            let report = message::report(root, &rec.run_id, &names);
            match models {
                Some(models) => {
                    let (repo, id) = (repo.clone(), rec.checkpoint.clone());
                    let diff = blocking(move || super::checkpoint::diff(&repo, &id, &names))
                        .await
                        .unwrap_or_default();
                    message::write(models, &report, &diff).await
                }
                None => message::fallback(&report),
            }
        }
    };
    let (no_verify, files, checkpoint) = (
        config.git.no_verify,
        rec.files.clone(),
        rec.checkpoint.clone(),
    );
    let made = blocking(move || {
        let opts = CommitOptions {
            no_verify,
            force,
            since: super::checkpoint::taken_at(&repo, &checkpoint),
        };
        commit::commit(&repo, &files, &message, opts)
    })
    .await?;
    Ok(made)
}

/// Commits run `run`'s files (default: the latest run with a checkpoint) through the store's
/// thread, and records the commit with the run.
pub async fn commit_recorded(
    store: &StoreThread,
    (root, config, trusted): (&Path, &Config, bool),
    models: Option<&Models>,
    run: Option<String>,
    (message, force): (Option<String>, bool),
) -> Result<(String, Committed), RunGitError> {
    let rec = store
        .call(move |s| record(s, run.as_deref()))
        .await
        .ok_or(RunGitError::NoStore)??;
    let made = commit_run(root, config, trusted, models, &rec, (message, force)).await?;
    let (id, commit) = (rec.run_id.clone(), made.id.clone());
    store.send("the run's commit", move |s| s.git_commit(&id, &commit));
    Ok((rec.run_id, made))
}

/// Runs `f` on a blocking thread; a panic there is reported as git's I/O failing.
async fn blocking<T: Send + 'static, E: From<GitError> + Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, E> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(GitError::Io(std::io::Error::other(e.to_string())).into()),
    }
}

/// What `agent-ls pr` did.
#[derive(Debug, Clone)]
pub struct Opened {
    pub branch: String,
    pub base: String,
    /// The push command, as the user would type it.
    pub push_command: String,
    /// The tool that opened the request and what it printed (the request's URL).
    pub opened: Option<(String, String)>,
    /// The page to open the request by hand, when the remote's host is known.
    pub compare_url: Option<String>,
    pub title: String,
    pub body: String,
}

/// Pushes the branch holding the run's commit and opens its request (blocking).
pub fn pr_run(
    root: &Path,
    config: &Config,
    trusted: bool,
    rec: &RunRecord,
) -> Result<Opened, RunGitError> {
    if !trusted {
        return Err(RunGitError::Untrusted("pushing"));
    }
    let commit = rec
        .commit
        .clone()
        .ok_or_else(|| RunGitError::NoCommit(rec.run_id.clone()))?;
    let repo = Repo::discover(root)?;
    let plan = pr::plan(&repo, &config.git.remote, &commit)?;
    let subject = repo
        .git(None)
        .run(&["log", "-1", "--format=%s", &commit], None)?;
    let title = String::from_utf8_lossy(&subject).trim().to_string();
    let names: Vec<String> = rec.files.keys().cloned().collect();
    let body = message::pr_body(&message::report(root, &rec.run_id, &names), &commit);
    pr::push(&repo, &plan, config.git.no_verify)?;
    let opened = match pr::tool(&plan.host) {
        Some((name, program)) => {
            let printed = pr::open(&repo, &plan, (name, &program), &title, &body)?;
            Some((name.to_string(), printed))
        }
        None => None,
    };
    Ok(Opened {
        compare_url: pr::compare_url(&plan.host, &plan.base, &plan.branch),
        push_command: plan.push_command(),
        branch: plan.branch,
        base: plan.base,
        opened,
        title,
        body,
    })
}
