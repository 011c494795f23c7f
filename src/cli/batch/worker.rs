//! One task of `agent-ls batch`: its repository (cloned once when a URL), its own worktree on
//! the branch `agent/batch-<id>` at its ref, and `agent-ls run --json --yes` there as a child
//! process in its own process group, so a Ctrl-C ends its whole tree.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use agent_ls_runtime::clock::now_ms;

use super::results::TaskResult;
use super::tasks::{self, Task};

/// How long a cancelled run has to stop by itself before its process group is killed.
const GRACE: Duration = Duration::from_secs(5);
/// How many branch names a worktree tries before it gives up.
const MAX_SUFFIX: u32 = 50;

/// Why a task's worktree could not be made or its run not started or followed.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("cannot run git: {0}")]
    NoGit(std::io::Error),
    #[error("git {args} in {}: {stderr}", .dir.display())]
    Git {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("the repo {} cannot be opened: {source}", .path.display())]
    NoRepo {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the ref {wanted:?} is not a commit of {}", .repo.display())]
    NotACommit { wanted: String, repo: PathBuf },
    #[error("cannot remove the old worktree {}: {source}", .path.display())]
    OldWorktree {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot take the worktree lock {}: {source}", .path.display())]
    WorktreeLock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make {}: {source}", .path.display())]
    MakeDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start {}: {source}", .exe.display())]
    Start {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("lost the run: {0}")]
    Lost(std::io::Error),
}

/// What every task shares.
pub struct Context {
    /// The output folder (absolute): `repos/`, `worktrees/`, `logs/`.
    pub out: PathBuf,
    /// Relative repository paths are taken from here (the tasks file's folder).
    pub base: PathBuf,
    /// The agent-ls binary to run each task with.
    pub exe: PathBuf,
    /// This process's git commands that add clones, worktrees and branches, one at a time;
    /// `worktree_lock` keeps other processes' worktree changes out too.
    pub git_lock: Mutex<()>,
    /// Set for every run before the task's own settings (a worker's `memory.url`).
    pub env: Vec<(String, String)>,
}

/// What a worker may still spend on its runs' model calls (`--max-cost`, per worker): each
/// run gets what is left as its own cap, and a worker whose cap is spent takes no more tasks.
/// Runs that go on at once (`--concurrency`) each start with what was left when they started,
/// so together they may pass the cap by what the others spend meanwhile.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spend {
    cap: Option<f64>,
    spent: f64,
}

impl Spend {
    pub fn new(cap: Option<f64>) -> Spend {
        Spend { cap, spent: 0.0 }
    }

    /// The next run's cap: what is left (`None`: no cap).
    pub fn left(&self) -> Option<f64> {
        self.cap.map(|c| (c - self.spent).max(0.0))
    }

    /// The cap is spent: the worker stops taking tasks. Says so once, naming the figures.
    pub fn spent_out(&self) -> Option<String> {
        let cap = self.cap?;
        (self.spent >= cap).then(|| {
            format!(
                "its runs have cost ${:.4} of its ${cap:.4} cap (--max-cost): it takes no more tasks; the rest stay for a later run",
                self.spent
            )
        })
    }

    pub fn add(&mut self, r: &TaskResult) {
        self.spent += r.cost_usd.unwrap_or(0.0);
    }
}

/// Runs one task to its result; `None` when it was cancelled (it gets no result line, so a
/// rerun does it again). A `trusted` task's config may name endpoints and commands.
pub async fn run(
    ctx: &Context,
    (task, left): (&Task, Option<f64>),
    trusted: bool,
    cancel: &CancellationToken,
) -> Option<TaskResult> {
    let started = Instant::now();
    let ms = |s: Instant| s.elapsed().as_millis() as u64;
    let env = match tasks::settings(task.config.as_ref(), trusted) {
        Ok(env) => env,
        Err(why) => {
            return Some(TaskResult::without_run(
                &task.id,
                "refused",
                format!("task {} is refused: {why}", task.id),
                ms(started),
            ));
        }
    };
    let place = {
        let _one = ctx.git_lock.lock().await;
        prepare(ctx, task).await
    };
    let Place {
        worktree,
        base,
        branch,
    } = match place {
        Ok(p) => p,
        // Cancelled while its worktree was made: no result, so a rerun does it.
        Err(_) if cancel.is_cancelled() => return None,
        Err(why) => {
            let why = why.to_string();
            return Some(TaskResult::without_run(&task.id, "error", why, ms(started)));
        }
    };
    let log = ctx.out.join("logs").join(format!("{}.log", task.id));
    let outcome = match spawn_run(ctx, (task, left), &worktree, &env, &log, cancel).await {
        Ok(Some(o)) => o,
        Ok(None) => return None,
        Err(why) => {
            let why = why.to_string();
            return Some(TaskResult::without_run(&task.id, "error", why, ms(started)));
        }
    };
    let (code, stdout) = outcome;
    let o: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    let run_id = o["run_id"].as_str().map(str::to_string);
    let journal = run_id
        .as_deref()
        .and_then(|id| agent_ls_runtime::journal::path_of(&worktree, id));
    let status = o["status"].as_str().unwrap_or("error").to_string();
    let reason = (status == "error").then(|| {
        format!(
            "the run gave no outcome (exit code {code}); see {}",
            log.display()
        )
    });
    Some(TaskResult {
        id: task.id.clone(),
        status,
        exit_code: Some(code),
        tokens: o["tokens"].as_u64().unwrap_or(0),
        cost_usd: o["cost_usd"].as_f64(),
        duration_ms: ms(started),
        diff: diff(&worktree, &base).await,
        checkpoint: o["checkpoint"].as_str().map(str::to_string),
        branch: Some(branch),
        worktree: Some(worktree.display().to_string()),
        run_id,
        journal: journal.map(|p| p.display().to_string()),
        log: Some(log.display().to_string()),
        reason,
        finished_at: now_ms(),
    })
}

/// Adds the worktree on the branch `agent/batch-<id>` at `base` (reset if it exists), or on
/// `agent/batch-<id>-2`, `-3`... when another worktree has that branch checked out (another
/// batch folder with the same ids on the same repository): the branch it is on.
async fn add_worktree(
    source: &Path,
    task: &Task,
    worktree: &Path,
    base: &str,
) -> Result<String, SetupError> {
    let w = worktree.to_string_lossy().into_owned();
    let mut last = None;
    for n in 1..=MAX_SUFFIX {
        let branch = match n {
            1 => format!("agent/batch-{}", task.id),
            n => format!("agent/batch-{}-{n}", task.id),
        };
        let add = [
            "worktree", "add", "--quiet", "--force", "-B", &branch, &w, base,
        ];
        match git(source, &add).await {
            Ok(_) => return Ok(branch),
            Err(SetupError::Git { stderr, .. })
                if stderr.contains("used by worktree")
                    || stderr.contains("already checked out") =>
            {
                last = Some(stderr);
            }
            Err(e) => return Err(e),
        }
    }
    Err(SetupError::Git {
        args: format!("worktree add -B agent/batch-{}-N", task.id),
        dir: source.to_path_buf(),
        stderr: last.unwrap_or_default(),
    })
}

/// `git ARGS` in `dir`: its trimmed stdout, or what went wrong.
async fn git(dir: &Path, args: &[&str]) -> Result<String, SetupError> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        // Its own process group: a Ctrl-C on the terminal reaches the batch, which decides,
        // and never fails a clone or a diff half-way.
        .process_group(0)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(SetupError::NoGit)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(SetupError::Git {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Whether the task's repo is a URL to clone rather than a path.
pub fn is_url(repo: &str) -> bool {
    repo.contains("://") || (repo.contains('@') && repo.contains(':'))
}

/// Where a task works.
struct Place {
    worktree: PathBuf,
    /// The commit it starts from.
    base: String,
    branch: String,
}

/// The task's worktree, new at its ref on its own branch.
async fn prepare(ctx: &Context, task: &Task) -> Result<Place, SetupError> {
    let source = if is_url(&task.repo) {
        clone_once(ctx, &task.repo).await?
    } else {
        let path = ctx.base.join(&task.repo);
        path.canonicalize()
            .map_err(|source| SetupError::NoRepo { path, source })?
    };
    let wanted = task.git_ref.as_deref().unwrap_or("HEAD");
    let base = git(
        &source,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{wanted}^{{commit}}"),
        ],
    )
    .await
    .map_err(|_| SetupError::NotACommit {
        wanted: wanted.to_string(),
        repo: source.clone(),
    })?;
    let worktree = ctx.out.join("worktrees").join(&task.id);
    let _repo = worktree_lock(&source).await?;
    // A worktree left by an earlier attempt (cancelled, or failed and retried) is dropped;
    // it was the batch's own.
    if worktree.exists() {
        let w = worktree.to_string_lossy().into_owned();
        let _ = git(&source, &["worktree", "remove", "--force", "--force", &w]).await;
        if worktree.exists() {
            std::fs::remove_dir_all(&worktree).map_err(|source| SetupError::OldWorktree {
                path: worktree.clone(),
                source,
            })?;
        }
    }
    let _ = git(&source, &["worktree", "prune"]).await;
    let branch = add_worktree(&source, task, &worktree, &base).await?;
    Ok(Place {
        worktree,
        base,
        branch,
    })
}

/// `source`'s lock for changing its worktrees, held until dropped. Workers are processes of
/// their own, often on one local repository: two `git worktree add` there at once race in
/// git itself (one reads the other's half-made `.git/worktrees/<id>`: "failed to read
/// .git/worktrees/t1/commondir"), and a `worktree prune` can drop a worktree being added.
/// The lock file sits in the repository's common git folder, which every worktree and
/// worker of it shares; the kernel releases it when its process dies.
async fn worktree_lock(source: &Path) -> Result<std::fs::File, SetupError> {
    let common = git(
        source,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )
    .await?;
    let path = PathBuf::from(common).join("agent-ls-worktrees.lock");
    let held = path.clone();
    let locked = tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&held)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .unwrap_or_else(|e| Err(std::io::Error::other(e)));
    locked.map_err(|source| SetupError::WorktreeLock { path, source })
}

/// The clone of `url` under `repos/`, made the first time a task names it.
async fn clone_once(ctx: &Context, url: &str) -> Result<PathBuf, SetupError> {
    let name: String = url
        .trim_end_matches('/')
        .trim_end_matches(".git")
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dest = ctx
        .out
        .join("repos")
        .join(if name.is_empty() { "repo".into() } else { name });
    if dest.join(".git").exists() {
        return Ok(dest);
    }
    let parent = ctx.out.join("repos");
    make_dir(&parent)?;
    let d = dest.to_string_lossy().into_owned();
    git(&parent, &["clone", "--quiet", url, &d]).await?;
    Ok(dest)
}

/// Makes `path` and the folders above it.
fn make_dir(path: &Path) -> Result<(), SetupError> {
    std::fs::create_dir_all(path).map_err(|source| SetupError::MakeDir {
        path: path.to_path_buf(),
        source,
    })
}

/// `agent-ls run --json --yes` in the worktree: `Ok(None)` when cancelled, else its exit
/// code and stdout.
async fn spawn_run(
    ctx: &Context,
    (task, left): (&Task, Option<f64>),
    worktree: &Path,
    env: &[(String, String)],
    log: &Path,
    cancel: &CancellationToken,
) -> Result<Option<(i32, String)>, SetupError> {
    make_dir(&ctx.out.join("logs"))?;
    let stderr = std::fs::File::create(log).map_err(|source| SetupError::Write {
        path: log.to_path_buf(),
        source,
    })?;
    let mut cmd = Command::new(&ctx.exe);
    cmd.arg("run")
        .arg("--json")
        .arg("--yes")
        .arg("--workspace")
        .arg(worktree);
    if let Some(a) = &task.agent {
        cmd.arg("--agent").arg(a);
    }
    // What is left of the worker's cap is this run's (`Spend`).
    if let Some(left) = left {
        cmd.arg("--max-cost").arg(left.to_string());
    }
    cmd.arg("--").arg(&task.goal);
    // The worker's own settings come last, so that nothing before them (a task's config
    // is refused if it names one) can undo them: no install outside the sandbox, no branch
    // inside the worktree.
    cmd.envs(ctx.env.iter().map(|(k, v)| (k, v)))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .envs(tasks::worker_settings())
        .current_dir(worktree)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(true);
    die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|source| SetupError::Start {
        exe: ctx.exe.clone(),
        source,
    })?;
    let pid = child.id().map(|p| p as i32);
    let mut stdout = child.stdout.take();
    let read = async {
        let mut text = String::new();
        if let Some(s) = stdout.as_mut() {
            use tokio::io::AsyncReadExt;
            let _ = s.read_to_string(&mut text).await;
        }
        text
    };
    tokio::select! {
        (text, status) = async { let t = read.await; (t, child.wait().await) } => {
            let code = status.map_err(SetupError::Lost)?.code().unwrap_or(-1);
            Ok(Some((code, text)))
        }
        _ = cancel.cancelled() => {
            end_group(pid, &mut child).await;
            Ok(None)
        }
    }
}

/// The run gets SIGKILL when the process that started it dies (PR_SET_PDEATHSIG), however it
/// dies: a worker killed with SIGKILL (or by the OOM killer) runs no code to end its runs, and
/// an orphaned run would go on editing a worktree whose task another worker has taken over.
/// Linux sends it when the thread that forked exits; tokio's worker threads live as long as
/// the runtime, which is the process's life here.
fn die_with_parent(cmd: &mut Command) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::{Pid, getppid};
    let parent = Pid::this();
    // SAFETY: between fork and exec this makes only async-signal-safe system calls (prctl,
    // getppid, getpid, kill, through nix's wrappers, which allocate nothing) and allocates
    // nothing itself.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent died before the prctl: no signal will come, so end here.
            if getppid() != parent {
                let _ = kill(Pid::this(), Signal::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Ends a cancelled run's process group: SIGTERM (the run stops between steps and ends its
/// test processes), then SIGKILL for whatever is left after `GRACE`.
async fn end_group(pid: Option<i32>, child: &mut tokio::process::Child) {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let Some(pid) = pid else { return };
    let group = Pid::from_raw(pid);
    let _ = killpg(group, Signal::SIGTERM);
    let _ = tokio::time::timeout(GRACE, child.wait()).await;
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.wait().await;
}

/// The task's change against the commit it started from, new files included (marked
/// intent-to-add in the worktree's own index) and agent-ls's own folder left out.
async fn diff(worktree: &Path, base: &str) -> String {
    let own = ":(exclude).agent-ls";
    let _ = git(
        worktree,
        &["add", "--intent-to-add", "--all", "--", ".", own],
    )
    .await;
    git(
        worktree,
        &["diff", "--no-color", "--no-ext-diff", base, "--", ".", own],
    )
    .await
    .unwrap_or_else(|e| format!("(no diff: {e})"))
}

#[cfg(test)]
mod tests {
    use super::Spend;
    use crate::cli::batch::results::TaskResult;

    #[test]
    fn a_workers_cap_is_shared_by_its_runs_and_then_stops_it() {
        let mut spend = Spend::new(Some(0.10));
        assert_eq!(spend.left(), Some(0.10));
        assert!(spend.spent_out().is_none());
        let mut r = TaskResult::without_run("t", "done", String::new(), 0);
        r.cost_usd = Some(0.07);
        spend.add(&r);
        assert!(spend.left().is_some_and(|l| (l - 0.03).abs() < 1e-9));
        assert!(spend.spent_out().is_none());
        spend.add(&r);
        assert_eq!(spend.left(), Some(0.0));
        let why = spend.spent_out().expect("spent");
        assert!(why.contains("$0.1400") && why.contains("$0.1000"), "{why}");
        assert_eq!(Spend::new(None).left(), None);
    }

    use super::*;

    /// A git repository with one commit.
    fn repository() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&["init", "--quiet"]);
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        git(&["add", "."]);
        git(&["commit", "--quiet", "-m", "one"]);
        dir
    }

    /// Workers as separate as processes are (each its own output folder and in-process git
    /// lock) make their worktrees of one local repository at once, as a queue's workers on
    /// one machine do; every one is made. Without the lock one round in three failed here,
    /// so there are several.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workers_adding_worktrees_to_one_repository_at_once_all_get_theirs() {
        for _ in 0..5 {
            let repo = repository();
            let outs = tempfile::tempdir().unwrap();
            let adds = (0..16).map(|n| {
                let ctx = Context {
                    out: outs.path().join(format!("w{n}")),
                    base: repo.path().to_path_buf(),
                    exe: PathBuf::from("agent-ls"),
                    git_lock: Mutex::new(()),
                    env: vec![],
                };
                let task = Task {
                    id: format!("t{n}"),
                    repo: ".".into(),
                    git_ref: None,
                    goal: "g".into(),
                    agent: None,
                    config: None,
                };
                tokio::spawn(async move { prepare(&ctx, &task).await.map(|p| p.worktree) })
            });
            for add in futures::future::join_all(adds).await {
                let worktree = add.unwrap().unwrap();
                assert!(worktree.join("a.txt").exists(), "{}", worktree.display());
            }
        }
    }
}
