//! The three protocol servers on stdio: `agent-ls serve` (LSP, the default), `agent-ls mcp`
//! (agent-ls's tools for other agents) and `agent-ls acp` (the Agent Client Protocol).

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::logging;

use super::setup::{load_config, log_to_stderr, open_workspace, serve_until_done};

/// `agent-ls serve`: the language server until the client says `exit`.
pub fn lsp() -> anyhow::Result<ExitCode> {
    // Logging is set up from the layers known before the client connects (user file and
    // environment); the level follows later layers once the session has them.
    let early = load_config(None);
    let log = logging::init(early.config.log.level, early.config.log.file.as_deref());
    for err in &early.errors {
        tracing::error!("{err}");
    }
    let code = serve_until_done(crate::lsp::serve_stdio(log))?;
    Ok(ExitCode::from(code as u8))
}

/// `agent-ls mcp`: stdout is the protocol's, so logs go to stderr only.
pub fn mcp(workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = open_workspace(workspace)?;
    let loaded = load_config(Some(root.clone()));
    log_to_stderr(&loaded);
    for err in &loaded.errors {
        tracing::error!("{err}");
    }
    super::setup::warn_untrusted(&loaded);
    serve_until_done(crate::mcp::serve(&root, (loaded.config, loaded.trusted)))??;
    Ok(ExitCode::SUCCESS)
}

/// `agent-ls acp`: stdout is the protocol's, so logs go to stderr only.
pub fn acp() -> anyhow::Result<ExitCode> {
    log_to_stderr(&load_config(None));
    serve_until_done(crate::acp::serve())??;
    Ok(ExitCode::SUCCESS)
}
