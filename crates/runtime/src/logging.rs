//! Logging to stderr (stdout carries only the protocol) and optionally to a file, with a level
//! the configuration can change while the server runs. A command whose stderr a person reads
//! (`agent-ls run`, `review`, the ACP and MCP servers a client shows the stderr of) logs there
//! only errors, unless asked for detail: its own lines already say what happened, and a log
//! line repeating them is noise (`init_quiet`).

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, fmt, reload};

use crate::config::LogLevel;

/// Environment variable holding a full `tracing` filter; when set it wins over `log.level`.
pub const LOG_FILTER_ENV: &str = "AGENT_LS_LOG";

#[derive(Clone)]
pub struct LogHandle {
    reload: Option<reload::Handle<EnvFilter, Registry>>,
    fixed_by_env: bool,
}

impl LogHandle {
    /// A handle that changes nothing, for code run without a subscriber.
    pub fn none() -> Self {
        LogHandle {
            reload: None,
            fixed_by_env: true,
        }
    }

    pub fn set_level(&self, level: LogLevel) {
        if self.fixed_by_env {
            return;
        }
        if let Some(reload) = &self.reload {
            let _ = reload.modify(|f| *f = EnvFilter::new(filter_for(level)));
        }
    }
}

/// The ACP SDK logs each error answer at WARN ("Sending error response"), an ordinary -32002
/// for a session to start anew included; what is answered is the client's to show.
fn filter_for(level: LogLevel) -> String {
    format!(
        "agent_ls={},warn,agent_client_protocol::jsonrpc::outgoing_actor=error",
        level.as_str()
    )
}

/// Installs the global subscriber. A log file that cannot be opened is reported on stderr and
/// logging carries on without it.
pub fn init(level: LogLevel, file: Option<&Path>) -> LogHandle {
    let env_filter = std::env::var(LOG_FILTER_ENV).ok().filter(|s| !s.is_empty());
    let fixed_by_env = env_filter.is_some();
    let filter = env_filter
        .map(EnvFilter::new)
        .unwrap_or_else(|| EnvFilter::new(filter_for(level)));
    let (filter, reload) = reload::Layer::new(filter);
    let stderr = fmt::layer().with_writer(std::io::stderr).with_ansi(false);
    let file_layer = file
        .and_then(open_log)
        .map(|f| fmt::layer().with_writer(Mutex::new(f)).with_ansi(false));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file_layer)
        .try_init();
    LogHandle {
        reload: Some(reload),
        fixed_by_env,
    }
}

/// The log file, opened to append; one that cannot be opened is said on stderr, and logging
/// goes on without it.
fn open_log(path: &Path) -> Option<std::fs::File> {
    match OpenOptions::new().create(true).append(true).open(path) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("agent-ls: cannot open log file {}: {e}", path.display());
            None
        }
    }
}

/// Where a warning is the only word the user gets, with no status line saying it after: the
/// memory store or the embeddings server unreachable, so the run goes on without them.
const NOTICES: &str = "agent_ls_runtime::drive::recall=warn,agent_ls_runtime::memory=warn,\
                       agent_ls_runtime::embeddings=warn";

/// The stderr filter of a command a person reads: `AGENT_LS_LOG` when set, `level` when it asks
/// for detail (debug, trace), else errors only, for agent-ls and the libraries alike, but for
/// the warnings no status line repeats (`NOTICES`).
fn quiet_filter(level: LogLevel, env: Option<&str>) -> String {
    match (env, level) {
        (Some(f), _) => f.to_string(),
        (None, LogLevel::Debug | LogLevel::Trace) => filter_for(level),
        (None, _) => format!("error,{NOTICES}"),
    }
}

/// Installs the global subscriber for a command whose stderr is read by a person: stderr gets
/// `quiet_filter`, the log file (when set) the configured level as the server's does. The
/// level does not change while it runs.
pub fn init_quiet(level: LogLevel, file: Option<&Path>) -> LogHandle {
    let env = std::env::var(LOG_FILTER_ENV).ok().filter(|s| !s.is_empty());
    let stderr = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(EnvFilter::new(quiet_filter(level, env.as_deref())));
    let file_filter = env.clone().unwrap_or_else(|| filter_for(level));
    let file_layer = file.and_then(open_log).map(|f| {
        fmt::layer()
            .with_writer(Mutex::new(f))
            .with_ansi(false)
            .with_filter(EnvFilter::new(&file_filter))
    });
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file_layer)
        .try_init();
    LogHandle::none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_command_logs_only_errors_unless_asked() {
        assert_eq!(
            quiet_filter(LogLevel::Info, None),
            format!("error,{NOTICES}")
        );
        assert_eq!(
            quiet_filter(LogLevel::Warn, None),
            format!("error,{NOTICES}")
        );
        assert!(EnvFilter::try_new(quiet_filter(LogLevel::Info, None)).is_ok());
        assert_eq!(
            quiet_filter(LogLevel::Debug, None),
            "agent_ls=debug,warn,agent_client_protocol::jsonrpc::outgoing_actor=error"
        );
        assert_eq!(
            quiet_filter(LogLevel::Info, Some("agent_ls=trace")),
            "agent_ls=trace"
        );
    }
}
