//! `agent-ls undo`: an agent step undone on the files on disk.

use std::path::PathBuf;
use std::process::ExitCode;

use super::setup::{load_config, open_workspace};

/// Undoes `step` (default: the latest applied one) on the files as they are now.
pub fn run(step: Option<u64>, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let loaded = load_config(Some(root.clone()));
    match agent_ls_runtime::steps::undo(&root, step, &loaded.config.edit.limits()) {
        Ok((id, files)) => {
            println!("undid step {id}: {}", files.join(", "));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("agent-ls: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
