//! Hooks (`[[hooks]]`): commands the user configures to run at points of a run (before and
//! after a tool call, before a change is applied, after a run, when approval is needed), each
//! given the event as JSON on stdin. Exit code 2 blocks, with the hook's stderr as the reason
//! the model hears; any other failure is reported and does not block. A workspace file's hook
//! runs only once the user trusts its exact content (`trust::hooks`, by hash).

pub mod gate;
mod run;

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::trust::hooks::{HookTrust, hook_hash};
pub use gate::{ChangeGate, Gate};
pub use run::{Fired, fire};

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// Before a tool call runs (the matcher is over the tool's name); exit 2 refuses it.
    BeforeTool,
    /// After a tool call (matcher: the tool's name); exit 2 adds its reason to the result.
    AfterTool,
    /// Before a change is asked about or applied (matcher: each path); exit 2 refuses it.
    BeforeChange,
    /// When the run ends.
    AfterRun,
    /// When the user is about to be asked to approve a change (a notification).
    ApprovalNeeded,
}

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::BeforeTool => "before_tool",
            HookEvent::AfterTool => "after_tool",
            HookEvent::BeforeChange => "before_change",
            HookEvent::AfterRun => "after_run",
            HookEvent::ApprovalNeeded => "approval_needed",
        }
    }

    /// Whether exit code 2 stops what the event is about.
    pub fn blocks(self) -> bool {
        matches!(self, HookEvent::BeforeTool | HookEvent::BeforeChange)
    }
}

fn default_timeout() -> u64 {
    10
}

fn yes() -> bool {
    true
}

/// One `[[hooks]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookConfig {
    pub event: HookEvent,
    /// A glob over the tool's name (tool events) or the changed paths (`before_change`);
    /// empty matches everything.
    #[serde(default)]
    pub matcher: String,
    /// The program and its arguments (no shell); run in the workspace.
    pub command: Vec<String>,
    /// The most seconds it may take; then it is stopped and reported, and does not block.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Run in the sandbox. `false` is honoured only from the user's own settings.
    #[serde(default = "yes")]
    pub sandbox: bool,
}

impl HookConfig {
    /// Whether the hook is for `event` and its matcher takes one of `subjects` (or there are
    /// none to match, as after a run).
    pub fn applies(&self, event: HookEvent, subjects: &[&str]) -> bool {
        if self.event != event {
            return false;
        }
        if self.matcher.trim().is_empty() || subjects.is_empty() {
            return true;
        }
        matcher(&self.matcher).is_some_and(|m| subjects.iter().any(|s| m.is_match(s)))
    }
}

fn matcher(glob: &str) -> Option<GlobMatcher> {
    GlobBuilder::new(glob.trim())
        .literal_separator(true)
        .build()
        .ok()
        .map(|g| g.compile_matcher())
}

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
