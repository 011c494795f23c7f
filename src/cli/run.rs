//! `agent-ls run "<goal>"`: the agent loop on files on disk. Approval happens on the terminal
//! (or with --yes); stdout carries only the final answer (or, with --json, the runFinished
//! object); logs and streamed tokens go to stderr.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;
use tokio_util::sync::CancellationToken;

use agent_ls_core::agent::{self, FailureKind, RunStatus};
use agent_ls_core::edit::{FileChange, FileText};
use agent_ls_core::text::visible;
use agent_ls_runtime::config;
use agent_ls_runtime::drive::policy::Asked;
use agent_ls_runtime::drive::{self, ApplyError, ChangeQuestion, Outcome, Shell};
use agent_ls_runtime::git::isolate::{IsolateError, Isolated};
use agent_ls_runtime::lock::RunLock;
use agent_ls_runtime::runs::disk::OnDisk;
use agent_ls_runtime::runs::rewind::{NotRewound, Rewind};
use agent_ls_runtime::runs::{self, AfterRun, Begin, RunRequest};
use agent_ls_runtime::store::StoreThread;
use agent_ls_runtime::tests_run::{RunError, RunResult, TestState};
use agent_ls_runtime::trust::sandbox::Sandbox;

/// How approval is given without an editor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ask on the terminal.
    Ask,
    /// Apply without asking (--yes, or approval = "auto").
    Yes,
    /// Show the proposed change and apply nothing (--dry-run).
    DryRun,
}

pub struct Options {
    pub goal: String,
    pub workspace: PathBuf,
    pub json: bool,
    pub mode: Mode,
    /// Answer every model call from this file (a replay script or a run journal).
    pub replay: Option<PathBuf>,
    /// Go on with this interrupted run instead of starting one.
    pub resume: Option<String>,
    /// --from: rewind the run of this step back to it first, and follow its conversation.
    pub from: Option<u64>,
    /// With --yes, also write protected files and changes the static scan flagged.
    pub allow_protected: bool,
    /// The agent to run the goal (--agent); the configuration's default when `None`.
    pub agent: Option<String>,
    /// --isolated: work in a new worktree whatever `git.isolation` says.
    pub isolated: bool,
    /// --reproduce: the tester writes a test that fails for the goal's bug before any fix.
    pub reproduce: bool,
    /// --max-cost: this run's cap on what its model calls cost, in dollars.
    pub max_cost: Option<f64>,
}

/// Exit codes of `agent-ls run`.
pub mod exit {
    pub const DONE: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const PARTIAL: u8 = 2;
    pub const CONFIG: u8 = 3;
    pub const AUTH: u8 = 4;
    pub const TIMEOUT: u8 = 5;
    pub const INTERRUPTED: u8 = 130;
}

struct CliShell {
    disk: OnDisk,
    /// A dry run asks nothing.
    dry_run: bool,
}

impl Shell for CliShell {
    fn read(&self, relative: &str) -> FileText {
        self.disk.read(relative)
    }

    fn present(&self) -> bool {
        !self.dry_run && std::io::stdin().is_terminal()
    }

    fn show_change(&mut self, q: &ChangeQuestion<'_>, _written: bool) {
        eprintln!("{}{}", visible(q.diff), visible(&q.review.describe()));
    }

    async fn ask_change(&mut self, q: &ChangeQuestion<'_>) -> bool {
        self.show_change(q, false);
        match q.why {
            Asked::Flagged => ask_terminal("The static scan flagged this change. Apply it anyway?"),
            Asked::Approval => ask_terminal("Apply this change?"),
        }
    }

    /// A protected file is allowed by typing its path, not by a y.
    async fn confirm_protected(&mut self, path: &str, why: &str) -> bool {
        eprint!("{path} is protected ({why}). Type its path to allow this change to write it: ");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
        line.trim() == path
    }

    async fn ask_install(&mut self, library: &str, argv: &[String]) -> bool {
        let joined = argv.join(" ");
        ask_terminal(&format!(
            "The tester's property test needs {library}. Install it as a dev dependency ({})?",
            visible(&joined)
        ))
    }

    async fn ask_call(&mut self, name: &str, arguments: &serde_json::Value, why: &str) -> bool {
        let call = agent_ls_runtime::permissions::call_summary(name, arguments);
        eprintln!("agent-ls: {}", visible(why));
        ask_terminal(&format!(
            "Let the agent call `{name}` ({})?",
            visible(&call)
        ))
    }

    async fn write(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        if let Some(warning) = self.disk.write(changes)? {
            self.warn(&warning);
        }
        Ok(())
    }

    fn task(&mut self, task: &str, _iteration: u32) {
        self.disk.task(task);
    }

    async fn run_tests(
        &mut self,
        cancel: &CancellationToken,
        command: Option<Vec<String>>,
    ) -> Result<RunResult, RunError> {
        self.disk.run_tests(cancel, command).await
    }

    fn progress(&mut self, message: &str) {
        eprintln!("agent-ls: {}", visible(message));
    }

    fn warn(&mut self, message: &str) {
        eprintln!("agent-ls: warning: {}", visible(message));
    }
}

/// Asks a yes/no question on the terminal; anything but yes is no.
fn ask_terminal(question: &str) -> bool {
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    matches!(line.trim(), "y" | "Y" | "yes")
}

/// Why `agent-ls run` stops before its goal is run; each has its exit code.
#[derive(Debug, Error)]
enum Stop {
    #[error("cannot open the workspace {}: {source}", path.display())]
    Workspace {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The configuration's errors, one a line.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\nagent-ls: "))]
    Config(Vec<config::ConfigError>),
    #[error(transparent)]
    Agent(#[from] drive::AgentError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Resume(#[from] drive::ResumeError),
    #[error(
        "undo and redo act on the editor's buffers and the server's step history: \
         use agent-ls.undo / agent-ls.redo (VS Code: Agent: Undo, Neovim: :AgentUndo)"
    )]
    UndoHere,
    #[error(transparent)]
    Lock(#[from] agent_ls_runtime::lock::LockError),
    #[error("cannot isolate the run: {0}")]
    Isolate(#[from] IsolateError),
    #[error(transparent)]
    Rewind(#[from] NotRewound),
}

impl Stop {
    fn code(&self) -> u8 {
        match self {
            Stop::Runtime(_) | Stop::Resume(_) | Stop::UndoHere | Stop::Rewind(_) => exit::FAILED,
            Stop::Workspace { .. }
            | Stop::Config(_)
            | Stop::Agent(_)
            | Stop::Lock(_)
            | Stop::Isolate(_) => exit::CONFIG,
        }
    }
}

/// Runs the goal and returns the process exit code.
pub fn run(opts: Options) -> u8 {
    let code = match run_goal(opts) {
        Ok(code) => code,
        Err(stop) => {
            eprintln!("agent-ls: {stop}");
            stop.code()
        }
    };
    // The map the run started may still be parsing: what it parsed is saved for the next run.
    agent_ls_runtime::repomap::finish_writes(MAP_WRITE_WAIT);
    code
}

/// How long the end of a run waits for its map's build to write the batch it was parsing (a
/// batch is at most 128 files, about a tenth of a second on two cores; only a big
/// repository's first runs have one in flight). Within issue 39's 0.2 s from the last answer
/// to the end.
const MAP_WRITE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

fn run_goal(opts: Options) -> Result<u8, Stop> {
    let root = opts
        .workspace
        .canonicalize()
        .map_err(|source| Stop::Workspace {
            path: opts.workspace.clone(),
            source,
        })?;
    let (cfg, trusted, ignored) = configure(&root, &opts)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Stop::Runtime)?;
    let resume = match &opts.resume {
        None => None,
        Some(id) => {
            let store = drive::recorded_store(&root)?;
            let (goal, checkpoint) = drive::resume_point(&store, id, None)?;
            Some((id.clone(), goal, checkpoint))
        }
    };
    let rewound = match opts.from {
        Some(step) => Some(rewind_first(&root, &cfg, step)?),
        None => None,
    };
    if resume.is_none()
        && rewound.is_none()
        && let Some(code) = route(&root, &cfg, &opts, &runtime)?
    {
        return Ok(code);
    }
    let (run_id, goal, begin) = match (resume, rewound) {
        (Some((id, goal, checkpoint)), _) => (id, goal, Begin::Resume(checkpoint.map(Box::new))),
        (None, Some(r)) => (drive::new_run_id(), opts.goal.clone(), r.begin()),
        (None, None) => (drive::new_run_id(), opts.goal.clone(), Begin::New),
    };
    let request = RunRequest {
        goal: goal.clone(),
        agent: opts.agent.clone(),
        reproduce: opts.reproduce,
        begin,
        dry_run: opts.mode == Mode::DryRun,
        allow_protected: opts.allow_protected,
        yes: opts.mode == Mode::Yes,
        worktree: opts.isolated,
    };
    let prepared = runs::prepare(&cfg, request)?;
    let isolated = runs::isolate(&root, &prepared)?;
    if let Some(i) = &isolated {
        eprintln!("agent-ls: {}", i.describe());
    }
    // An isolated run in a worktree works there: its tools, tests, checkpoint, journal,
    // store and lock are the worktree's (docs/git.md says why).
    let home = root.clone();
    let root = isolated.as_ref().map_or(root, |i| i.root.clone());
    // One run per workspace, whoever runs it: the lock is held until this process ends.
    let _lock = RunLock::acquire(&root, &goal)?;
    let store = StoreThread::open(root.clone(), |opened| match opened {
        Ok(Some(notice)) => eprintln!("agent-ls: {notice}"),
        Ok(None) => {}
        Err(e) => eprintln!("agent-ls: the run's figures will not be kept: {e}"),
    });
    let setup = Setup {
        root: &root,
        home: &home,
        store: &store,
        trusted,
        isolated: isolated.as_ref(),
    };
    let mut outcome = runtime.block_on(drive_goal(setup, prepared, run_id));
    outcome.ignored_config = ignored;
    // The record is written before the process says it is done.
    store.flush_blocking();
    // Only a run isolated on a branch (not a worktree) switched this checkout's branch.
    let switched = isolated.as_ref().is_some_and(|i| i.worktree.is_none());
    report(&outcome, opts.json, switched);
    Ok(code_for(&outcome))
}

/// `--from STEP`: the step's run taken back to it on disk, under the workspace's lock, before
/// the new run starts; what was undone is said on stderr.
fn rewind_first(root: &Path, cfg: &config::Config, step: u64) -> Result<Rewind, Stop> {
    let _lock = RunLock::acquire(root, &format!("rewind to step {step}"))?;
    let r = runs::rewind::on_disk(root, step, &cfg.edit.limits())?;
    eprintln!(
        "agent-ls: {}; the new run follows its conversation ({} messages)",
        r.describe(),
        r.earlier.messages.len()
    );
    Ok(r)
}

/// The configuration for this run: the layers, and --replay.
fn configure(root: &Path, opts: &Options) -> Result<(config::Config, bool, Vec<String>), Stop> {
    let loaded = super::setup::load_config(Some(root.to_path_buf()));
    if !loaded.errors.is_empty() {
        return Err(Stop::Config(loaded.errors));
    }
    if !loaded.untrusted.is_empty() {
        eprintln!(
            "agent-ls: {}",
            config::untrusted_message(&loaded.untrusted, loaded.trusted)
        );
    }
    let mut cfg = loaded.config;
    if let Some(cap) = opts.max_cost {
        cfg.agent.max_cost_usd = Some(cap);
    }
    if let Some(file) = &opts.replay {
        cfg.model.provider = Some("replay".into());
        cfg.model.replay_file = Some(file.clone());
        cfg.model.fallback.clear();
        cfg.roles = Default::default();
    }
    Ok((cfg, loaded.trusted, loaded.untrusted))
}

/// A goal that is not for the agent: a command to run, the status to print, or undo (which
/// is the editor's). The exit code when it was one of those.
fn route(
    root: &Path,
    cfg: &config::Config,
    opts: &Options,
    runtime: &tokio::runtime::Runtime,
) -> Result<Option<u8>, Stop> {
    match agent::route(&opts.goal) {
        agent::Route::Agent => Ok(None),
        agent::Route::Undo(_) | agent::Route::Redo => Err(Stop::UndoHere),
        agent::Route::Status => {
            for r in agent_ls_runtime::journal::list(root).iter().take(10) {
                println!("{}  {:<11}  {}", r.run_id, r.status.as_str(), r.goal);
            }
            Ok(Some(exit::DONE))
        }
        agent::Route::Command(argv) => Ok(Some(
            runtime.block_on(run_command(root, cfg, argv, opts.json)),
        )),
    }
}

/// Where a run of the goal works and is recorded.
struct Setup<'a> {
    root: &'a Path,
    /// The workspace the configuration is from (the run's root unless it is isolated).
    home: &'a Path,
    store: &'a StoreThread,
    /// The folder is trusted: committing may run its git hooks.
    trusted: bool,
    /// Where an isolated run works (`git.isolation`, --isolated).
    isolated: Option<&'a Isolated>,
}

/// The agent's loop on the goal (or on the resumed run), to its outcome (its files committed
/// when it succeeded and `git.commit = "on_success"`).
async fn drive_goal(s: Setup<'_>, prepared: runs::Prepared, run_id: String) -> Outcome {
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let cfg = prepared.config.clone();
    let mut shell = CliShell {
        disk: OnDisk::new(s.root, cfg.clone(), &run_id),
        dry_run: prepared.policy.dry_run,
    };
    let shown = std::sync::atomic::AtomicUsize::new(0);
    let on_token = |t: &str| echo_token(&shown, t);
    let env = runs::Env {
        root: s.root,
        home: s.home,
        cancel: &cancel,
        run_id,
        store: Some(s.store),
        events: None,
        on_token: Some(&on_token),
    };
    let (_, mut outcome) = runs::drive(prepared, env, &mut shell).await;
    if let Some(i) = s.isolated {
        outcome.branch = Some(i.branch.clone());
        outcome.worktree = i.worktree.as_ref().map(|w| w.display().to_string());
    }
    // `agent-ls run` has no one to ask after the run: unset, it does not commit.
    let setting = (s.root, &cfg, s.trusted);
    match runs::after_run(s.store, setting, &mut outcome, false).await {
        AfterRun::Committed { id, subject } => {
            eprintln!("agent-ls: committed {}: {subject}", &id[..id.len().min(12)]);
        }
        AfterRun::Failed(why) => eprintln!("agent-ls: the run's files were not committed: {why}"),
        AfterRun::Left | AfterRun::Offer => {}
    }
    outcome
}

/// How much of the model's streamed answers `agent-ls run` echoes on stderr: enough to watch
/// an answer come, never the megabytes of one that runs into its cap.
const ECHO_BYTES: usize = 64 * 1024;

/// Echoes a streamed token on stderr until `ECHO_BYTES` were shown in all, then says once
/// that the rest is not shown.
fn echo_token(shown: &std::sync::atomic::AtomicUsize, token: &str) {
    use std::sync::atomic::Ordering;
    let before = shown.fetch_add(token.len(), Ordering::Relaxed);
    let mut err = std::io::stderr();
    if before + token.len() <= ECHO_BYTES {
        let _ = err.write_all(visible(token).as_bytes());
    } else if before <= ECHO_BYTES {
        let _ = writeln!(
            err,
            "\nagent-ls: (the model's answers go on; stderr shows only their first {} KiB)",
            ECHO_BYTES / 1024
        );
    }
    let _ = err.flush();
}

/// A goal that names a command ("run `make lint`"): run it like the tests (allowlist,
/// timeout, output cap) and report what it found. Exit 0 when it passed, 1 when not.
async fn run_command(root: &Path, cfg: &config::Config, argv: Vec<String>, json: bool) -> u8 {
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let test = agent_ls_runtime::tests_run::with_command(&cfg.test, argv);
    let sandbox = Sandbox::from_config(&cfg.sandbox);
    match agent_ls_runtime::tests_run::run(root, &test, &sandbox, &cancel).await {
        Ok(r) => {
            if json {
                let failures: Vec<_> = r
                    .failures
                    .iter()
                    .map(|f| serde_json::json!({"test_id": f.test_id, "message": f.message, "location": f.location.as_ref().map(|l| serde_json::json!({"file": l.file, "line": l.line}))}))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"command": r.command.argv.join(" "), "state": r.state(), "passed": r.passed, "failed": r.failed, "duration_ms": r.duration_ms, "failures": failures})
                );
            } else {
                println!("{}", visible(r.output.trim_end()));
                println!("{}: {}", r.command.argv.join(" "), r.state().as_str());
                if let Some(why) = r.stopped() {
                    eprintln!("agent-ls: {why}");
                }
            }
            if let Some(why) = &r.environment {
                eprintln!("agent-ls: the command did not run: {}", visible(why));
            }
            match r.state() {
                TestState::Passed | TestState::NoTests => exit::DONE,
                TestState::Error => exit::CONFIG,
                TestState::Cancelled => exit::INTERRUPTED,
                TestState::TimedOut => exit::TIMEOUT,
                _ => exit::FAILED,
            }
        }
        Err(e) => {
            eprintln!("agent-ls: {e}");
            exit::CONFIG
        }
    }
}

/// The answer on stdout, and on stderr the figures, the checkpoint with what to do with it,
/// and where an isolated run worked. `switched`: the run moved this checkout to a new branch.
fn report(o: &Outcome, json: bool, switched: bool) {
    if json {
        println!("{}", serde_json::to_string(o).unwrap_or_default());
    } else {
        println!("{}", visible(o.answer.trim_end()));
    }
    let tests = match &o.tests.stopped {
        Some(why) => format!("tests did not finish ({why})"),
        None => format!(
            "tests {} passed / {} failed",
            o.tests.passed, o.tests.failed
        ),
    };
    eprintln!(
        "agent-ls: {} after {} iteration(s), {} file(s) changed, {tests}, {} tokens, {} ms",
        o.status.as_str(),
        o.iterations,
        o.files_changed.len(),
        o.tokens,
        o.duration_ms
    );
    match (&o.checkpoint, &o.commit) {
        (Some(c), None) if !o.files_changed.is_empty() => eprintln!(
            "agent-ls: git checkpoint {} holds the files as they were before the run: agent-ls diff shows the run's change, agent-ls rollback undoes it, agent-ls commit commits it",
            &c[..c.len().min(12)]
        ),
        _ => {}
    }
    match (&o.branch, &o.worktree) {
        (Some(b), Some(w)) => eprintln!(
            "agent-ls: the run worked on branch {b} in the worktree {w} (agent-ls diff --workspace {w}; git worktree remove {w} when done)"
        ),
        (Some(b), None) if switched => eprintln!(
            "agent-ls: the run worked on the branch {b} it switched to (git switch - goes back to where you were)"
        ),
        _ => {}
    }
}

pub fn code_for(o: &Outcome) -> u8 {
    match o.status {
        RunStatus::Done | RunStatus::Proposed => exit::DONE,
        RunStatus::Cancelled => exit::INTERRUPTED,
        _ => match o.failure_kind {
            Some(FailureKind::Auth) => exit::AUTH,
            Some(FailureKind::Config) => exit::CONFIG,
            Some(FailureKind::Timeout) => exit::TIMEOUT,
            _ if !o.files_changed.is_empty() => exit::PARTIAL,
            _ => exit::FAILED,
        },
    }
}

/// SIGINT and SIGTERM cancel the run: the model call and test run stop, and the loop ends
/// between steps, so files are either written whole or not at all.
fn watch_signals(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("agent-ls: interrupted; stopping");
        cancel.cancel();
    });
}
