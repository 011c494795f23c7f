//! `agent-ls trust` and `agent-ls untrust`: the user's decision about a folder, recorded in
//! the user's trust file.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::trust::{Decision, TrustStore};

use super::setup::workspace_or_cwd;

/// Records `decision` for `dir` (default: the current directory).
pub fn run(dir: Option<PathBuf>, decision: Decision) -> anyhow::Result<ExitCode> {
    let dir = workspace_or_cwd(dir)?;
    let store = TrustStore::for_user()?;
    let real = store.set(&dir, decision)?;
    if decision == Decision::Trusted {
        println!(
            "trusted {}: its .agent-ls.toml may now set the keys that run programs, name servers, send data or approve",
            real.display()
        );
    } else {
        println!(
            "{} is no longer trusted: its .agent-ls.toml's trust-only keys are ignored",
            real.display()
        );
    }
    eprintln!("agent-ls: recorded in {}", store.path().display());
    Ok(ExitCode::SUCCESS)
}
