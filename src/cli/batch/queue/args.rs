//! The queue commands' arguments (`agent-ls enqueue`, `agent-ls worker`, `agent-ls batch
//! status`) and the worker's defaults: its name, its folder, how often it polls. Below
//! queue.rs and work.rs, which both read them; it uses neither.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_ls_runtime::config::DatabaseUrl;
use agent_ls_runtime::queue::{self, TaskQueue};

/// The environment variable that may hold the queue's URL instead of `--queue` (a
/// Kubernetes Secret puts it there with its password).
const QUEUE_ENV: &str = "AGENT_LS_QUEUE";

/// The queue's URL, from `--queue` or `AGENT_LS_QUEUE`.
#[derive(clap::Args, Clone)]
pub struct QueueArg {
    /// The queue's PostgreSQL database (`postgres://user:password@host/db`); default: the
    /// environment variable AGENT_LS_QUEUE.
    #[arg(long, env = QUEUE_ENV, hide_env_values = true)]
    pub queue: String,
    /// Which of the database's queues (letters, digits, `_`): teams or projects sharing one
    /// database keep their tasks apart.
    #[arg(long, env = "AGENT_LS_QUEUE_NAME", default_value = queue::DEFAULT_QUEUE)]
    pub queue_name: String,
}

impl QueueArg {
    pub(super) fn url(&self) -> DatabaseUrl {
        DatabaseUrl::new(self.queue.clone())
    }

    pub(super) async fn connect(&self) -> anyhow::Result<TaskQueue> {
        Ok(TaskQueue::connect(&self.url(), &self.queue_name).await?)
    }

    /// `connect`, each call failing past `timeout`.
    pub(super) async fn connect_with(&self, timeout: Duration) -> anyhow::Result<TaskQueue> {
        Ok(TaskQueue::connect_with(&self.url(), &self.queue_name, timeout).await?)
    }
}

// `agent-ls enqueue`'s arguments (main.rs describes the subcommand).
#[derive(clap::Args)]
pub struct EnqueueArgs {
    /// The tasks: one JSON object a line, as `agent-ls batch` reads them.
    pub tasks: PathBuf,
    #[command(flatten)]
    pub queue: QueueArg,
    /// The tasks' configs may name model endpoints (which then receive the worker's keys) and
    /// sandboxed commands; never keys, the sandbox, MCP servers or the worker's files.
    #[arg(long)]
    pub trusted: bool,
    /// Print the message ids as JSON.
    #[arg(long)]
    pub json: bool,
}

// `agent-ls worker`'s arguments (main.rs describes the subcommand).
#[derive(clap::Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// How many tasks this worker runs at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// How long a lease lasts without a heartbeat (renewed every third of it): a task whose
    /// worker died is taken by another this long after its last heartbeat, and a run whose
    /// lease went unrenewed for two thirds of it is stopped.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(2..=86400))]
    pub lease_secs: u64,
    /// How many leases a task gets before its failure is final.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i32).range(1..=1000))]
    pub max_attempts: i32,
    /// Where clones, worktrees and logs go.
    #[arg(long, default_value = "agent-ls-worker")]
    pub out: PathBuf,
    /// This worker's name in `batch status` (default: the host's name and the process id).
    #[arg(long)]
    pub name: Option<String>,
    /// Exit once the queue is empty (no task queued or running), instead of waiting for more.
    #[arg(long)]
    pub once: bool,
    /// The memory store the runs are given (`memory.url`), say the queue's database under a
    /// role that may only use memory's tables, so the queue's password does not reach them;
    /// default: this worker's own `memory.url`, else the queue's URL.
    #[arg(long, env = "AGENT_LS_WORKER_MEMORY_URL", hide_env_values = true)]
    pub memory_url: Option<String>,
    /// The most this worker's runs may cost in all, in US dollars, as [prices] counts them:
    /// each run is capped at what is left, and once it is spent the worker takes no more
    /// tasks and exits (they stay queued for other workers).
    #[arg(long, value_name = "USD", value_parser = crate::cli::headless::positive_dollars)]
    pub max_cost: Option<f64>,
}

// `agent-ls batch status`'s arguments.
#[derive(clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub queue: QueueArg,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The worker's default name: the host's and the process id, so two workers on one machine
/// differ.
pub(super) fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "worker".into()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// How often an idle worker asks the queue for a task.
pub(super) const POLL: Duration = Duration::from_millis(500);

pub(super) fn out_dir(out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let out = out.canonicalize()?;
    let ignore = out.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "# agent-ls worker's clones and worktrees\n*\n")?;
    }
    Ok(out)
}
