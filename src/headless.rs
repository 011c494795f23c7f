//! `agent-ls run "<goal>"`: the agent loop on files on disk. Approval happens on the terminal
//! (or with --yes); stdout carries only the final answer (or, with --json, the runFinished
//! object); logs and streamed tokens go to stderr.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::agent::{self, Budget, Run};
use crate::config::{self, Approval, Inputs};
use crate::drive::{self, ApplyError, Drive, Outcome, Shell};
use crate::edit::{FileChange, FileText};
use crate::files;
use crate::model::Models;

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

struct CliShell<'a> {
    root: &'a Path,
    mode: Mode,
    proposed: Option<String>,
}

impl Shell for CliShell<'_> {
    fn read(&self, relative: &str) -> FileText {
        files::read_for_plan(self.root, relative)
    }

    async fn approve(&mut self, _changes: &[FileChange], diff: &str) -> bool {
        match self.mode {
            Mode::Yes => {
                eprintln!("{diff}");
                true
            }
            Mode::DryRun => {
                self.proposed = Some(diff.to_string());
                false
            }
            Mode::Ask => {
                eprintln!("{diff}");
                if !std::io::stdin().is_terminal() {
                    eprintln!(
                        "agent-ls: no terminal to ask on, so the change is not applied; use --yes to apply without asking"
                    );
                    return false;
                }
                eprint!("Apply this change? [y/N] ");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                let _ = std::io::stdin().lock().read_line(&mut line);
                matches!(line.trim(), "y" | "Y" | "yes")
            }
        }
    }

    async fn apply(&mut self, changes: &[FileChange]) -> Result<(), ApplyError> {
        // Never overwrite what changed since the change was computed.
        for c in changes {
            let now = match files::read_for_plan(self.root, &c.path) {
                FileText::Text(t) => Some(t),
                FileText::Missing => None,
                FileText::Refused(why) => return Err(ApplyError::Failed(why)),
            };
            if now != c.original {
                return Err(ApplyError::Stale(format!(
                    "{} changed on disk while the change was prepared",
                    c.path
                )));
            }
        }
        files::write_changes(self.root, changes).map_err(ApplyError::Failed)
    }

    fn progress(&mut self, message: &str) {
        eprintln!("agent-ls: {message}");
    }

    fn warn(&mut self, message: &str) {
        eprintln!("agent-ls: warning: {message}");
    }
}

/// Runs the goal and returns the process exit code.
pub fn run(opts: Options) -> u8 {
    let root = match opts.workspace.canonicalize() {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "agent-ls: cannot open the workspace {}: {e}",
                opts.workspace.display()
            );
            return exit::CONFIG;
        }
    };
    let loaded = config::load(&Inputs::from_process(Some(root.clone())));
    if !loaded.errors.is_empty() {
        for e in &loaded.errors {
            eprintln!("agent-ls: {e}");
        }
        return exit::CONFIG;
    }
    let mut cfg = loaded.config;
    if let Some(file) = &opts.replay {
        cfg.model.provider = Some("replay".into());
        cfg.model.replay_file = Some(file.clone());
        cfg.model.fallback.clear();
        cfg.roles = Default::default();
    }
    let mode = match (opts.mode, cfg.agent.approval) {
        (Mode::Ask, Approval::Auto) => Mode::Yes,
        (m, _) => m,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("agent-ls: cannot start the async runtime: {e}");
            return exit::FAILED;
        }
    };
    // What to go on from, for --resume: the run's id, goal and checkpoint.
    let resume = match &opts.resume {
        None => None,
        Some(id) => match resume_point(&root, id) {
            Ok(point) => Some(point),
            Err(why) => {
                eprintln!("agent-ls: {why}");
                return exit::FAILED;
            }
        },
    };
    let route = if resume.is_some() {
        agent::Route::Agent
    } else {
        agent::route(&opts.goal)
    };
    match route {
        agent::Route::Agent => {}
        agent::Route::Undo(_) | agent::Route::Redo => {
            eprintln!(
                "agent-ls: undo and redo act on the editor's buffers and the server's step history: \
                 use agent-ls.undo / agent-ls.redo (VS Code: Agent: Undo, Neovim: :AgentUndo)"
            );
            return exit::FAILED;
        }
        agent::Route::Status => {
            for r in crate::journal::list(&root).iter().take(10) {
                println!("{}  {:<11}  {}", r.run_id, r.status, r.goal);
            }
            return exit::DONE;
        }
        agent::Route::Command(argv) => {
            return runtime.block_on(run_command(&root, &cfg, argv, opts.json));
        }
    }
    runtime.block_on(async move {
        let cancel = CancellationToken::new();
        watch_signals(cancel.clone());
        let models = Models::new(&cfg, Some(&root));
        let goal = resume
            .as_ref()
            .map_or(opts.goal.clone(), |(_, g, _)| g.clone());
        let intent = agent::classify(&goal);
        let mut run = Run::new(
            &goal,
            intent,
            Budget {
                max_retries: cfg.agent.max_retries,
                max_iterations: cfg.agent.max_iterations,
            },
            String::new(),
        );
        run.evaluate = cfg.agent.evaluate;
        let mut shell = CliShell {
            root: &root,
            mode,
            proposed: None,
        };
        let on_token = |t: &str| {
            let mut err = std::io::stderr();
            let _ = err.write_all(t.as_bytes());
            let _ = err.flush();
        };
        let driver = Drive {
            models: &models,
            config: &cfg,
            root: &root,
            cancel: &cancel,
            on_token: Some(&on_token),
            journal: true,
        };
        let mut outcome = match resume {
            Some((id, _, Some(checkpoint))) => {
                run = checkpoint;
                driver.resume(&mut run, &mut shell, id).await
            }
            // Interrupted before its first checkpoint: it starts over under its own id.
            Some((id, _, None)) => driver.run(&mut run, &mut shell, id).await,
            None => driver.run(&mut run, &mut shell, drive::new_run_id()).await,
        };
        if let Some(diff) = shell.proposed.take() {
            outcome.status = "proposed".into();
            outcome.answer = diff;
        }
        report(&outcome, opts.json);
        code_for(&outcome)
    })
}

/// The id, goal and checkpoint of an interrupted run, or why it cannot be resumed.
fn resume_point(root: &Path, id: &str) -> Result<(String, String, Option<Run>), String> {
    if !root.join(crate::store::FILE).exists() {
        return Err(format!("no runs are recorded in {}", root.display()));
    }
    let (store, _) = crate::store::Store::open(root).map_err(|e| e.to_string())?;
    let (goal, checkpoint, status) = store
        .resume_point(id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no run {id} in {}", root.display()))?;
    if status != "running" {
        return Err(format!("run {id} already ended ({status})"));
    }
    let interrupted = store.interrupted_runs(None).map_err(|e| e.to_string())?;
    if !interrupted.iter().any(|r| r.run_id == id) {
        return Err(format!(
            "run {id} is still going in another agent-ls process"
        ));
    }
    let checkpoint = match checkpoint {
        Some(json) => Some(
            serde_json::from_str(&json)
                .map_err(|e| format!("the checkpoint of {id} cannot be read: {e}"))?,
        ),
        None => None,
    };
    Ok((id.to_string(), goal, checkpoint))
}

/// A goal that names a command ("run `make lint`"): run it like the tests (allowlist,
/// timeout, output cap) and report what it found. Exit 0 when it passed, 1 when not.
async fn run_command(root: &Path, cfg: &config::Config, argv: Vec<String>, json: bool) -> u8 {
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let mut test = cfg.test.clone();
    test.command = argv;
    test.nextest = false;
    match crate::tests_run::run(root, &test, &cancel).await {
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
                println!("{}", r.report.trim_end());
                println!("{}: {}", r.command.argv.join(" "), r.state());
            }
            match r.state() {
                "passed" => exit::DONE,
                "cancelled" => exit::INTERRUPTED,
                "timed_out" => exit::TIMEOUT,
                _ => exit::FAILED,
            }
        }
        Err(e) => {
            eprintln!("agent-ls: {e}");
            exit::CONFIG
        }
    }
}

fn report(o: &Outcome, json: bool) {
    if json {
        println!("{}", serde_json::to_string(o).unwrap_or_default());
    } else {
        println!("{}", o.answer.trim_end());
    }
    eprintln!(
        "agent-ls: {} after {} iteration(s), {} file(s) changed, tests {} passed / {} failed, {} tokens, {} ms",
        o.status,
        o.iterations,
        o.files_changed.len(),
        o.tests.passed,
        o.tests.failed,
        o.tokens,
        o.duration_ms
    );
}

pub fn code_for(o: &Outcome) -> u8 {
    match o.status.as_str() {
        "done" | "proposed" => exit::DONE,
        "cancelled" => exit::INTERRUPTED,
        _ => match o.failure_kind.as_deref() {
            Some("auth") => exit::AUTH,
            Some("config") => exit::CONFIG,
            Some("timeout") => exit::TIMEOUT,
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
