//! `agent-ls doctor`: every configured model checked, and the sandbox tried, with how to fix
//! what fails.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::setup::{load_config, warn_untrusted, workspace_or_cwd};

/// Runs every check; exits 1 when one fails or the configuration has errors.
pub fn run(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = load_config(Some(root.clone()));
    for err in &loaded.errors {
        eprintln!("agent-ls: {err}");
    }
    warn_untrusted(&loaded);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let models = agent_ls_runtime::model::Models::new(&loaded.config, Some(&root));
    let mut checks = runtime.block_on(agent_ls_runtime::model::doctor::run(&models));
    let sandbox = agent_ls_runtime::trust::sandbox::Sandbox::from_config(&loaded.config.sandbox);
    let probe = sandbox.probe(&root);
    checks.push(agent_ls_runtime::model::doctor::Check {
        target: "sandbox".into(),
        check: "confines a command",
        ok: probe.is_ok(),
        detail: probe.unwrap_or_else(|why| why.to_string()),
    });
    checks.push(agent_ls_runtime::model::doctor::Check {
        target: "sandbox".into(),
        check: "limits",
        ok: true,
        detail: sandbox.describe_limits(),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            println!(
                "{} {} {}: {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.target,
                c.check,
                c.detail
            );
        }
    }
    let failed = checks.iter().any(|c| !c.ok) || !loaded.errors.is_empty();
    if !json {
        println!(
            "{}",
            if failed {
                "some checks failed"
            } else {
                "every check passed"
            }
        );
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
