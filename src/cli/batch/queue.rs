//! Workers on a shared queue (docs/scale.md): `agent-ls enqueue` puts a tasks file's tasks on
//! a queue in PostgreSQL, any number of `agent-ls worker` processes on any number of machines
//! lease and run them as `agent-ls batch` does, and `agent-ls batch status` counts them.

mod work;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use agent_ls_runtime::config::DatabaseUrl;
use agent_ls_runtime::queue::{self, Job, Status, TaskQueue};

use super::{tasks, worker};
use crate::cli::run::exit;

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
    fn url(&self) -> DatabaseUrl {
        DatabaseUrl::new(self.queue.clone())
    }

    async fn connect(&self) -> anyhow::Result<TaskQueue> {
        Ok(TaskQueue::connect(&self.url(), &self.queue_name).await?)
    }

    /// `connect`, each call failing past `timeout`.
    async fn connect_with(&self, timeout: Duration) -> anyhow::Result<TaskQueue> {
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

/// A current-thread runtime is enough for enqueue and status; the worker's is multi-threaded.
fn block_on<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f)
}

fn report(done: anyhow::Result<u8>) -> ExitCode {
    ExitCode::from(match done {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agent-ls: {e:#}");
            exit::FAILED
        }
    })
}

/// `agent-ls enqueue`: 0 the tasks are on the queue, 3 the file was refused (nothing was
/// enqueued), 1 the queue could not be reached.
pub fn enqueue(args: EnqueueArgs) -> ExitCode {
    report(enqueue_file(&args))
}

fn enqueue_file(args: &EnqueueArgs) -> anyhow::Result<u8> {
    let all = match tasks::read(&args.tasks) {
        Ok(t) => t,
        Err(errors) => {
            for e in &errors {
                eprintln!("agent-ls: {}: {e}", args.tasks.display());
            }
            eprintln!("agent-ls: the tasks file is refused; nothing was enqueued");
            return Ok(exit::CONFIG);
        }
    };
    let base = args
        .tasks
        .canonicalize()?
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let mut jobs = Vec::with_capacity(all.len());
    for mut t in all {
        // A path is taken from the tasks file's folder here, where it means something; a
        // worker on another machine needs a URL (or the same path on a shared disk).
        if !worker::is_url(&t.repo) {
            let p = base.join(&t.repo);
            t.repo = p.canonicalize().unwrap_or(p).display().to_string();
        }
        if !args.trusted && tasks::settings(t.config.as_ref(), false).is_err() {
            eprintln!(
                "agent-ls: warning: task {} names keys only the runner may set: workers will refuse it (`--trusted` lets its config name endpoints and commands)",
                t.id
            );
        }
        jobs.push(Job {
            task: serde_json::to_value(&t)?,
            trusted: args.trusted,
        });
    }
    let url = args.queue.url();
    let ids = block_on(async {
        let q = args.queue.connect().await?;
        Ok(q.enqueue(&jobs).await?)
    })?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({"enqueued": ids.len(), "msg_ids": ids})
        );
    } else {
        eprintln!(
            "agent-ls: enqueued {} task(s) on {}",
            ids.len(),
            url.redacted()
        );
    }
    Ok(exit::DONE)
}

/// `agent-ls batch status`.
pub fn status(args: StatusArgs) -> ExitCode {
    report(block_on(async {
        let q = args.queue.connect().await?;
        let s = q.status().await?;
        if args.json {
            println!("{}", serde_json::to_string(&s)?);
        } else {
            print!("{}", status_text(&s));
        }
        Ok(exit::DONE)
    }))
}

/// The counts as a table: the totals, then one line a worker.
fn status_text(s: &Status) -> String {
    let mut out = format!(
        "queued {}  running {}  done {}  failed {}\n",
        s.queued, s.running, s.done, s.failed
    );
    if !s.workers.is_empty() {
        let width = s.workers.keys().map(String::len).max().unwrap_or(6).max(6);
        out.push_str(&format!(
            "{:width$}  {:>7}  {:>5}  {:>6}\n",
            "worker", "running", "done", "failed"
        ));
        for (name, w) in &s.workers {
            let name = if name.is_empty() { "?" } else { name };
            out.push_str(&format!(
                "{name:width$}  {:>7}  {:>5}  {:>6}\n",
                w.running, w.done, w.failed
            ));
        }
    }
    out
}

/// `agent-ls worker`: runs until interrupted (130), or with `--once` until the queue is
/// empty (0); 1 when the queue cannot be reached.
pub fn worker(args: WorkerArgs) -> ExitCode {
    report(work::serve(args))
}

/// The worker's default name: the host's and the process id, so two workers on one machine
/// differ.
fn default_name() -> String {
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
const POLL: Duration = Duration::from_millis(500);

fn out_dir(out: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let out = out.canonicalize()?;
    let ignore = out.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(&ignore, "# agent-ls worker's clones and worktrees\n*\n")?;
    }
    Ok(out)
}
