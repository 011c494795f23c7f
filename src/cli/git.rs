//! `agent-ls diff`, `rollback` and `gc`: a run's change against its git checkpoint, the run
//! rolled back as a whole, and old checkpoints dropped (docs/git.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::setup::{load_config, open_workspace};
use std::collections::BTreeMap;

use agent_ls_runtime::drive::{RecordedRun, recorded_run};
use agent_ls_runtime::git::checkpoint;
use agent_ls_runtime::git::{GitError, Repo};
use agent_ls_runtime::runs::rollback::{self, Target};

/// Where the run `run` (default: the latest with a checkpoint) is recorded: the workspace, or
/// the worktree an isolated run (`run --isolated`) worked and recorded in, said on stderr.
pub fn run_home(root: &Path, run: Option<&str>) -> PathBuf {
    let home = rollback::home_of(root, run);
    if home != root {
        eprintln!(
            "agent-ls: the run worked in the worktree {} (run --isolated)",
            home.display()
        );
    }
    home
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
    let home = run_home(&root, run.as_deref());
    let planned = match rollback::plan(&root, &Target::Run(run), force, &BTreeMap::new()) {
        Ok(p) => p,
        Err(e) => {
            let id = e.refusal().map(|(id, _)| id.to_string());
            let Some(id) = id else {
                return Err(e.into());
            };
            eprintln!("agent-ls: run {id}: {e} (--force rolls back anyway)");
            return Ok(ExitCode::from(1));
        }
    };
    let id = &planned.id;
    if planned.interrupted {
        eprintln!(
            "agent-ls: run {id} did not finish; its files are taken from the steps it recorded"
        );
    }
    let done = rollback::write(&planned)?;
    if !done.is_empty() {
        let memory = load_config(Some(home)).config.memory;
        rollback::settle(&planned, &memory)?;
    }
    if !done.is_empty() {
        println!("rolled back run {id}: {}", done.join(", "));
    } else if !planned.already.is_empty() {
        println!(
            "run {id} is rolled back already: its files hold the checkpoint's content ({})",
            planned.already.join(", ")
        );
    } else {
        println!("run {id} changed no files");
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
