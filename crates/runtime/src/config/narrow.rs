//! What a workspace file may say about permissions and hooks, taken out of its layer before
//! the layers merge: its `[permissions]` and `[[hooks]]` are kept apart (it may only narrow,
//! and its hooks run once trusted by hash), and it may never choose a mode that applies
//! without asking (`auto`, `accept-edits`), trusted folder or not.

use super::schema::Config;
use agent_ls_core::permissions::{PermissionsConfig, allowed_command_words, workspace_may_choose};

/// The workspace file's sections, taken out of its layer, and the keys it was refused.
#[derive(Debug, Default)]
pub struct Taken {
    permissions: Option<toml::Value>,
    hooks: Option<toml::Value>,
    /// What was left out and why, for the user.
    refused: Vec<String>,
}

/// Takes `[permissions]` and `[[hooks]]` out of the workspace file's `table`, and the modes
/// it may not choose (`agent.approval`, `agents.NAME.approval`).
pub fn take(table: &mut toml::Table) -> Taken {
    let mut taken = Taken {
        permissions: table.remove("permissions"),
        hooks: table.remove("hooks"),
        refused: Vec::new(),
    };
    let mut refuse = |key: String, section: &mut toml::Table| {
        let mode = section.get("approval").and_then(|v| v.as_str());
        if let Some(mode) = mode.filter(|m| !workspace_may_choose(m)) {
            taken.refused.push(format!(
                "the workspace file's {key} = \"{mode}\" is ignored: a workspace file cannot choose a mode that applies changes without asking (docs/permissions.md)"
            ));
            section.remove("approval");
        }
    };
    if let Some(toml::Value::Table(agent)) = table.get_mut("agent") {
        refuse("agent.approval".into(), agent);
    }
    if let Some(toml::Value::Table(agents)) = table.get_mut("agents") {
        for (name, agent) in agents.iter_mut() {
            if let toml::Value::Table(agent) = agent {
                refuse(format!("agents.{name}.approval"), agent);
            }
        }
    }
    taken
}

/// Puts the workspace's sections into `config` beside the user's, and lets the command
/// rules the user (and a trusted workspace) allow reach the test runner's allowlist.
pub fn finish(config: &mut Config, taken: Taken, trusted: bool) {
    let rules = &mut config.workspace_rules;
    rules.trusted = trusted;
    rules.refused = taken.refused;
    rules.permissions = taken
        .permissions
        .and_then(|v| v.try_into::<PermissionsConfig>().ok())
        .unwrap_or_default();
    rules.hooks = taken
        .hooks
        .and_then(|v| v.try_into().ok())
        .unwrap_or_default();
    for words in allowed_command_words(&config.permissions, &config.workspace_rules) {
        if !config.test.allowlist.contains(&words) {
            config.test.allowlist.push(words);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_file_loses_auto_but_keeps_plan() {
        let mut table: toml::Table = toml::from_str(
            "[agent]\napproval = \"auto\"\n[agents.x]\napproval = \"accept-edits\"\n[permissions]\ndeny = [\"edit(a)\"]\n[[hooks]]\nevent = \"after_run\"\ncommand = [\"true\"]\n",
        )
        .unwrap();
        let taken = take(&mut table);
        assert_eq!(taken.refused.len(), 2, "{:?}", taken.refused);
        assert!(table.get("permissions").is_none() && table.get("hooks").is_none());
        let mut config = Config::default();
        finish(&mut config, taken, false);
        assert_eq!(config.workspace_rules.permissions.deny.len(), 1);
        assert_eq!(config.workspace_rules.hooks.len(), 1);
        let mut table: toml::Table = toml::from_str("[agent]\napproval = \"plan\"\n").unwrap();
        assert!(take(&mut table).refused.is_empty());
        assert!(table["agent"].get("approval").is_some());
    }
}
