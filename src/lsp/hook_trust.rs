//! The editor's question for a workspace hook whose content is not trusted (docs/hooks.md):
//! once per hook and session, a `window/showMessageRequest` naming the hook, with "Trust this
//! hook" and "Not now". Only "Trust this hook" trusts it, by the hash of its content, in the
//! same record `agent-ls hooks trust` writes; no answer, "Not now" or a dismissed question
//! leaves it untrusted, and it does not run.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tower_lsp_server::ls_types::MessageType;
use tracing::error;

use super::outbox::Outbox;
use agent_ls_runtime::config::Config;
use agent_ls_runtime::hooks::{Hook, Origin, hooks, trust_one};
use agent_ls_runtime::trust::hooks::HookTrust;

const TRUST_HOOK: &str = "Trust this hook";
const NOT_NOW: &str = "Not now";

/// The hashes of the hooks asked about in this session, so each is asked about once.
pub(super) type Asked = Arc<Mutex<BTreeSet<String>>>;

/// Asks about each workspace hook of `config` that is not trusted and was not asked about
/// yet, one question after the other, off the session's task (hashing reads the hooks'
/// scripts).
pub(super) fn offer(outbox: &Outbox, root: PathBuf, config: Config, asked: Asked) {
    if config.workspace_rules.hooks.is_empty() {
        return;
    }
    let outbox = outbox.clone();
    tokio::spawn(async move {
        let (r, c) = (root.clone(), config.clone());
        let untrusted = tokio::task::spawn_blocking(move || {
            let store = HookTrust::for_user().ok();
            hooks(&c, &r, store.as_ref())
                .into_iter()
                .filter(|h| h.origin == Origin::Workspace && !h.trusted)
                .collect::<Vec<Hook>>()
        })
        .await
        .unwrap_or_default();
        for hook in untrusted {
            let new = asked.lock().is_ok_and(|mut a| a.insert(hook.hash.clone()));
            if new {
                ask(&outbox, &root, &config, hook).await;
            }
        }
    });
}

/// One hook's question, and its answer recorded.
async fn ask(outbox: &Outbox, root: &std::path::Path, config: &Config, hook: Hook) {
    let command = hook.config.command.join(" ");
    let answer = outbox
        .ask(
            MessageType::WARNING,
            format!(
                "agent-ls: {}'s hook `{command}` ({}) does not run until you trust its content (sha256:{}). Read it first; a changed hook asks again.",
                root.display(),
                hook.config.event.as_str(),
                &hook.hash[..16.min(hook.hash.len())]
            ),
            &[TRUST_HOOK, NOT_NOW],
        )
        .await;
    if answer.as_deref() != Some(TRUST_HOOK) {
        return;
    }
    let (root, config, hash) = (root.to_path_buf(), config.clone(), hook.hash);
    let stored = tokio::task::spawn_blocking(move || {
        let store = HookTrust::for_user()?;
        trust_one(&config, &root, &store, &hash)
    })
    .await;
    match stored {
        Ok(Ok(true)) => outbox.show_message(
            MessageType::INFO,
            format!(
                "agent-ls: the hook `{command}` is trusted as it is now; it runs from the next run on (`agent-ls hooks untrust` takes that back)"
            ),
        ),
        Ok(Ok(false)) => outbox.show_message(
            MessageType::WARNING,
            format!("agent-ls: the hook `{command}` changed since it was asked about; it is not trusted"),
        ),
        Ok(Err(e)) => outbox.show_message(MessageType::ERROR, format!("agent-ls: {e}")),
        Err(e) => error!("recording the trust in a hook failed: {e}"),
    }
}
