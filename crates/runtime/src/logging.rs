//! Logging to stderr (stdout carries only the protocol) and optionally to a file, with a level
//! the configuration can change while the server runs.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

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
    let file_layer =
        file.and_then(
            |path| match OpenOptions::new().create(true).append(true).open(path) {
                Ok(f) => Some(fmt::layer().with_writer(Mutex::new(f)).with_ansi(false)),
                Err(e) => {
                    eprintln!("agent-ls: cannot open log file {}: {e}", path.display());
                    None
                }
            },
        );
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
