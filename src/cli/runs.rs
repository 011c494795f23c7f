//! `agent-ls runs`: the run journals of a workspace, newest first.

use std::path::PathBuf;
use std::process::ExitCode;

use super::setup::workspace_or_cwd;

/// Lists the run journals, as a table or as JSON.
pub fn run(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let runs = agent_ls_runtime::journal::list(&root);
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else if runs.is_empty() {
        println!(
            "no recorded runs in {}",
            root.join(agent_ls_runtime::journal::DIR).display()
        );
    } else {
        for r in &runs {
            println!(
                "{}  {:<11}  {}  ({})",
                r.run_id,
                r.status.as_str(),
                r.goal,
                r.path
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
