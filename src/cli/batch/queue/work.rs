//! The `agent-ls worker` loop: `--concurrency` slots, each leasing a task, running it as
//! `agent-ls batch` runs one (its own worktree, an `agent-ls run` child), renewing the lease
//! by heartbeat meanwhile, and recording its one result in the queue's database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_ls_runtime::config;
use agent_ls_runtime::queue::{Finished, Leased, TaskQueue};
use tokio_util::sync::CancellationToken;

use super::super::results::TaskResult;
use super::super::{tasks, watch_signals, worker};
use super::{POLL, WorkerArgs, default_name, out_dir};
use crate::cli::run::exit;

/// What every slot of a worker shares.
struct Shared {
    queue: Arc<TaskQueue>,
    ctx: worker::Context,
    name: String,
    lease: Duration,
    max_attempts: i32,
    once: bool,
}

/// Runs the worker until it is interrupted, or with `--once` until the queue is empty.
pub fn serve(args: WorkerArgs) -> anyhow::Result<u8> {
    let out = out_dir(&args.out)?;
    let name = args.name.clone().unwrap_or_else(default_name);
    let url = args.queue.url();
    // Results and journals go to the queue's database, and so does the runs' memory, so the
    // team's memory learns from every run: unless this worker's own configuration (its user
    // file or environment) names another store.
    let own = config::load(&config::Inputs::from_process(None));
    let mut env = Vec::new();
    if own.config.memory.url.is_none() {
        env.push(("AGENT_LS_MEMORY__URL".to_string(), url.expose().to_string()));
    }
    let ctx = worker::Context {
        out,
        base: std::env::current_dir()?,
        exe: std::env::current_exe()?,
        git_lock: tokio::sync::Mutex::new(()),
        env,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let cancel = CancellationToken::new();
        watch_signals(cancel.clone());
        let queue = args.queue.connect().await?;
        eprintln!(
            "agent-ls: worker {name}: on {}, {} task(s) at a time, leases of {} s",
            url.redacted(),
            args.concurrency,
            args.lease_secs
        );
        let shared = Arc::new(Shared {
            queue: Arc::new(queue),
            ctx,
            name,
            lease: Duration::from_secs(args.lease_secs),
            max_attempts: args.max_attempts,
            once: args.once,
        });
        let slots: Vec<_> = (0..args.concurrency)
            .map(|_| tokio::spawn(slot(shared.clone(), cancel.clone())))
            .collect();
        let mut failure = None;
        for s in slots {
            match s.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failure = Some(e),
                Err(e) => failure = Some(e.into()),
            }
        }
        match failure {
            Some(e) => Err(e),
            None if cancel.is_cancelled() => Ok(exit::INTERRUPTED),
            None => Ok(exit::DONE),
        }
    })
}

/// One slot: leases and runs tasks one after another. A database error ends the whole
/// worker (its other slots give their tasks back), to be restarted by whoever runs it.
async fn slot(sh: Arc<Shared>, cancel: CancellationToken) -> anyhow::Result<()> {
    let step = async {
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let Some(leased) = sh.queue.lease(sh.lease, &sh.name).await? else {
                if sh.once && sh.queue.pending().await? == 0 {
                    return Ok(());
                }
                tokio::select! {
                    _ = tokio::time::sleep(POLL) => {}
                    _ = cancel.cancelled() => {}
                }
                continue;
            };
            handle(&sh, leased, &cancel).await?;
        }
    };
    let done: anyhow::Result<()> = step.await;
    if done.is_err() {
        cancel.cancel();
    }
    done
}

/// Runs one leased task to its result, or gives it back.
async fn handle(sh: &Shared, l: Leased, cancel: &CancellationToken) -> anyhow::Result<()> {
    if sh.queue.has_result(l.msg_id).await? {
        // Ended by a worker that stopped before taking it off the queue.
        sh.queue.take_off(l.msg_id).await?;
        return Ok(());
    }
    let parsed = match &l.job {
        Some(job) => tasks::from_value(&job.task),
        None => Err("not an agent-ls job".to_string()),
    };
    let task = match parsed {
        Ok(t) => t,
        Err(why) => {
            let id = l.raw["task"]["id"]
                .as_str()
                .map_or_else(|| format!("message-{}", l.msg_id), str::to_string);
            let why = format!("message {} is refused: {why}", l.msg_id);
            let r = TaskResult::without_run(&id, "refused", why, 0);
            return record(sh, &l, &r).await;
        }
    };
    if l.attempt > sh.max_attempts {
        let why = format!(
            "gave up after {} attempt(s): each lease ran out before the task ended (its worker died or stalled)",
            l.attempt - 1
        );
        let r = TaskResult::without_run(&task.id, "failed", why, 0);
        return record(sh, &l, &r).await;
    }
    eprintln!(
        "agent-ls: worker {}: {} started (attempt {} of {})",
        sh.name, task.id, l.attempt, sh.max_attempts
    );
    let trusted = l.job.as_ref().is_some_and(|j| j.trusted);
    // Cancelled when the worker stops, or when the lease is lost to another worker.
    let stop = cancel.child_token();
    let beat = tokio::spawn(heartbeat(
        sh.queue.clone(),
        l.msg_id,
        l.attempt,
        sh.lease,
        stop.clone(),
    ));
    let result = worker::run(&sh.ctx, &task, trusted, &stop).await;
    beat.abort();
    match result {
        None if cancel.is_cancelled() => {
            sh.queue.release(l.msg_id, l.attempt).await?;
            eprintln!(
                "agent-ls: worker {}: {} given back to the queue",
                sh.name, task.id
            );
        }
        None => eprintln!(
            "agent-ls: worker {}: {} stopped: its lease ran out and another worker has it",
            sh.name, task.id
        ),
        Some(r) if r.status == "error" && l.attempt < sh.max_attempts => {
            eprintln!(
                "agent-ls: worker {}: {} could not run ({}); back on the queue",
                sh.name,
                task.id,
                r.reason.as_deref().unwrap_or("no reason")
            );
            sh.queue.release(l.msg_id, l.attempt).await?;
        }
        Some(r) => record(sh, &l, &r).await?,
    }
    Ok(())
}

/// Renews the lease every third of it until aborted; cancels `stop` when the lease is no
/// longer ours, or when no renewal got through for a whole lease (another worker may have it
/// by then).
async fn heartbeat(
    queue: Arc<TaskQueue>,
    msg_id: i64,
    attempt: i32,
    lease: Duration,
    stop: CancellationToken,
) {
    let mut renewed = Instant::now();
    loop {
        tokio::time::sleep(lease / 3).await;
        match queue.heartbeat(msg_id, attempt, lease).await {
            Ok(true) => renewed = Instant::now(),
            Ok(false) => break,
            Err(e) => {
                eprintln!("agent-ls: warning: a heartbeat did not get through: {e}");
                if renewed.elapsed() >= lease {
                    break;
                }
            }
        }
    }
    stop.cancel();
}

/// Records the task's one result (with its journal's text) and takes it off the queue.
async fn record(sh: &Shared, l: &Leased, r: &TaskResult) -> anyhow::Result<()> {
    let journal = r
        .journal
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    let value = serde_json::to_value(r)?;
    let counted = sh
        .queue
        .finish(
            l.msg_id,
            &Finished {
                task_id: &r.id,
                status: &r.status,
                worker: &sh.name,
                attempts: l.attempt,
                result: &value,
                journal: journal.as_deref(),
            },
        )
        .await?;
    if counted {
        eprintln!(
            "agent-ls: worker {}: {} {} ({} ms)",
            sh.name, r.id, r.status, r.duration_ms
        );
    } else {
        eprintln!(
            "agent-ls: worker {}: {} had a result already; this one is dropped",
            sh.name, r.id
        );
    }
    Ok(())
}
