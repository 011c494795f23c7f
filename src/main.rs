//! The `agent-ls` command line: `serve` (the default) speaks LSP on stdio; `run` drives the
//! agent on files on disk; `replay` and `runs` use the run journal; `config`, `doctor` and
//! `apply` inspect the configuration, the models, and an edit plan. This file only parses
//! the arguments and dispatches; each subcommand's body is in `cli/`.

use std::path::PathBuf;
use std::process::ExitCode;

use agent_ls::cli::setup::or_exit_1;
use agent_ls::cli::{
    apply, batch, cache, commit, config, doctor, git, headless, hooks, map, memory, review, runs,
    serve, stats, trust, undo,
};
use agent_ls_runtime::drive::ReviewTarget;
use agent_ls_runtime::trust::Decision;
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
    /// reached), 3 configuration or usage error (a missing goal, an unknown flag), 4
    /// authentication error, 5 timeout, 130 interrupted.
    Run {
        #[command(flatten)]
        args: headless::RunGoal,
    },
    /// Run many goals (a JSONL file of {id, repo, ref?, goal, agent?, config?}), each in its
    /// own git worktree, N at a time; results go to DIR/results.jsonl, and a rerun skips the
    /// tasks that have one (docs/scale.md).
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Batch {
        #[command(subcommand)]
        action: Option<batch::BatchCommand>,
        #[command(flatten)]
        args: batch::BatchArgs,
    },
    /// Put a tasks file's tasks (as `agent-ls batch` reads them) on a shared queue in
    /// PostgreSQL, for `agent-ls worker` processes on any machine to run (docs/scale.md).
    Enqueue {
        #[command(flatten)]
        args: batch::queue::EnqueueArgs,
    },
    /// Lease tasks from a shared queue in PostgreSQL and run each as `agent-ls batch` does,
    /// renewing the lease by heartbeat; results and journals go to the same database.
    Worker {
        #[command(flatten)]
        args: batch::queue::WorkerArgs,
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
    /// What earlier runs remembered (docs/memory.md): list, search, show, forget, export.
    Memory {
        #[command(subcommand)]
        action: memory::Action,
        /// The project (default: the current directory).
        #[arg(long, global = true)]
        workspace: Option<PathBuf>,
        /// The user's store (every workspace's records, `memory.scope = "user"`) instead of
        /// the workspace's; with `memory.url`, the user's own records from every workspace.
        #[arg(long, global = true)]
        user: bool,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// The response cache of model answers (docs/cache.md): stats, clear.
    Cache {
        #[command(subcommand)]
        action: cache::Action,
        /// The project (default: the current directory).
        #[arg(long, global = true)]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long, global = true)]
        json: bool,
    },
    /// Hooks (docs/hooks.md): list them, or trust the workspace's by their exact content.
    Hooks {
        #[command(flatten)]
        args: hooks::Args,
    },
    /// The approval mode and the permission rules in effect, in the order they are checked
    /// (docs/permissions.md).
    Permissions {
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the repo map a run's first prompt shows, ranked toward the files and names GOAL
    /// mentions, building it as a run does; its tag cache (.agent-ls/repomap.sqlite) is
    /// filled on the way, so a big repository's next run starts warm (docs/bigrepo.md).
    Map(map::Args),
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
    /// Print a run's change (default: the latest run's) as a unified diff from its git
    /// checkpoint to the files it changed as they are now; `git apply` takes it.
    Diff {
        /// The run's id (see `agent-ls runs`); default: the latest run with a checkpoint.
        run: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Roll a whole run back (default: the latest): every file it changed is restored from
    /// its git checkpoint and every file it created is deleted; nothing else is touched. A
    /// file changed since the run is a refusal, unless --force.
    Rollback {
        /// The run's id (see `agent-ls runs`); default: the latest run with a checkpoint.
        run: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Roll back even files changed since the run (those changes are lost).
        #[arg(long)]
        force: bool,
    },
    /// Commit a run's own files (default: the latest run's) as you, with a
    /// `Co-authored-by: agent-ls` trailer; your other changes, staged or not, stay as they
    /// are. The message is the model's (Conventional Commits) or a plain one.
    Commit {
        /// The run's id (see `agent-ls runs`); default: the latest run with a checkpoint.
        run: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// The commit message, in place of the one the model writes.
        #[arg(long, short)]
        message: Option<String>,
        /// Commit the run's files as they are now even if they changed since the run.
        #[arg(long)]
        force: bool,
    },
    /// Push the branch holding a run's commit to `git.remote` and open its pull request with
    /// gh (glab for GitLab) when on PATH; otherwise print the compare URL.
    Pr {
        /// The run's id (see `agent-ls runs`); default: the latest run with a checkpoint.
        run: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
    },
    /// Review a change with the reviewer role: the uncommitted work (default), the staged
    /// work, a branch against its base, or a run's change. Prints the findings; exit code 0
    /// when the verdict is "correct", 2 otherwise (docs/review.md).
    Review {
        /// Review the staged changes (the index against HEAD).
        #[arg(long, conflicts_with_all = ["base", "run"])]
        staged: bool,
        /// Review HEAD against its merge base with REV (a branch against its base).
        #[arg(long, value_name = "REV", conflicts_with = "run")]
        base: Option<String>,
        /// Review a recorded run's change against its git checkpoint.
        #[arg(long, value_name = "RUN")]
        run: Option<String>,
        /// What the change is for, as the reviewer is told.
        #[arg(long)]
        goal: Option<String>,
        /// The project (default: the current directory).
        #[arg(long)]
        workspace: Option<PathBuf>,
        /// Print the review as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drop the git checkpoints of all but the last `git.keep_checkpoints` runs.
    Gc {
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
    // Commands and test runs start as the same user as agent-ls, and its environment holds
    // the model's key: a process that may not be dumped keeps its `/proc/<pid>/environ` and
    // memory from other processes of that user (root's aside). Each child gets its own flag
    // back at exec, so nothing it starts is changed.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("agent-ls: cannot keep its environment from its commands: {e}");
    }
    match Cli::try_parse() {
        Ok(cli) => dispatch(cli.command.unwrap_or(Command::Serve)),
        Err(e) => usage(&e),
    }
}

/// Help and the version print and exit 0; a usage error (a missing goal, an unknown flag)
/// exits 3, the code of a configuration error, never clap's 2, which `run` and `review` give
/// to "partial" and "not correct".
fn usage(e: &clap::Error) -> ExitCode {
    let _ = e.print();
    ExitCode::from(if e.use_stderr() { 3 } else { 0 })
}

/// Runs one subcommand to its exit code: one line each, the work is in `cli::*`.
fn dispatch(command: Command) -> ExitCode {
    match command {
        Command::Serve => or_exit_1(serve::lsp()),
        Command::Config { workspace, json } => or_exit_1(config::run(workspace, json)),
        Command::Run { args } => headless::run_goal(args),
        Command::Batch {
            action: Some(action),
            ..
        } => batch::command(action),
        Command::Batch { args, .. } => batch::run(args),
        Command::Enqueue { args } => batch::queue::enqueue(args),
        Command::Worker { args } => batch::queue::worker(args),
        Command::Replay {
            journal,
            workspace,
            json,
            yes,
        } => headless::replay(journal, workspace, json, yes),
        Command::Runs { workspace, json } => or_exit_1(runs::run(workspace, json)),
        Command::Memory {
            action,
            workspace,
            user,
            json,
        } => or_exit_1(memory::run(action, workspace, user, json)),
        Command::Cache {
            action,
            workspace,
            json,
        } => or_exit_1(cache::run(action, workspace, json)),
        Command::Hooks { args } => or_exit_1(hooks::run(args)),
        Command::Permissions { workspace, json } => or_exit_1(hooks::permissions(workspace, json)),
        Command::Trust { dir } => or_exit_1(trust::run(dir, Decision::Trusted)),
        Command::Untrust { dir } => or_exit_1(trust::run(dir, Decision::Unknown)),
        Command::Doctor { workspace, json } => or_exit_1(doctor::run(workspace, json)),
        Command::Map(args) => or_exit_1(map::run(args)),
        Command::Stats {
            workspace,
            json,
            last,
        } => or_exit_1(stats::run(workspace, json, last)),
        Command::Apply {
            plan,
            workspace,
            write,
            json,
        } => or_exit_1(apply::run(&plan, workspace, write, json)),
        Command::Mcp { workspace } => or_exit_1(serve::mcp(workspace)),
        Command::Acp => or_exit_1(serve::acp()),
        Command::Undo { step, workspace } => or_exit_1(undo::run(step, workspace)),
        Command::Diff { run, workspace } => or_exit_1(git::diff(run, workspace)),
        Command::Rollback {
            run,
            workspace,
            force,
        } => or_exit_1(git::rollback(run, workspace, force)),
        Command::Gc { workspace } => or_exit_1(git::gc(workspace)),
        Command::Commit {
            run,
            workspace,
            message,
            force,
        } => or_exit_1(commit::commit(run, workspace, message, force)),
        Command::Pr { run, workspace } => or_exit_1(commit::pr(run, workspace)),
        Command::Review {
            staged,
            base,
            run,
            goal,
            workspace,
            json,
        } => or_exit_1(review::run(review::Options {
            target: review_target(staged, base, run),
            workspace,
            json,
            goal,
        })),
    }
}

/// What `agent-ls review` reviews, from its flags (clap lets at most one through).
fn review_target(staged: bool, base: Option<String>, run: Option<String>) -> ReviewTarget {
    match (staged, base, run) {
        (true, _, _) => ReviewTarget::Staged,
        (_, Some(rev), _) => ReviewTarget::Base(rev),
        (_, _, Some(id)) => ReviewTarget::Run(id),
        _ => ReviewTarget::Uncommitted,
    }
}
