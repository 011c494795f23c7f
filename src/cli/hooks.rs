//! `agent-ls hooks list|trust|untrust` and `agent-ls permissions`: the hooks configured for a
//! workspace with their hashes and whether each may run, trusting the workspace's hooks by
//! the hash of their exact content, and the permission rules in effect, in checking order.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::hooks::{Hook, Origin, hooks};
use agent_ls_runtime::permissions::{List, Permissions};
use agent_ls_runtime::trust::hooks::HookTrust;

use super::setup::{load_config, workspace_or_cwd};

/// What to do with the hooks.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Action {
    /// Each hook: its event, matcher, command, where it came from, its hash, and whether it
    /// runs (a workspace hook runs once its exact content is trusted).
    List,
    /// Trusts the workspace file's hooks as they are now (read them first: `list`). A hook
    /// changed later has another hash, and is not run until trusted again.
    Trust,
    /// Forgets the trust in this workspace's hooks.
    Untrust,
}

/// `agent-ls hooks ACTION [--workspace DIR] [--json]`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: Action,
    /// The project (default: the current directory).
    #[arg(long, global = true)]
    pub workspace: Option<PathBuf>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

pub fn run(
    Args {
        action,
        workspace,
        json,
    }: Args,
) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = load_config(Some(root.clone()));
    let store = HookTrust::for_user()?;
    let list = hooks(&loaded.config, &root, Some(&store));
    let ours: Vec<String> = list
        .iter()
        .filter(|h| h.origin == Origin::Workspace)
        .map(|h| h.hash.clone())
        .collect();
    match action {
        Action::List if json => println!("{}", serde_json::to_string_pretty(&list)?),
        Action::List => print!("{}", describe(&list)),
        Action::Trust => {
            let real = store.trust(&root, &ours)?;
            println!(
                "trusted {} hook(s) of {} by their content; a changed hook is not run until trusted again",
                ours.len(),
                real.display()
            );
            eprintln!("agent-ls: recorded in {}", store.path().display());
        }
        Action::Untrust => {
            let real = store.trust(&root, &[])?;
            println!("the hooks of {} are no longer trusted", real.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(list: &[Hook]) -> String {
    if list.is_empty() {
        return "no hooks configured\n".into();
    }
    list.iter()
        .map(|h| {
            format!(
                "{} [{}] {} `{}` ({}, {}{}) sha256:{}\n",
                h.config.event.as_str(),
                if h.config.matcher.is_empty() {
                    "*"
                } else {
                    &h.config.matcher
                },
                match h.origin {
                    Origin::User => "user",
                    Origin::Workspace => "workspace",
                },
                h.config.command.join(" "),
                if h.trusted {
                    "runs"
                } else {
                    "NOT TRUSTED: `agent-ls hooks trust`"
                },
                if h.sandboxed() {
                    "sandboxed"
                } else {
                    "unsandboxed"
                },
                format_args!(", {} s", h.config.timeout_secs),
                &h.hash[..16.min(h.hash.len())],
            )
        })
        .collect()
}

/// `agent-ls permissions`: the mode and every rule in effect, in the order they are checked.
pub fn permissions(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = load_config(Some(root));
    let refused = loaded.config.workspace_rules.refused.iter();
    for e in loaded
        .errors
        .iter()
        .map(ToString::to_string)
        .chain(refused.cloned())
    {
        eprintln!("agent-ls: {e}");
    }
    let p = Permissions::from_config(&loaded.config);
    let mode = serde_json::to_value(loaded.config.agent.approval)?;
    let mut rules = p.rules().entries().to_vec();
    rules.sort_by_key(|e| e.list);
    if json {
        let rules: Vec<_> = rules
            .iter()
            .map(|e| serde_json::json!({"list": e.list.as_str(), "rule": e.rule.text(), "from": e.from}))
            .collect();
        println!("{}", serde_json::json!({"mode": mode, "rules": rules}));
    } else {
        println!("mode: {}", mode.as_str().unwrap_or("?"));
        for e in &rules {
            let list = match e.list {
                List::Deny => "deny ",
                List::Ask => "ask  ",
                List::Allow => "allow",
            };
            println!("{list} {:<32} ({})", e.rule.text(), e.from);
        }
    }
    Ok(ExitCode::SUCCESS)
}
