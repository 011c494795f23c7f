//! `agent-ls commit [RUN]` and `agent-ls pr [RUN]`: a run's own files committed as the user
//! with an agent-ls trailer, and the branch holding that commit pushed with its pull request
//! opened (docs/git.md). `agent-ls run` commits through the runtime (`runs::after_run`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::setup::{load_config, open_workspace, warn_untrusted};
use agent_ls_runtime::git::run::{self as git_run, RunGitError};
use agent_ls_runtime::model::Models;
use agent_ls_runtime::store::StoreThread;

fn store(root: &Path) -> StoreThread {
    StoreThread::open(root.to_path_buf(), |opened| {
        if let Ok(Some(notice)) = opened {
            eprintln!("agent-ls: {notice}");
        }
    })
}

/// Commits the run's files (default: the latest run with a checkpoint).
pub fn commit(
    run: Option<String>,
    workspace: Option<PathBuf>,
    message: Option<String>,
    force: bool,
) -> anyhow::Result<ExitCode> {
    let root = super::git::run_home(&open_workspace(workspace)?, run.as_deref());
    // Outside a repository, say so first, as `diff` and `rollback` do.
    agent_ls_runtime::git::Repo::discover(&root)?;
    let loaded = load_config(Some(root.clone()));
    warn_untrusted(&loaded);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let store = store(&root);
    let models = Models::new(&loaded.config, Some(&root));
    let setting = (root.as_path(), &loaded.config, loaded.trusted);
    let made = runtime.block_on(git_run::commit_recorded(
        &store,
        setting,
        Some(&models),
        run,
        (message, force),
    ));
    store.flush_blocking();
    match made {
        Ok((id, c)) => {
            println!(
                "committed run {id} as {} on {}: {}",
                short(&c.id),
                c.branch.as_deref().unwrap_or("a detached HEAD"),
                c.subject
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ (RunGitError::Commit(_) | RunGitError::Untrusted(_))) => {
            eprintln!("agent-ls: {e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => Err(e.into()),
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// Pushes the branch holding the run's commit and opens its pull request.
pub fn pr(run: Option<String>, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let loaded = load_config(Some(root.clone()));
    warn_untrusted(&loaded);
    let store = agent_ls_runtime::drive::recorded_store(&root)?;
    let rec = git_run::record(&store, run.as_deref())?;
    let opened = match git_run::pr_run(&root, &loaded.config, loaded.trusted, &rec) {
        Ok(o) => o,
        Err(e @ (RunGitError::Pr(_) | RunGitError::NoCommit(_) | RunGitError::Untrusted(_))) => {
            eprintln!("agent-ls: {e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    println!("pushed {} ({})", opened.branch, opened.push_command);
    match (&opened.opened, &opened.compare_url) {
        (Some((tool, printed)), _) => {
            println!("opened the pull request with {tool}: {printed}");
        }
        (None, Some(url)) => {
            println!("no gh or glab on PATH; open the pull request at:\n{url}");
            println!("\ntitle: {}\n\n{}", opened.title, opened.body);
        }
        (None, None) => {
            println!(
                "no gh or glab on PATH, and no pull request URL is known for remote `{}` (not GitHub or GitLab); open it from {} into {} by hand",
                loaded.config.git.remote, opened.branch, opened.base
            );
            println!("\ntitle: {}\n\n{}", opened.title, opened.body);
        }
    }
    Ok(ExitCode::SUCCESS)
}
