//! The `agent-ls` command line: `serve` (the default) speaks LSP on stdio; `run` drives the
//! agent on files on disk; `replay` and `runs` use the run journal; `config`, `doctor` and
//! `apply` inspect the configuration, the models, and an edit plan.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_ls::{cli::run as headless, lsp as server};
use agent_ls_core::edit;
use agent_ls_runtime::config::{self, Inputs};
use agent_ls_runtime::{files, logging};
use anyhow::Context;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "agent-ls",
    version,
    about = "A language server that puts a coding agent in your editor"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Speak the Language Server Protocol on stdin/stdout (the default).
    Serve,
    /// Print the effective configuration and where each value came from.
    Config {
        /// The workspace whose `.agent-ls.toml` applies (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print JSON instead of annotated TOML.
        #[arg(long)]
        json: bool,
    },
    /// Run the agent on files on disk: "fix the failing tests", "add a --verbose flag",
    /// "explain src/lib.rs". Exit codes: 0 done, 1 failed, 2 partial (files changed, goal not
    /// reached), 3 configuration error, 4 authentication error, 5 timeout, 130 interrupted.
    Run {
        /// What to do.
        #[arg(required_unless_present = "resume")]
        goal: Option<String>,
        /// Go on with a run a crash or a kill interrupted (see `agent-ls stats` or the
        /// editor's status), from its last checkpoint, instead of starting one.
        #[arg(long, value_name = "RUN_ID", conflicts_with = "goal")]
        resume: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the runFinished object as JSON instead of the answer.
        #[arg(long)]
        json: bool,
        /// Apply changes without asking.
        #[arg(long, conflicts_with = "dry_run")]
        yes: bool,
        /// Show the proposed change and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// With --yes, also write protected files (.git/, .agent-ls.toml, .vscode/,
        /// executables, ...) and changes the static scan flagged; without it they are refused.
        #[arg(long, requires = "yes")]
        allow_protected: bool,
        /// The agent to run the goal: build (every tool; edits need approval), plan (reads,
        /// then writes a plan), review (reads, then comments in Markdown), or a custom agent
        /// of the configuration's [agents]. Default: agent.default_agent.
        #[arg(long, value_name = "NAME")]
        agent: Option<String>,
    },
    /// Re-run a recorded run (a journal in .agent-ls/runs/) against the current files, with
    /// every model answer taken from the journal.
    Replay {
        /// The journal file.
        journal: PathBuf,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the runFinished object as JSON instead of the answer.
        #[arg(long)]
        json: bool,
        /// Apply changes without asking.
        #[arg(long)]
        yes: bool,
    },
    /// List the recorded runs of a workspace, newest first.
    Runs {
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Figures per run and over all runs: tokens, model time, test time, iterations, pass
    /// rate, acceptance rate of proposed changes.
    Stats {
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// How many recent runs to list.
        #[arg(long, default_value_t = 10)]
        last: usize,
    },
    /// Check every configured model: key, server, model, and a one-token completion.
    /// Exits 1 when a check fails.
    Doctor {
        /// The workspace whose `.agent-ls.toml` applies (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Trust a folder: its .agent-ls.toml may then set the keys that run programs, name
    /// servers, send data or approve (test.command, model.base_url, agent.approval, ...).
    Trust {
        /// The folder (default: the current directory).
        dir: Option<PathBuf>,
    },
    /// Stop trusting a folder: its .agent-ls.toml's trust-only keys are ignored again.
    Untrust {
        /// The folder (default: the current directory).
        dir: Option<PathBuf>,
    },
    /// Serve agent-ls's tools over MCP on stdio (read_file, list_files, find_files, grep,
    /// get_diagnostics, run_tests, apply_edit), for other agents.
    Mcp {
        /// The workspace the tools work in (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Speak the Agent Client Protocol on stdio: Zed, JetBrains and Neovim plugins
    /// (CodeCompanion, avante) drive the agent loop through it.
    Acp,
    /// Undo an agent step on the files on disk (the latest applied one, or STEP): a step of
    /// `agent-ls mcp`'s apply_edit, or of a run. Lines changed since the step are a refusal.
    Undo {
        /// The step's id (see `agent-ls.status` in the editor); default: the latest.
        step: Option<u64>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Apply an edit plan (JSON, SEARCH/REPLACE blocks or a unified diff) to files on disk.
    /// Without --write it prints the diff and changes nothing. Exit codes: 0 every edit
    /// applied, 2 some did (nothing is written unless all did), 1 error.
    Apply {
        /// The plan file, or - for standard input.
        plan: PathBuf,
        /// The workspace the plan's paths are relative to (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Write the changed files (atomically) when every edit applies.
        #[arg(long)]
        write: bool,
        /// Print a JSON report of each edit's outcome and the rule that located it.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    // The sandbox's helper (see trust/sandbox.rs) runs before anything else: it confines
    // itself and runs a command, and is never started by a person.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some(agent_ls_runtime::trust::sandbox::SUBCOMMAND) {
        let code = agent_ls_runtime::trust::sandbox::helper_main(&args[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => serve(),
        Command::Config { workspace, json } => or_exit_1(print_config(workspace, json)),
        Command::Run {
            goal,
            resume,
            workspace,
            json,
            yes,
            dry_run,
            allow_protected,
            agent,
        } => {
            let workspace = match workspace_or_cwd(workspace) {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("agent-ls: {e:#}");
                    return ExitCode::from(headless::exit::CONFIG);
                }
            };
            // Logs go to stderr like the server's, at warn unless configured otherwise.
            let early = config::load(&Inputs::from_process(Some(workspace.clone())));
            logging::init(
                early.config.log.level.min_warn(),
                early.config.log.file.as_deref(),
            );
            let mode = if yes {
                headless::Mode::Yes
            } else if dry_run {
                headless::Mode::DryRun
            } else {
                headless::Mode::Ask
            };
            ExitCode::from(headless::run(headless::Options {
                goal: goal.unwrap_or_default(),
                workspace,
                json,
                mode,
                replay: None,
                resume,
                allow_protected,
                agent,
            }))
        }
        Command::Replay {
            journal,
            workspace,
            json,
            yes,
        } => {
            let workspace = match workspace_or_cwd(workspace) {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("agent-ls: {e:#}");
                    return ExitCode::from(headless::exit::CONFIG);
                }
            };
            let journal = journal.canonicalize().unwrap_or(journal);
            let Some(summary) = agent_ls_runtime::journal::summary(&journal) else {
                eprintln!(
                    "agent-ls: {} is not a run journal (no intent line)",
                    journal.display()
                );
                return ExitCode::from(headless::exit::CONFIG);
            };
            let early = config::load(&Inputs::from_process(Some(workspace.clone())));
            logging::init(
                early.config.log.level.min_warn(),
                early.config.log.file.as_deref(),
            );
            let mode = if yes {
                headless::Mode::Yes
            } else {
                headless::Mode::Ask
            };
            ExitCode::from(headless::run(headless::Options {
                goal: summary.goal,
                workspace,
                json,
                mode,
                replay: Some(journal),
                resume: None,
                allow_protected: false,
                agent: None,
            }))
        }
        Command::Runs { workspace, json } => or_exit_1(list_runs(workspace, json)),
        Command::Trust { dir } => {
            or_exit_1(set_trust(dir, agent_ls_runtime::trust::Decision::Trusted))
        }
        Command::Untrust { dir } => {
            or_exit_1(set_trust(dir, agent_ls_runtime::trust::Decision::Unknown))
        }
        Command::Doctor { workspace, json } => or_exit_1(doctor(workspace, json)),
        Command::Stats {
            workspace,
            json,
            last,
        } => or_exit_1(stats(workspace, json, last)),
        Command::Apply {
            plan,
            workspace,
            write,
            json,
        } => or_exit_1(apply_plan_file(&plan, workspace, write, json)),
        Command::Mcp { workspace } => or_exit_1(serve_mcp(workspace)),
        Command::Acp => or_exit_1(serve_acp()),
        Command::Undo { step, workspace } => or_exit_1(undo_step(step, workspace)),
    }
}

fn or_exit_1(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|err| {
        eprintln!("agent-ls: {err:#}");
        ExitCode::from(1)
    })
}

fn workspace_or_cwd(workspace: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    match workspace {
        Some(dir) => Ok(dir),
        None => std::env::current_dir().context("cannot read the current directory"),
    }
}

fn apply_plan_file(
    plan_path: &Path,
    workspace: Option<PathBuf>,
    write: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot open the workspace {}", root.display()))?;
    let answer = if plan_path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("cannot read the plan from stdin")?
    } else {
        std::fs::read_to_string(plan_path)
            .with_context(|| format!("cannot read the plan {}", plan_path.display()))?
    };
    let plan = edit::parse_plan(&answer)
        .with_context(|| format!("cannot parse the plan {}", plan_path.display()))?;
    let loaded = config::load(&Inputs::from_process(Some(root.clone())));
    let outcome = files::plan_on_disk(&plan, &root, &loaded.config.edit.limits());
    let all = outcome.all_applied();
    let some = outcome
        .reports
        .iter()
        .any(|r| !matches!(r.status, edit::EditStatus::Refused { .. }));
    let written = if write && all && !outcome.changes.is_empty() {
        files::write_changes(&root, &outcome.changes).map_err(anyhow::Error::msg)?;
        true
    } else {
        false
    };
    if json {
        let files: Vec<_> = outcome
            .changes
            .iter()
            .map(|c| serde_json::json!({"path": c.path, "created": c.creates(), "diff": edit::file_diff(c)}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "all_applied": all,
                "written": written,
                "edits": outcome.reports,
                "files": files,
            }))?
        );
    } else {
        print!("{}", outcome.unified_diff());
        eprint!("{}", outcome.refusal_report());
        if write && !written && !all {
            eprintln!("agent-ls: nothing was written because not every edit applied");
        }
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else if some {
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    })
}

fn set_trust(
    dir: Option<PathBuf>,
    decision: agent_ls_runtime::trust::Decision,
) -> anyhow::Result<ExitCode> {
    let dir = workspace_or_cwd(dir)?;
    let store = agent_ls_runtime::trust::TrustStore::for_user()?;
    let real = store.set(&dir, decision)?;
    if decision == agent_ls_runtime::trust::Decision::Trusted {
        println!(
            "trusted {}: its .agent-ls.toml may now set the keys that run programs, name servers, send data or approve",
            real.display()
        );
    } else {
        println!(
            "{} is no longer trusted: its .agent-ls.toml's trust-only keys are ignored",
            real.display()
        );
    }
    eprintln!("agent-ls: recorded in {}", store.path().display());
    Ok(ExitCode::SUCCESS)
}

/// Says which keys of the workspace file were left out, and how to trust the folder.
fn warn_untrusted(loaded: &config::Loaded) {
    if !loaded.untrusted.is_empty() {
        eprintln!(
            "agent-ls: {}",
            agent_ls_runtime::config::untrusted_message(&loaded.untrusted, loaded.trusted)
        );
    }
}

fn serve() -> ExitCode {
    // Logging is set up from the layers known before the client connects (user file and
    // environment); the level follows later layers once the session has them.
    let early = config::load(&Inputs::from_process(None));
    let log = logging::init(early.config.log.level, early.config.log.file.as_deref());
    for err in &early.errors {
        tracing::error!("{err}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            eprintln!("agent-ls: cannot start the async runtime: {err}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(server::serve_stdio(log));
    // Background tasks may still hold the runtime; the protocol is finished, so leave now.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    ExitCode::from(code as u8)
}

/// `agent-ls mcp`: stdout is the protocol's, so logs go to stderr only.
fn serve_mcp(workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?
        .canonicalize()
        .context("cannot open the workspace")?;
    let loaded = config::load(&Inputs::from_process(Some(root.clone())));
    logging::init(
        loaded.config.log.level.min_warn(),
        loaded.config.log.file.as_deref(),
    );
    for err in &loaded.errors {
        tracing::error!("{err}");
    }
    if !loaded.untrusted.is_empty() {
        tracing::warn!(
            "{}",
            config::untrusted_message(&loaded.untrusted, loaded.trusted)
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(agent_ls::mcp::serve(&root, loaded.config))?;
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}

/// `agent-ls acp`: stdout is the protocol's, so logs go to stderr only.
fn serve_acp() -> anyhow::Result<ExitCode> {
    let early = config::load(&Inputs::from_process(None));
    logging::init(
        early.config.log.level.min_warn(),
        early.config.log.file.as_deref(),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(agent_ls::acp::serve())?;
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    Ok(ExitCode::SUCCESS)
}

fn undo_step(step: Option<u64>, workspace: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?
        .canonicalize()
        .context("cannot open the workspace")?;
    let loaded = config::load(&Inputs::from_process(Some(root.clone())));
    match agent_ls_runtime::steps::undo(&root, step, &loaded.config.edit.limits()) {
        Ok((id, files)) => {
            println!("undid step {id}: {}", files.join(", "));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("agent-ls: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

fn list_runs(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let runs = agent_ls_runtime::journal::list(&root);
    if json {
        println!("{}", serde_json::to_string_pretty(&runs)?);
    } else if runs.is_empty() {
        println!(
            "no recorded runs in {}",
            root.join(agent_ls_runtime::journal::DIR).display()
        );
    } else {
        for r in &runs {
            println!("{}  {:<11}  {}  ({})", r.run_id, r.status, r.goal, r.path);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(workspace: Option<PathBuf>, json: bool, last: usize) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    if !root.join(agent_ls_runtime::store::FILE).exists() {
        if json {
            println!("{}", serde_json::json!({"total": null, "runs": []}));
        } else {
            println!(
                "no runs recorded in {}",
                root.join(agent_ls_runtime::store::FILE).display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let (store, notice) = agent_ls_runtime::store::Store::open(&root)?;
    if let Some(n) = notice {
        eprintln!("agent-ls: {n}");
    }
    let mut stats = store.stats(last)?;
    // A run still marked running whose process is gone was interrupted: say so, since
    // `agent-ls run --resume` takes it up.
    let interrupted: Vec<String> = store
        .interrupted_runs(None)?
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    for r in &mut stats.runs {
        if interrupted.contains(&r.run_id) {
            r.status = agent_ls_core::agent::RunStatus::Interrupted;
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(ExitCode::SUCCESS);
    }
    let t = &stats.total;
    let pct = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.0}%", r * 100.0));
    let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    println!(
        "{} runs: {} done, {} failed, {} cancelled; pass rate {}",
        t.runs,
        t.done,
        t.failed,
        t.cancelled,
        pct(t.pass_rate)
    );
    println!(
        "{} iterations, {} tokens, model time {}, test time {}",
        t.iterations,
        t.tokens,
        secs(t.model_ms),
        secs(t.test_ms)
    );
    println!(
        "{} of {} proposed changes accepted ({})",
        t.accepted,
        t.proposals,
        pct(t.acceptance_rate)
    );
    if !stats.runs.is_empty() {
        println!();
        println!(
            "{:<12}  {:<9}  {:>4}  {:>7}  {:>8}  {:>8}  {:>7}  goal",
            "run", "status", "iter", "tokens", "model", "tests", "passed"
        );
    }
    for r in &stats.runs {
        let tests = match (r.tests_passed, r.tests_failed) {
            (Some(p), Some(f)) => format!("{p}/{}", p + f),
            _ => "-".into(),
        };
        let goal: String = r.goal.chars().take(60).collect();
        println!(
            "{:<12}  {:<9}  {:>4}  {:>7}  {:>8}  {:>8}  {:>7}  {goal}",
            r.run_id,
            r.status.as_str(),
            r.iterations,
            r.tokens,
            secs(r.model_ms),
            secs(r.test_ms),
            tests
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn doctor(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = config::load(&Inputs::from_process(Some(root.clone())));
    for err in &loaded.errors {
        eprintln!("agent-ls: {err}");
    }
    warn_untrusted(&loaded);
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let models = agent_ls_runtime::model::Models::new(&loaded.config, Some(&root));
    let mut checks = runtime.block_on(agent_ls_runtime::model::doctor::run(&models));
    let probe =
        agent_ls_runtime::trust::sandbox::Sandbox::from_config(&loaded.config.sandbox).probe(&root);
    checks.push(agent_ls_runtime::model::doctor::Check {
        target: "sandbox".into(),
        check: "confines a command",
        ok: probe.is_ok(),
        detail: probe.unwrap_or_else(|why| why.to_string()),
    });
    if json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for c in &checks {
            println!(
                "{} {} {}: {}",
                if c.ok { "ok  " } else { "FAIL" },
                c.target,
                c.check,
                c.detail
            );
        }
    }
    let failed = checks.iter().any(|c| !c.ok) || !loaded.errors.is_empty();
    if !json {
        println!(
            "{}",
            if failed {
                "some checks failed"
            } else {
                "every check passed"
            }
        );
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_config(workspace: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let root = workspace_or_cwd(workspace)?;
    let loaded = config::load(&Inputs::from_process(Some(root)));
    warn_untrusted(&loaded);
    let entries = loaded.entries();
    if json {
        let items: Vec<_> = entries
            .iter()
            .map(|(key, value, source)| {
                serde_json::json!({"key": key, "value": value, "source": source.to_string()})
            })
            .collect();
        let errors: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"entries": items, "errors": errors}))?
        );
    } else {
        for (key, value, source) in &entries {
            let shown = if value.is_null() {
                "(unset)".to_string()
            } else {
                value.to_string()
            };
            println!("{key} = {shown}    # {source}");
        }
        for err in &loaded.errors {
            eprintln!("agent-ls: {err}");
        }
    }
    Ok(if loaded.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    })
}
