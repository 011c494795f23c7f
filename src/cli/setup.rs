//! What every subcommand starts with: the workspace it works in, its configuration, logs on
//! stderr, an async runtime, and the one way an error ends the process.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use agent_ls_runtime::config::{self, Loaded};
use agent_ls_runtime::logging;

/// `--workspace` (or a folder argument) as given, or the current directory.
pub fn workspace_or_cwd(workspace: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match workspace {
        Some(dir) => Ok(dir),
        None => std::env::current_dir().context("cannot read the current directory"),
    }
}

/// The workspace as a real path, for subcommands that write or record in it.
pub fn open_workspace(workspace: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    workspace_or_cwd(workspace)?
        .canonicalize()
        .context("cannot open the workspace")
}

/// The configuration that applies in `root` (the user's alone without one), as every surface
/// loads it (`runs::configuration`).
pub fn load_config(root: Option<PathBuf>) -> Loaded {
    agent_ls_runtime::runs::configuration(root)
}

/// Logs on stderr only errors unless asked for detail (the subcommand's own lines say the
/// rest), and to the configured file at its level: stdout is the answer or the protocol.
pub fn log_to_stderr(loaded: &Loaded) {
    logging::init_quiet(loaded.config.log.level, loaded.config.log.file.as_deref());
}

/// Says which keys of the workspace file were left out, and how to trust the folder.
pub fn warn_untrusted(loaded: &Loaded) {
    if !loaded.untrusted.is_empty() {
        eprintln!(
            "agent-ls: {}",
            config::untrusted_message(&loaded.untrusted, loaded.trusted)
        );
    }
}

/// Runs a server's future to its end on a multi-threaded runtime. Background tasks may still
/// hold the runtime then; the protocol is finished, so they are not waited for.
pub fn serve_until_done<T>(server: impl Future<Output = T>) -> anyhow::Result<T> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(server);
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(out)
}

/// A subcommand's result as the process's exit: an error is said on stderr, and exits 1.
pub fn or_exit_1(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|err| {
        eprintln!("agent-ls: {err:#}");
        ExitCode::from(1)
    })
}
