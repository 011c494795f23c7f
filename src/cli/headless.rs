//! `agent-ls run` and `agent-ls replay` as the command line gives them: the workspace, logs on
//! stderr, and the options `run.rs` drives the agent with.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use super::run::{self, Mode, Options, exit};
use super::setup::{load_config, log_to_stderr, workspace_or_cwd};

// `agent-ls run`'s arguments (a plain comment: clap would take a doc comment here for the
// subcommand's description, which main.rs gives).
#[derive(clap::Args)]
pub struct RunGoal {
    /// What to do (with --skill: what to do it for, if anything).
    #[arg(required_unless_present_any = ["resume", "skill"])]
    pub goal: Option<String>,
    /// Go on with a run a crash or a kill interrupted (see `agent-ls stats` or the
    /// editor's status), from its last checkpoint, instead of starting one.
    #[arg(long, value_name = "RUN_ID", conflicts_with = "goal")]
    pub resume: Option<String>,
    /// Rewind first (docs/rewind.md): take the run of step STEP back to that step, code and
    /// conversation together (its later steps are undone as `agent-ls undo` undoes them; a
    /// file edited since at their lines is a refusal), then run GOAL ("instead, ...") as a
    /// new run that follows the conversation up to there.
    #[arg(long, value_name = "STEP", requires = "goal", conflicts_with_all = ["resume", "isolated", "skill", "dry_run"])]
    pub from: Option<u64>,
    /// The project (default: the current directory).
    #[arg(long)]
    pub workspace: Option<PathBuf>,
    /// Print the runFinished object as JSON instead of the answer.
    #[arg(long)]
    pub json: bool,
    /// Apply changes without asking.
    #[arg(long, conflicts_with = "dry_run")]
    pub yes: bool,
    /// Show the proposed change and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With --yes, also write protected files (.git/, .agent-ls.toml, .vscode/,
    /// executables, ...) and changes the static scan flagged; without it they are refused.
    #[arg(long, requires = "yes")]
    pub allow_protected: bool,
    /// The agent to run the goal: build (every tool; edits need approval), plan (reads,
    /// then writes a plan), review (reads, then comments in Markdown), or a custom agent
    /// of the configuration's [agents]. Default: agent.default_agent.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Work in a new git worktree under .agent-ls/worktrees/ on a new branch agent/<slug>,
    /// so this checkout never changes (git.isolation = "worktree" for this run).
    #[arg(long, conflicts_with = "resume")]
    pub isolated: bool,
    /// Reproduce first: the tester writes a test that fails on the current code for the
    /// bug the goal describes (kept only if it fails for the reason it names), proposed as
    /// its own change; then the fix (docs/tester.md).
    #[arg(long, conflicts_with = "resume")]
    pub reproduce: bool,
    /// Run a skill (`.agents/skills/NAME/SKILL.md`, or the user's): the model opens it with
    /// read_skill and does what it says, for the goal when one is given (docs/skills.md).
    #[arg(long, value_name = "NAME", conflicts_with = "resume")]
    pub skill: Option<String>,
    /// Stop the run once its model calls have cost this many US dollars, as [prices] counts
    /// them; its work so far is kept (agent.max_cost_usd for this run).
    #[arg(long, value_name = "USD", value_parser = positive_dollars)]
    pub max_cost: Option<f64>,
}

/// A `--max-cost` that is no amount.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not an amount of dollars above zero")]
pub struct NotDollars(String);

/// A cap in dollars: a number above zero.
pub fn positive_dollars(text: &str) -> Result<f64, NotDollars> {
    match text.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(NotDollars(text.to_string())),
    }
}

/// `agent-ls run`: a goal (or an interrupted run) on the files on disk.
pub fn run_goal(args: RunGoal) -> ExitCode {
    let workspace = match workspace(args.workspace) {
        Ok(w) => w,
        Err(code) => return code,
    };
    log_for(&workspace);
    let mode = if args.yes {
        Mode::Yes
    } else if args.dry_run {
        Mode::DryRun
    } else {
        Mode::Ask
    };
    let goal = match &args.skill {
        Some(name) => match skill_goal(&workspace, name, args.goal.as_deref()) {
            Ok(goal) => goal,
            Err(code) => return code,
        },
        None => args.goal.unwrap_or_default(),
    };
    ExitCode::from(run::run(Options {
        goal,
        workspace,
        json: args.json,
        mode,
        replay: None,
        resume: args.resume,
        from: args.from,
        allow_protected: args.allow_protected,
        agent: args.agent,
        isolated: args.isolated,
        reproduce: args.reproduce,
        max_cost: args.max_cost,
    }))
}

/// The goal of a run of the skill `name`; an unknown skill is a configuration error that
/// names the skills there are.
fn skill_goal(workspace: &Path, name: &str, request: Option<&str>) -> Result<String, ExitCode> {
    use agent_ls_runtime::skills;
    if skills::find(workspace, name).is_some() {
        return Ok(agent_ls_core::skills::goal(name, request.unwrap_or("")));
    }
    let found = skills::discover(workspace);
    let names: Vec<&str> = found.skills.iter().map(|s| s.front.name.as_str()).collect();
    eprintln!(
        "agent-ls: there is no skill `{name}`; the skills are: {}",
        if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        }
    );
    for p in &found.problems {
        eprintln!("agent-ls: {p}");
    }
    Err(ExitCode::from(exit::CONFIG))
}

/// `agent-ls replay`: a recorded run again, every model answer taken from its journal.
pub fn replay(journal: PathBuf, workspace: Option<PathBuf>, json: bool, yes: bool) -> ExitCode {
    let workspace = match self::workspace(workspace) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let journal = journal.canonicalize().unwrap_or(journal);
    let Some(summary) = agent_ls_runtime::journal::summary(&journal) else {
        eprintln!(
            "agent-ls: {} is not a run journal (no intent line)",
            journal.display()
        );
        return ExitCode::from(exit::CONFIG);
    };
    log_for(&workspace);
    ExitCode::from(run::run(Options {
        goal: summary.goal,
        workspace,
        json,
        mode: if yes { Mode::Yes } else { Mode::Ask },
        replay: Some(journal),
        resume: None,
        from: None,
        allow_protected: false,
        agent: None,
        isolated: false,
        reproduce: false,
        max_cost: None,
    }))
}

/// The workspace; one that cannot be found is a configuration error.
fn workspace(workspace: Option<PathBuf>) -> Result<PathBuf, ExitCode> {
    workspace_or_cwd(workspace).map_err(|e| {
        eprintln!("agent-ls: {e:#}");
        ExitCode::from(exit::CONFIG)
    })
}

/// Logs go to stderr like the server's, at warn unless the workspace configures otherwise.
fn log_for(workspace: &Path) {
    log_to_stderr(&load_config(Some(workspace.to_path_buf())));
}
