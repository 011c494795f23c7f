//! Workers on a shared queue (docs/scale.md): `agent-ls enqueue` puts a tasks file's tasks on
//! a queue in PostgreSQL, any number of `agent-ls worker` processes on any number of machines
//! lease and run them as `agent-ls batch` does, and `agent-ls batch status` counts them.

mod args;
mod work;

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls_runtime::queue::{Job, Status};

use super::{tasks, worker};
use crate::cli::run::exit;
// The worker's defaults, which work.rs reads from here.
pub use args::{EnqueueArgs, QueueArg, StatusArgs, WorkerArgs};
use args::{POLL, default_name, out_dir};

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
