//! `agent-ls diff`, `rollback` and `gc`: a run's change against its git checkpoint, the run
//! rolled back as a whole, and old checkpoints dropped (docs/git.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

use super::setup::{load_config, open_workspace};
use agent_ls_runtime::drive::recorded_store;
use agent_ls_runtime::git::checkpoint::{self, RollbackError, RunFiles};
use agent_ls_runtime::git::{GitError, Repo};

/// A recorded run's id, checkpoint and what it left in the files it changed.
fn recorded(
    root: &std::path::Path,
    run: Option<&str>,
) -> anyhow::Result<(String, String, RunFiles)> {
    let store = recorded_store(root)?;
    let Some((id, commit, files)) = store.git_run(run)? else {
        match run {
            Some(r) => {
                bail!("run {r} has no git checkpoint (it wrote nothing, or not in a repository)")
            }
            None => bail!("no run has a git checkpoint here yet"),
        }
    };
    let Some(files) = files else {
        bail!(
            "run {id} did not finish, so what it changed is not known; its checkpoint is {commit}"
        )
    };
    let files: RunFiles = serde_json::from_str(&files).context("the run's files are unreadable")?;
    Ok((id, commit, files))
}

fn repo(root: &std::path::Path) -> anyhow::Result<Repo> {
    Ok(Repo::discover(root)?)
}

/// Prints the run's change (checkpoint to the files as they are now) as a unified diff.
pub fn diff(run: Option<String>, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let (_, commit, files) = recorded(&root, run.as_deref())?;
    let repo = repo(&root)?;
    let names: Vec<String> = files.keys().cloned().collect();
    let patch = checkpoint::diff(&repo, &commit, &names)?;
    std::io::stdout().write_all(&patch)?;
    Ok(ExitCode::SUCCESS)
}

/// Restores the files the run changed from its checkpoint, and deletes those it created.
pub fn rollback(
    run: Option<String>,
    workspace: Option<PathBuf>,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let (id, commit, files) = recorded(&root, run.as_deref())?;
    let repo = repo(&root)?;
    match checkpoint::rollback(&repo, &commit, &files, force) {
        Ok(done) if done.is_empty() => println!("run {id} changed no files"),
        Ok(done) => println!("rolled back run {id}: {}", done.join(", ")),
        Err(e @ (RollbackError::ChangedSince(_) | RollbackError::LeftOut(_))) => {
            eprintln!("agent-ls: run {id}: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Drops all but the newest `git.keep_checkpoints` checkpoint refs.
pub fn gc(workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let keep = load_config(Some(root.clone())).config.git.keep_checkpoints;
    let repo = match Repo::discover(&root) {
        Ok(r) => r,
        Err(GitError::NotARepo(_)) => {
            println!("not a git repository: no checkpoints to drop");
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let dropped = checkpoint::gc(&repo, keep)?;
    println!(
        "dropped {} checkpoint(s), kept the last {keep}{}",
        dropped.len(),
        if dropped.is_empty() {
            String::new()
        } else {
            format!(": {}", dropped.join(", "))
        }
    );
    Ok(ExitCode::SUCCESS)
}
