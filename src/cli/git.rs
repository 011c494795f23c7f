//! `agent-ls diff`, `rollback` and `gc`: a run's change against its git checkpoint, the run
//! rolled back as a whole, and old checkpoints dropped (docs/git.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::setup::{load_config, open_workspace};
use agent_ls_runtime::drive::{RecordedRun, recorded_run, recorded_store};
use agent_ls_runtime::git::checkpoint::{self, RollbackError};
use agent_ls_runtime::git::{GitError, Repo, isolate};

/// Where the run `run` (default: the latest with a checkpoint) is recorded: the workspace, or
/// the worktree an isolated run (`run --isolated`) worked and recorded in, said on stderr.
/// Without an id, the newest run of them all.
pub fn run_home(root: &Path, run: Option<&str>) -> PathBuf {
    let prefix = Repo::discover(root).map(|r| r.prefix).unwrap_or_default();
    let mut best: Option<(i64, PathBuf)> = None;
    for home in std::iter::once(root.to_path_buf()).chain(isolate::run_roots(root, &prefix)) {
        let started = recorded_store(&home)
            .ok()
            .and_then(|s| s.git_run_started(run).ok());
        if let Some(Some(ms)) = started
            && best.as_ref().is_none_or(|(b, _)| ms > *b)
        {
            best = Some((ms, home));
        }
    }
    match best {
        Some((_, home)) if home != root => {
            eprintln!(
                "agent-ls: the run worked in the worktree {} (run --isolated)",
                home.display()
            );
            home
        }
        _ => root.to_path_buf(),
    }
}

/// The recorded run `run` (default: the latest with a checkpoint) and its repository.
fn recorded(root: &Path, run: Option<&str>) -> anyhow::Result<(Repo, RecordedRun)> {
    let root = &run_home(root, run);
    let repo = Repo::discover(root)?;
    let run = recorded_run(root, &repo, run)?;
    if run.interrupted {
        eprintln!(
            "agent-ls: run {} did not finish; its files are taken from the steps it recorded",
            run.run_id
        );
    }
    Ok((repo, run))
}

/// Prints the run's change (checkpoint to the files as they are now) as a unified diff.
pub fn diff(run: Option<String>, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let (repo, run) = recorded(&root, run.as_deref())?;
    let names: Vec<String> = run.files.keys().cloned().collect();
    let patch = checkpoint::diff(&repo, &run.checkpoint, &names)?;
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
    let (repo, run) = recorded(&root, run.as_deref())?;
    let id = &run.run_id;
    let rolled = checkpoint::rollback(&repo, &run.checkpoint, &run.files, force);
    if rolled
        .as_ref()
        .is_ok_and(|r| !r.done.is_empty() || !r.already.is_empty())
    {
        let memory = load_config(Some(root.clone())).config.memory;
        agent_ls_runtime::memory::note_rollback(&root, &memory, id);
    }
    match rolled {
        Ok(r) if r.done.is_empty() && r.already.is_empty() => {
            println!("run {id} changed no files")
        }
        Ok(r) if r.done.is_empty() => println!(
            "run {id} is rolled back already: its files hold the checkpoint's content ({})",
            r.already.join(", ")
        ),
        Ok(r) => println!("rolled back run {id}: {}", r.done.join(", ")),
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
