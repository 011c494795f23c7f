//! The `agent-ls worker` loop: `--concurrency` slots, each leasing a task, running it as
//! `agent-ls batch` runs one (its own worktree, an `agent-ls run` child), renewing the lease
//! by heartbeat meanwhile, and recording its one result in the queue's database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_ls_runtime::config;
use agent_ls_runtime::queue::{Finished, GiveBack, Leased, TaskQueue};
use tokio_util::sync::CancellationToken;

use super::super::results::TaskResult;
use super::super::tasks::{self, TaskError};
use super::super::{watch_signals, worker};
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
    /// What this worker's runs have cost, against its `--max-cost`.
    spend: std::sync::Mutex<worker::Spend>,
}

/// Runs the worker until it is interrupted, or with `--once` until the queue is empty.
pub fn serve(args: WorkerArgs) -> anyhow::Result<u8> {
    let out = out_dir(&args.out)?;
    let name = args.name.clone().unwrap_or_else(default_name);
    let url = args.queue.url();
    // Results and journals go to the queue's database, and so does the runs' memory, so the
    // team's memory learns from every run: unless `--memory-url` or this worker's own
    // configuration (its user file or environment) names another store.
    let own = config::load(&config::Inputs::from_process(None));
    let mut env = Vec::new();
    if let Some(m) = &args.memory_url {
        env.push(("AGENT_LS_MEMORY__URL".to_string(), m.clone()));
    } else if own.config.memory.url.is_none() {
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
        // Every call fails within a third of a lease: a call hung on a lost connection never
        // keeps a run going past its lease.
        let queue = args
            .queue
            .connect_with(Duration::from_secs(args.lease_secs) / 3)
            .await?;
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
            spend: std::sync::Mutex::new(worker::Spend::new(args.max_cost)),
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
            if let Some(why) = sh.spend.lock().ok().and_then(|s| s.spent_out()) {
                eprintln!("agent-ls: worker {}: {why}", sh.name);
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
// fn-length: one leased task's life in the order it happens (refused, given up, no budget
// left, run, and the run's three ends); split, each piece would need the lease and the queue.
async fn handle(sh: &Shared, l: Leased, cancel: &CancellationToken) -> anyhow::Result<()> {
    if sh.queue.has_result(l.msg_id).await? {
        // Ended by a worker that stopped before taking it off the queue.
        sh.queue.take_off(l.msg_id).await?;
        return Ok(());
    }
    let parsed = match &l.job {
        Some(job) => tasks::from_value(&job.task),
        None => Err(TaskError::NotAJob),
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
        l.clone(),
        sh.lease,
        stop.clone(),
    ));
    // Another slot may have spent the rest meanwhile: the task goes back for another worker.
    let left = sh.spend.lock().ok().and_then(|s| s.left());
    if left.is_some_and(|l| l <= 0.0) {
        beat.abort();
        sh.queue
            .release(l.msg_id, l.attempt, GiveBack::Stopping)
            .await?;
        return Ok(());
    }
    let result = worker::run(&sh.ctx, (&task, left), trusted, &stop).await;
    beat.abort();
    if let (Some(r), Ok(mut spend)) = (&result, sh.spend.lock()) {
        spend.add(r);
    }
    match result {
        None if cancel.is_cancelled() => {
            sh.queue
                .release(l.msg_id, l.attempt, GiveBack::Stopping)
                .await?;
            eprintln!(
                "agent-ls: worker {}: {} given back to the queue",
                sh.name, task.id
            );
        }
        None => eprintln!(
            "agent-ls: worker {}: {} stopped: its lease could not be renewed (another worker may have it)",
            sh.name, task.id
        ),
        Some(r) if r.status == "error" && l.attempt < sh.max_attempts => {
            let after = backoff(l.attempt);
            eprintln!(
                "agent-ls: worker {}: {} could not run ({}); back on the queue in {} s",
                sh.name,
                task.id,
                r.reason.as_deref().unwrap_or("no reason"),
                after.as_secs()
            );
            sh.queue
                .release(l.msg_id, l.attempt, GiveBack::Retry(after))
                .await?;
        }
        Some(r) => record(sh, &l, &r).await?,
    }
    Ok(())
}

/// How long a task whose run could not be set up or gave no outcome waits before its next
/// attempt: 15 s after the first, doubling up to 10 minutes, so a cause that passes (a git
/// server down) has time to, and a task failing at once does not spend its attempts in
/// milliseconds.
fn backoff(attempt: i32) -> Duration {
    let doublings = attempt.clamp(1, 10) as u32 - 1;
    (RETRY_FIRST * 2u32.pow(doublings)).min(RETRY_MOST)
}

const RETRY_FIRST: Duration = Duration::from_secs(15);
const RETRY_MOST: Duration = Duration::from_secs(600);

/// Renews the lease every third of it until aborted; cancels `stop` when the lease is no
/// longer ours, or one third of a lease before it may run out unrenewed: the run then has
/// that long to stop before another worker can lease the task. The lease counts from when
/// the renewal was sent (the server starts it later), and each renewal may take until then.
async fn heartbeat(queue: Arc<TaskQueue>, l: Leased, lease: Duration, stop: CancellationToken) {
    let every = lease / 3;
    let mut until = l.at + lease;
    let mut next = l.at + every;
    loop {
        let give_up = until - every;
        tokio::time::sleep_until(next.min(give_up).into()).await;
        let sent = Instant::now();
        if sent >= give_up {
            eprintln!(
                "agent-ls: warning: the lease of message {} could not be renewed in time; its run is stopped",
                l.msg_id
            );
            break;
        }
        match tokio::time::timeout(give_up - sent, queue.heartbeat(l.msg_id, l.attempt, lease))
            .await
        {
            Ok(Ok(true)) => {
                until = sent + lease;
                next = sent + every;
            }
            Ok(Ok(false)) => break,
            // Tried again soon: a renewal may still get through before the lease runs out.
            Ok(Err(e)) => {
                eprintln!("agent-ls: warning: a heartbeat did not get through: {e}");
                next = Instant::now() + every / 4;
            }
            Err(_) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_pause_doubles_from_15_s_up_to_10_minutes() {
        let secs: Vec<u64> = [1, 2, 3, 6, 7, 1000].map(|a| backoff(a).as_secs()).to_vec();
        assert_eq!(secs, [15, 30, 60, 480, 600, 600]);
    }
}
