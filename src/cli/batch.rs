//! `agent-ls batch TASKS.jsonl --workers N`: many goals, each in its own git worktree, run by
//! N workers at once; each task is an `agent-ls run` child process (one driver for every
//! surface), and each result a line of `DIR/results.jsonl` (docs/scale.md).

mod progress;
pub mod queue;
mod results;
mod signals;
mod tasks;
mod worker;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::run::exit;
use results::TaskResult;
use signals::watch_signals;
use tasks::Task;

// `agent-ls batch`'s arguments (a plain comment: main.rs describes the subcommand).
#[derive(clap::Args)]
pub struct BatchArgs {
    /// The tasks: one JSON object a line, {id, repo, ref?, goal, agent?, config?}.
    #[arg(required = true)]
    pub tasks: Option<PathBuf>,
    /// How many tasks run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub workers: u16,
    /// Where results.jsonl, the clones, worktrees and logs go.
    #[arg(long, default_value = "agent-ls-batch")]
    pub out: PathBuf,
    /// Run again the tasks whose newest result is not `done`.
    #[arg(long)]
    pub retry_failed: bool,
    /// Print a JSON summary on stdout at the end.
    #[arg(long)]
    pub json: bool,
    /// Run only the N-th task of the file (from 0, counting the non-blank lines), as a
    /// Kubernetes Indexed Job's `$JOB_COMPLETION_INDEX` picks it.
    #[arg(long, value_name = "N")]
    pub index: Option<usize>,
    /// The most each worker's runs may cost in all, in US dollars, as [prices] counts them:
    /// each run is capped at what is left, and a worker whose cap is spent takes no more
    /// tasks (they stay for a later batch).
    #[arg(long, value_name = "USD", value_parser = super::headless::positive_dollars)]
    pub max_cost: Option<f64>,
}

/// `agent-ls batch`'s subcommands.
#[derive(clap::Subcommand)]
pub enum BatchCommand {
    /// Count a shared queue's tasks: queued, running, done and failed, per worker.
    Status(queue::StatusArgs),
}

/// Runs a subcommand of `agent-ls batch`.
pub fn command(c: BatchCommand) -> ExitCode {
    match c {
        BatchCommand::Status(args) => queue::status(args),
    }
}

/// Runs the batch and returns the exit code: 0 every task is done, 1 some is not, 3 the
/// tasks file was refused, 130 interrupted.
pub fn run(args: BatchArgs) -> ExitCode {
    ExitCode::from(match run_batch(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("agent-ls: {e:#}");
            exit::CONFIG
        }
    })
}

fn run_batch(args: BatchArgs) -> anyhow::Result<u8> {
    let Some(file) = args.tasks.clone() else {
        anyhow::bail!("which tasks file? (agent-ls batch TASKS.jsonl)");
    };
    let Some(all) = read_tasks(&file, args.index) else {
        return Ok(exit::CONFIG);
    };
    let out = out_folder(&args.out)?;
    let results_path = out.join("results.jsonl");
    let before = results::newest(&results_path)?;
    let pending: VecDeque<Task> = all
        .iter()
        .filter(|t| match before.get(&t.id) {
            None => true,
            Some(r) => args.retry_failed && !r.succeeded(),
        })
        .cloned()
        .collect();
    let skipped = all.len() - pending.len();
    let ctx = worker::Context {
        out,
        base: file
            .canonicalize()?
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
        exe: std::env::current_exe()?,
        git_lock: tokio::sync::Mutex::new(()),
        env: Vec::new(),
    };
    let mut writer = results::Writer::open(&results_path)?;
    let mut bar = progress::Progress::new(all.len(), skipped);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cancel = CancellationToken::new();
    let finished = runtime.block_on(async {
        watch_signals(cancel.clone());
        let crew = (args.workers, args.max_cost);
        drive(ctx, pending, crew, &cancel, |event| match event {
            Event::Started(id) => {
                bar.started(&id);
                Ok(())
            }
            Event::Finished(r) => {
                writer.append(&r)?;
                bar.finished(&r);
                Ok(())
            }
        })
        .await
    })?;
    bar.end();
    let after = results::newest(&results_path)?;
    let not_done = all
        .iter()
        .filter(|t| !after.get(&t.id).is_some_and(TaskResult::succeeded))
        .count();
    if args.json {
        println!(
            "{}",
            serde_json::json!({"tasks": all.len(), "skipped": skipped, "ran": finished, "not_done": not_done, "cancelled": cancel.is_cancelled(), "results": results_path})
        );
    }
    Ok(if cancel.is_cancelled() {
        exit::INTERRUPTED
    } else if not_done > 0 {
        exit::FAILED
    } else {
        exit::DONE
    })
}

/// The tasks of `file` to run (`--index` picks one), or `None` when the file is refused,
/// said on stderr. Nothing runs from a file with a bad line: its task would be lost, or run
/// on a guess.
fn read_tasks(file: &Path, index: Option<usize>) -> Option<Vec<Task>> {
    let all = match tasks::read(file) {
        Ok(t) => t,
        Err(errors) => {
            for e in &errors {
                eprintln!("agent-ls: {}: {e}", file.display());
            }
            eprintln!("agent-ls: the tasks file is refused; nothing was run");
            return None;
        }
    };
    match pick(all, index) {
        Ok(t) => Some(t),
        Err(why) => {
            eprintln!("agent-ls: {}: {why}; nothing was run", file.display());
            None
        }
    }
}

/// The output folder, made if need be, as an absolute path. The default one is made in the
/// current directory, often a checkout: its own `.gitignore` keeps the user's `git status`
/// as it was.
fn out_folder(out: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let out = out.canonicalize()?;
    let ignore = out.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# agent-ls batch's results, clones and worktrees\n*\n",
        )?;
    }
    Ok(out)
}

/// The tasks this batch is about: all of them, or with `--index N` the N-th alone. The file
/// is checked whole first either way, so every pod of an Indexed Job refuses a bad file the
/// same way, and an index past the end (a Job's `completions` larger than the file) says so
/// rather than succeeding with nothing done.
fn pick(all: Vec<Task>, index: Option<usize>) -> Result<Vec<Task>, NoSuchTask> {
    let Some(n) = index else { return Ok(all) };
    let count = all.len();
    match all.into_iter().nth(n) {
        Some(task) => Ok(vec![task]),
        None if count == 0 => Err(NoSuchTask::Empty(n)),
        None => Err(NoSuchTask::PastTheEnd { n, count }),
    }
}

/// The task `--index` names is not in the file.
#[derive(Debug, thiserror::Error)]
enum NoSuchTask {
    #[error("--index {0}: the file has no task")]
    Empty(usize),
    #[error("--index {n} is past the end: the file has {count} task(s), indexes 0 to {}", .count - 1)]
    PastTheEnd { n: usize, count: usize },
}

/// The workers: each takes the next task until none is left or the batch is cancelled, and
/// hands its result to `on_event` (which writes it) as soon as it ends. The number of
/// results written.
async fn drive(
    ctx: worker::Context,
    pending: VecDeque<Task>,
    (workers, max_cost): (u16, Option<f64>),
    cancel: &CancellationToken,
    mut on_event: impl FnMut(Event) -> std::io::Result<()>,
) -> anyhow::Result<usize> {
    let ctx = Arc::new(ctx);
    let queue = Arc::new(Mutex::new(pending));
    let (send, mut receive) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..workers {
        let (ctx, queue, send, cancel) = (ctx.clone(), queue.clone(), send.clone(), cancel.clone());
        tokio::spawn(async move {
            let mut spend = worker::Spend::new(max_cost);
            loop {
                if cancel.is_cancelled() {
                    break;
                }
                if let Some(why) = spend.spent_out() {
                    eprintln!("agent-ls: a worker stops: {why}");
                    break;
                }
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(task) = next else { break };
                let _ = send.send(Event::Started(task.id.clone()));
                if let Some(r) = worker::run(&ctx, (&task, spend.left()), false, &cancel).await {
                    spend.add(&r);
                    let _ = send.send(Event::Finished(Box::new(r)));
                }
            }
        });
    }
    drop(send);
    let mut written = 0;
    // Results are written here, one task at a time, so lines never interleave.
    while let Some(event) = receive.recv().await {
        written += usize::from(matches!(event, Event::Finished(_)));
        on_event(event)?;
    }
    Ok(written)
}

/// What a worker tells the writer.
enum Event {
    Started(String),
    Finished(Box<TaskResult>),
}
