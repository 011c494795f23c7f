//! `agent-ls config`: the effective configuration, and where each value came from.

use std::path::PathBuf;
use std::process::ExitCode;

use super::setup::{load_config, warn_untrusted, workspace_or_cwd};

/// Prints every key with its value and source; exits 3 when the configuration has errors.
pub fn run(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = load_config(Some(root.clone()));
    warn_untrusted(&loaded);
    let entries = loaded.entries();
    // What a run here starts with besides the keys: its instruction files and skills.
    let (mut tracker, _) = agent_ls_runtime::instructions::Tracker::new(&root, &loaded.config);
    let told = tracker.prompt();
    if json {
        let items: Vec<_> = entries
            .iter()
            .map(|(key, value, source)| {
                serde_json::json!({"key": key, "value": value, "source": source.to_string()})
            })
            .collect();
        let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"entries": items, "errors": errors,
                "instructions": told.joined.used, "skills": told.skills}))?
        );
    } else {
        for (key, value, source) in &entries {
            let shown = if value.is_null() {
                "(unset)".to_string()
            } else {
                value.to_string()
            };
            println!("{key} = {shown}    # {source}");
        }
        for used in &told.joined.used {
            println!("# instruction file {}: {} bytes", used.path, used.bytes);
        }
        for name in &told.skills {
            println!("# skill {name}");
        }
        for err in &loaded.errors {
            eprintln!("agent-ls: {err}");
        }
    }
    Ok(if loaded.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
