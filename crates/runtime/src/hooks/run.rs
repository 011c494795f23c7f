//! Running the hooks of one event: each applicable, trusted hook gets the event as JSON on
//! stdin, in the workspace, in the sandbox (unless the user's own hook says otherwise),
//! within its time limit. Exit 2 blocks (its stderr is the reason); other failures are
//! reported and do not block.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::list::Hook;
use crate::trust::sandbox::{Sandbox, SandboxConfig};
use agent_ls_core::permissions::HookEvent;

/// The most bytes of a hook's stderr kept as its reason.
const REASON_BYTES: usize = 4000;

/// Why a hook came to no exit code.
#[derive(Debug, thiserror::Error)]
enum HookError {
    #[error("has no command")]
    NoCommand,
    #[error("could not start: {0}")]
    Start(std::io::Error),
    #[error("could not be waited for: {0}")]
    Wait(std::io::Error),
    #[error("did not finish within {0} s (timeout_secs) and was stopped; it blocks nothing")]
    Timeout(u64),
}

/// What the hooks of one event said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fired {
    /// A hook exited 2: its stderr (or, when it wrote none, which hook it was).
    pub block: Option<String>,
    /// What the user should hear: failed, timed-out and untrusted hooks.
    pub reports: Vec<String>,
}

/// Runs the hooks of `hooks` that apply to `event` and `subjects`, in order; the first that
/// blocks ends the round.
pub async fn fire(
    hooks: &[Hook],
    event: HookEvent,
    subjects: &[&str],
    payload: serde_json::Value,
    root: &Path,
    sandbox: &SandboxConfig,
) -> Fired {
    let mut fired = Fired::default();
    let mut payload = payload;
    if let Some(map) = payload.as_object_mut() {
        map.insert("event".into(), event.as_str().into());
        map.insert("workspace".into(), root.display().to_string().into());
    }
    let input = payload.to_string();
    for hook in hooks.iter().filter(|h| h.config.applies(event, subjects)) {
        let name = hook.config.command.join(" ");
        if !hook.trusted {
            fired.reports.push(format!(
                "the workspace hook `{name}` ({}) was not run: its content is not trusted (`agent-ls hooks trust` after reading it)",
                event.as_str()
            ));
            continue;
        }
        match run_one(hook, root, sandbox, &input).await {
            Ok((Some(2), stderr)) => {
                let reason = stderr.trim();
                fired.block = Some(if reason.is_empty() {
                    format!("the hook `{name}` ({}) exited 2", event.as_str())
                } else {
                    format!("the hook `{name}` ({}) said: {reason}", event.as_str())
                });
                break;
            }
            Ok((Some(0), _)) => {}
            Ok((code, stderr)) => fired.reports.push(format!(
                "the hook `{name}` ({}) failed ({}){}{}",
                event.as_str(),
                code.map_or("killed by a signal".into(), |c| format!("exit {c}")),
                if stderr.trim().is_empty() { "" } else { ": " },
                stderr.trim()
            )),
            Err(why) => fired
                .reports
                .push(format!("the hook `{name}` ({}) {why}", event.as_str())),
        }
    }
    fired
}

/// Runs one hook to its end or its time limit: its exit code and stderr.
async fn run_one(
    hook: &Hook,
    root: &Path,
    sandbox: &SandboxConfig,
    input: &str,
) -> Result<(Option<i32>, String), HookError> {
    let argv = if hook.sandboxed() {
        Sandbox::from_config(sandbox).wrap(root, &hook.config.command)
    } else {
        hook.config.command.clone()
    };
    let (program, args) = argv.split_first().ok_or(HookError::NoCommand)?;
    let mut command = tokio::process::Command::new(program);
    crate::child::start_clean_async(&mut command);
    command
        .args(args)
        .current_dir(root)
        .env_clear()
        .envs(crate::tests_run::command::filtered_env(
            std::env::vars(),
            &[],
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(HookError::Start)?;
    let group = child.id();
    if let Some(mut stdin) = child.stdin.take() {
        // A hook that reads nothing closes the pipe early; that is its business.
        let _ = stdin.write_all(input.as_bytes()).await;
    }
    let limit = Duration::from_secs(hook.config.timeout_secs.max(1));
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(Ok(out)) => {
            let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if stderr.len() > REASON_BYTES {
                let cut = stderr.floor_char_boundary(REASON_BYTES);
                stderr.truncate(cut);
            }
            Ok((out.status.code(), stderr))
        }
        Ok(Err(e)) => Err(HookError::Wait(e)),
        Err(_) => {
            if let Some(pid) = group {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            Err(HookError::Timeout(limit.as_secs()))
        }
    }
}
