//! `agent-ls apply`: an edit plan (JSON, SEARCH/REPLACE blocks or a unified diff) on the files
//! on disk, through the same edit engine the agent uses; a diff, or the files written.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use agent_ls_core::edit;
use agent_ls_runtime::files;

use super::setup::{load_config, workspace_or_cwd};

/// Applies the plan in `plan_path` (`-` for stdin): exits 0 when every edit applied, 2 when
/// some did (nothing is written then), 1 when none did.
pub fn run(
    plan_path: &Path,
    workspace: Option<PathBuf>,
    write: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot open the workspace {}", root.display()))?;
    let answer = if plan_path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("cannot read the plan from stdin")?
    } else {
        std::fs::read_to_string(plan_path)
            .with_context(|| format!("cannot read the plan {}", plan_path.display()))?
    };
    let plan = edit::parse_plan(&answer)
        .with_context(|| format!("cannot parse the plan {}", plan_path.display()))?;
    let loaded = load_config(Some(root.clone()));
    let outcome = files::plan_on_disk(&plan, &root, &loaded.config.edit.limits());
    let all = outcome.all_applied();
    let some = outcome
        .reports
        .iter()
        .any(|r| !matches!(r.status, edit::EditStatus::Refused { .. }));
    let written = if write && all && !outcome.changes.is_empty() {
        files::write_changes(&root, &outcome.changes).map_err(anyhow::Error::msg)?;
        true
    } else {
        false
    };
    if json {
        let files: Vec<_> = outcome
            .changes
            .iter()
            .map(|c| serde_json::json!({"path": c.path, "created": c.creates(), "diff": edit::file_diff(c)}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "all_applied": all,
                "written": written,
                "edits": outcome.reports,
                "files": files,
            }))?
        );
    } else {
        print!("{}", outcome.unified_diff());
        eprint!("{}", outcome.refusal_report());
        if write && !written && !all {
            eprintln!("agent-ls: nothing was written because not every edit applied");
        }
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else if some {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    })
}
