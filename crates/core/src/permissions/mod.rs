//! Permission rules and hooks as the configuration states them, pure: the rules' matching
//! (`rules`: deny, then ask, then allow), the `[permissions]` section (`config`) and the
//! `[[hooks]]` entry (`hooks`). The runtime checks them at a run's check points and runs
//! the hooks.

pub mod config;
pub mod hooks;
pub mod rules;

pub use config::{PermissionsConfig, RuleText, WorkspaceRules};
pub use hooks::{HookConfig, HookEvent};
pub use rules::{Action, Decision, Entry, List, Rule, RuleError, Rules};

/// The argument vector of a `run_command` call (`{"argv": [...]}`): its strings, or none.
pub fn argv_of(arguments: &serde_json::Value) -> Vec<String> {
    arguments
        .get("argv")
        .and_then(|a| a.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a workspace file may choose the approval `mode`: it may narrow (plan, confirm,
/// prompt) but never choose to apply without asking.
pub fn workspace_may_choose(mode: &str) -> bool {
    !matches!(mode, "auto" | "accept-edits")
}

/// The words of the command allow rules in effect (the user's, and a trusted workspace's),
/// for the test runner's allowlist, which lets a command run at all; whether the rule is
/// exact or a prefix is checked before the command runs.
pub fn allowed_command_words(user: &PermissionsConfig, workspace: &WorkspaceRules) -> Vec<String> {
    let trusted = workspace.trusted.then_some(&workspace.permissions.allow);
    user.allow
        .iter()
        .chain(trusted.into_iter().flatten())
        .filter_map(RuleText::rule)
        .filter_map(|r| r.command_words().map(|(w, _)| w.join(" ")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_never_chooses_to_apply_without_asking() {
        assert!(!workspace_may_choose("auto"));
        assert!(!workspace_may_choose("accept-edits"));
        assert!(workspace_may_choose("plan"));
        assert!(workspace_may_choose("confirm"));
    }

    #[test]
    fn an_untrusted_workspace_allows_no_command() {
        let allow = PermissionsConfig {
            allow: vec![RuleText::try_from("command(curl *)".to_string()).unwrap()],
            ..PermissionsConfig::default()
        };
        let mut ws = WorkspaceRules {
            permissions: allow,
            ..WorkspaceRules::default()
        };
        let user = PermissionsConfig::default();
        assert!(allowed_command_words(&user, &ws).is_empty());
        ws.trusted = true;
        assert_eq!(allowed_command_words(&user, &ws), vec!["curl".to_string()]);
    }
}
