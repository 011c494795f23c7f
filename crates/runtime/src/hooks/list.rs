//! The hooks of a workspace: the user's and the workspace file's, each with the hash of its
//! content and whether it may run (a workspace hook once that hash is trusted).

use std::path::Path;

use serde::Serialize;

use crate::config::Config;
use crate::trust::hooks::{HookTrust, hook_hash};
use crate::trust::store::TrustError;
use agent_ls_core::permissions::HookConfig;

/// Where a hook came from, which decides whether it needs trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    User,
    Workspace,
}

/// A configured hook, where it came from and whether it may run.
#[derive(Debug, Clone, Serialize)]
pub struct Hook {
    #[serde(flatten)]
    pub config: HookConfig,
    pub origin: Origin,
    /// The hash of its content (the entry and the files it names), as trusted.
    pub hash: String,
    /// A user's hook always; a workspace hook once its hash is trusted.
    pub trusted: bool,
}

impl Hook {
    /// Whether it runs in the sandbox: a workspace hook always does.
    pub fn sandboxed(&self) -> bool {
        self.config.sandbox || self.origin == Origin::Workspace
    }
}

/// Every hook of the configuration for `root`, with its trust looked up in `trust`.
pub fn hooks(config: &Config, root: &Path, trust: Option<&HookTrust>) -> Vec<Hook> {
    let user = config.hooks.iter().map(|h| (h, Origin::User));
    let ws = config
        .workspace_rules
        .hooks
        .iter()
        .map(|h| (h, Origin::Workspace));
    user.chain(ws)
        .map(|(h, origin)| {
            let hash = hook_hash(h, root);
            let trusted =
                origin == Origin::User || trust.is_some_and(|t| t.is_trusted(root, &hash));
            Hook {
                config: h.clone(),
                origin,
                hash,
                trusted,
            }
        })
        .collect()
}

/// Trusts the workspace hook whose content has `hash` (the editor's question), keeping the
/// trust of the workspace's other hooks as they are now: the record holds only current
/// hashes, as after `agent-ls hooks trust`, so an old version cannot come back trusted.
/// `false`: no hook of the workspace has that hash any more (it changed since it was asked
/// about), and nothing was trusted.
pub fn trust_one(
    config: &Config,
    root: &Path,
    store: &HookTrust,
    hash: &str,
) -> Result<bool, TrustError> {
    let current = hooks(config, root, Some(store));
    let keep: Vec<String> = current
        .iter()
        .filter(|h| h.origin == Origin::Workspace && (h.trusted || h.hash == hash))
        .map(|h| h.hash.clone())
        .collect();
    if !keep.iter().any(|h| h == hash) {
        return Ok(false);
    }
    store.trust(root, &keep)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::permissions::HookEvent;

    fn hook(event: HookEvent, matcher: &str) -> HookConfig {
        HookConfig {
            event,
            matcher: matcher.into(),
            command: vec!["true".into()],
            timeout_secs: 1,
            sandbox: true,
        }
    }

    #[test]
    fn a_matcher_takes_tool_names_or_paths_and_empty_takes_all() {
        assert!(hook(HookEvent::BeforeTool, "").applies(HookEvent::BeforeTool, &["grep"]));
        assert!(!hook(HookEvent::BeforeTool, "").applies(HookEvent::AfterTool, &["grep"]));
        let h = hook(HookEvent::BeforeTool, "mcp__*");
        assert!(h.applies(HookEvent::BeforeTool, &["mcp__github__x"]));
        assert!(!h.applies(HookEvent::BeforeTool, &["run_command"]));
        let h = hook(HookEvent::BeforeChange, "src/**/*.py");
        assert!(h.applies(HookEvent::BeforeChange, &["README.md", "src/a/b.py"]));
        assert!(!h.applies(HookEvent::BeforeChange, &["README.md"]));
    }

    #[test]
    fn a_workspace_hook_is_untrusted_until_its_hash_is_and_always_sandboxed() {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let trust = HookTrust::at(state.path().join("hooks.json"));
        let mut config = Config::default();
        let mut h = hook(HookEvent::BeforeChange, "");
        h.sandbox = false;
        config.hooks = vec![h.clone()];
        config.workspace_rules.hooks = vec![h];
        let list = hooks(&config, root.path(), Some(&trust));
        assert!(list[0].trusted && !list[0].sandboxed());
        assert!(!list[1].trusted && list[1].sandboxed());
        trust.trust(root.path(), &[list[1].hash.clone()]).unwrap();
        assert!(hooks(&config, root.path(), Some(&trust))[1].trusted);
    }

    #[test]
    fn trusting_one_hook_keeps_the_others_trusted_and_a_changed_one_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let trust = HookTrust::at(state.path().join("hooks.json"));
        let mut config = Config::default();
        config.workspace_rules.hooks = vec![
            hook(HookEvent::BeforeChange, ""),
            hook(HookEvent::AfterRun, ""),
        ];
        let list = hooks(&config, root.path(), Some(&trust));
        assert!(trust_one(&config, root.path(), &trust, &list[0].hash).unwrap());
        assert!(trust_one(&config, root.path(), &trust, &list[1].hash).unwrap());
        let list = hooks(&config, root.path(), Some(&trust));
        assert!(list[0].trusted && list[1].trusted);
        assert!(!trust_one(&config, root.path(), &trust, "an old hash").unwrap());
    }
}
