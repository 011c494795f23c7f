//! The check points of a run, in one place the driver calls: before and after each tool
//! call, before a change is asked about or applied, when approval is needed, and after the
//! run. Each asks the permission rules (and the mode) first, then fires the hooks of its
//! event; what the user should hear waits in `take_reports`, each message once per run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;

use super::list::{Hook, hooks};
use super::run::{Fired, fire};
use crate::config::{Approval, Config};
use crate::permissions::{Check, Permissions};
use crate::trust::hooks::HookTrust;
use crate::trust::sandbox::SandboxConfig;
use agent_ls_core::edit::FileChange;
use agent_ls_core::permissions::HookEvent;

/// What becomes of a change at its check point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeGate {
    Go,
    /// Not applied; the model hears why (the rule, the mode or the hook's reason).
    Refuse(String),
    /// The user must confirm these files by name, whatever the mode: (path, which rule).
    Ask(Vec<(String, String)>),
}

/// One run's rules and hooks.
pub struct Gate {
    permissions: Permissions,
    hooks: Vec<Hook>,
    mode: Approval,
    root: PathBuf,
    sandbox: SandboxConfig,
    warned: Mutex<BTreeSet<String>>,
    pending: Mutex<Vec<String>>,
}

impl Gate {
    pub fn new(config: &Config, root: &Path) -> Gate {
        let trust = HookTrust::for_user().ok();
        Gate {
            permissions: Permissions::from_config(config),
            hooks: hooks(config, root, trust.as_ref()),
            mode: config.agent.approval,
            root: root.to_path_buf(),
            sandbox: config.sandbox.clone(),
            warned: Mutex::new(BTreeSet::new()),
            pending: Mutex::new(config.workspace_rules.refused.clone()),
        }
    }

    async fn fire(
        &self,
        event: HookEvent,
        subjects: &[&str],
        payload: serde_json::Value,
    ) -> Option<String> {
        if self.hooks.is_empty() {
            return None;
        }
        let Fired { block, reports } = fire(
            &self.hooks,
            event,
            subjects,
            payload,
            &self.root,
            &self.sandbox,
        )
        .await;
        for r in reports {
            let new = self.warned.lock().is_ok_and(|mut w| w.insert(r.clone()));
            if let (true, Ok(mut pending)) = (new, self.pending.lock()) {
                pending.push(r);
            }
        }
        block
    }

    /// What the user should hear since the last call: hooks that failed, timed out or were
    /// not trusted.
    pub fn take_reports(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }

    /// Before a tool call runs, what the rules and the mode say: go, refuse (the text names
    /// the rule or the mode), or ask the user first (an `ask` rule, named in the text).
    pub fn check_call(&self, name: &str, arguments: &serde_json::Value) -> Check {
        self.permissions.check_call(name, arguments)
    }

    /// The `before_tool` hooks of a call the rules let run (or the user allowed): `Some(why)`
    /// refuses it, and the model hears why.
    pub async fn before_tool(&self, name: &str, arguments: &serde_json::Value) -> Option<String> {
        let payload = json!({"tool": name, "arguments": arguments});
        self.fire(HookEvent::BeforeTool, &[name], payload)
            .await
            .map(|why| format!("refused by a hook: {why}"))
    }

    /// Before the user is asked about a tool call an `ask` rule holds: the notification
    /// hook, matched over the tool's name.
    pub async fn call_approval_needed(&self, name: &str, arguments: &serde_json::Value) {
        let payload = json!({"tool": name, "arguments": arguments});
        self.fire(HookEvent::ApprovalNeeded, &[name], payload).await;
    }

    /// After a tool call: a hook's exit 2 adds its reason to what the model is told.
    pub async fn after_call(
        &self,
        name: &str,
        arguments: &serde_json::Value,
        result: &str,
    ) -> Option<String> {
        let payload = json!({"tool": name, "arguments": arguments, "result": result});
        self.fire(HookEvent::AfterTool, &[name], payload).await
    }

    /// Before a change is asked about or applied.
    pub async fn before_change(&self, changes: &[FileChange], diff: &str) -> ChangeGate {
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        let mut asks = Vec::new();
        for (path, check) in self.permissions.check_change(paths.iter().copied()) {
            match check {
                Check::Refuse(why) => return ChangeGate::Refuse(why),
                Check::Ask(why) => asks.push((path, why)),
                Check::Go => {}
            }
        }
        let payload = json!({"paths": paths, "diff": diff});
        if let Some(why) = self.fire(HookEvent::BeforeChange, &paths, payload).await {
            return ChangeGate::Refuse(format!("the change was refused by a hook: {why}"));
        }
        if asks.is_empty() {
            ChangeGate::Go
        } else {
            ChangeGate::Ask(asks)
        }
    }

    /// Before the user is asked about a change (the mode asks, or the review makes it a
    /// question): the notification hook.
    pub async fn approval_needed(&self, changes: &[FileChange], asked_anyway: bool) {
        if self.mode.for_edits() == Approval::Auto && !asked_anyway {
            return;
        }
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        let payload = json!({"paths": paths});
        self.fire(HookEvent::ApprovalNeeded, &paths, payload).await;
    }

    /// When the run ends.
    pub async fn after_run(&self, status: &str, answer: &str, files: &[String]) {
        let payload = json!({"status": status, "answer": answer, "files_changed": files});
        self.fire(HookEvent::AfterRun, &[], payload).await;
    }
}
