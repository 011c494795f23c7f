//! Run setup, shared by every surface: a run's id, a new run's settings under the
//! configuration's budgets (the only way a surface sets a run up: once made, a run changes
//! only through the events the driver steps), the named agent that runs it (whose prompt file
//! is read here), and where an interrupted run goes on from.

use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::config::Config;
use crate::store::{Store, StoreError};
use agent_ls_core::agent::{self, Budget, Run, RunStatus, Settings};

pub fn new_run_id() -> String {
    format!("run_{:08x}", fastrand::u32(..))
}

/// A new run of `goal` under the configuration's budgets, by the configuration's default
/// agent.
pub fn new_run(config: &Config, goal: &str) -> Run {
    Run::new(goal, run_settings(config, goal))
}

/// The settings of a new run of `goal`: the configuration's budgets, evaluation, review and
/// tester, and its default agent. A surface adjusts them (`ChosenAgent::apply`,
/// `reproduce_first`) before it makes the run with `Run::new`: the one way every surface
/// builds one.
pub fn run_settings(config: &Config, goal: &str) -> Settings {
    let mut settings = Settings::new(
        agent::classify(goal),
        Budget {
            max_retries: config.agent.max_retries,
            max_iterations: config.agent.max_iterations,
            max_tool_steps: config.agent.max_tool_steps,
            summarize_after: config.context.summarize_after,
            max_corrections: config.agent.max_corrections,
            first_prompt_bytes: config.context.first_prompt_bytes,
        },
    );
    settings.evaluation = config.agent.evaluate;
    settings.review = config.agent.review;
    settings.review_min_confidence = config.agent.review_min_confidence;
    settings.undo_worse = config.agent.undo_worse;
    settings.tester.max_attempts = config.tester.max_attempts;
    settings.tester.after_fix = config.tester.after_fix;
    if let Ok(chosen) = choose_agent(config, &config.agent.default_agent) {
        chosen.apply(&mut settings);
    }
    settings
}

/// Has the run made with `settings` reproduce its goal's bug with a test before any fix
/// (`agent-ls run --reproduce`, ACP's `/test`): the goal is a fix, whatever its words, and
/// the tester is called whatever the tests say (docs/tester.md).
pub fn reproduce_first(settings: &mut Settings) {
    settings.intent = Some(agent::Intent::Fix);
    settings.tester.reproduce = true;
    settings.tester.max_attempts = settings.tester.max_attempts.max(1);
}

/// What an ACP prompt `/test DESCRIPTION` asks: the description, to reproduce first; `None`
/// for any other prompt.
pub fn test_command(prompt: &str) -> Option<&str> {
    let rest = prompt.trim().strip_prefix("/test")?;
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim())
}

/// A named agent as a run uses it: its profile, and what it overrides of the configuration.
#[derive(Debug, Clone)]
pub struct ChosenAgent {
    pub profile: agent::AgentProfile,
    pub approval: Option<crate::config::Approval>,
    pub max_tool_steps: Option<u32>,
}

impl ChosenAgent {
    /// The agent runs the run made with `settings`.
    pub fn apply(&self, settings: &mut Settings) {
        settings.agent = self.profile.clone();
        if let Some(n) = self.max_tool_steps {
            settings.budget.max_tool_steps = n;
        }
    }
}

/// Why a named agent cannot run.
#[derive(Debug, Error)]
pub enum AgentError {
    #[error("agent `{name}`: its prompt {} cannot be read: {source}", path.display())]
    PromptUnreadable {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("agent `{0}` has no `prompt` file")]
    NoPrompt(String),
    /// The profile is wrong (a tool that does not exist), in the core's words.
    #[error(transparent)]
    Profile(#[from] agent::agents::UnknownTool),
    #[error("there is no agent `{name}`; the agents are {}", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
}

/// Finds an agent by name: a built-in one, or a custom one of `[agents]` with its prompt file
/// read now. An unknown name, or a prompt file that cannot be read, is an error for the user.
pub fn choose_agent(config: &Config, name: &str) -> Result<ChosenAgent, AgentError> {
    if let Some(custom) = config.agents.get(name) {
        let prompt = match &custom.prompt {
            Some(path) => {
                std::fs::read_to_string(path).map_err(|source| AgentError::PromptUnreadable {
                    name: name.into(),
                    path: path.clone(),
                    source,
                })?
            }
            None => return Err(AgentError::NoPrompt(name.into())),
        };
        return Ok(ChosenAgent {
            profile: agent::AgentProfile::custom(name, &custom.tools, prompt)
                .map_err(AgentError::Profile)?,
            approval: custom.approval,
            max_tool_steps: custom.max_tool_steps,
        });
    }
    match agent::AgentProfile::built_in(name) {
        Some(profile) => Ok(ChosenAgent {
            profile,
            approval: None,
            max_tool_steps: None,
        }),
        None => {
            let mut known: Vec<String> = agent::agents::BUILT_IN
                .iter()
                .map(|s| s.to_string())
                .collect();
            known.extend(config.agents.keys().cloned());
            Err(AgentError::Unknown {
                name: name.into(),
                known,
            })
        }
    }
}

/// Why a run cannot be resumed.
#[derive(Debug, Error)]
pub enum ResumeError {
    #[error("no runs are recorded in {}", .0.display())]
    NothingRecorded(PathBuf),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no run {0} in this workspace")]
    NoRun(String),
    #[error("run {run_id} already ended ({})", status.as_str())]
    Ended { run_id: String, status: RunStatus },
    #[error("run {0} is still going in another agent-ls process")]
    Elsewhere(String),
    #[error("the checkpoint of {run_id} cannot be read: {source}")]
    Checkpoint {
        run_id: String,
        source: serde_json::Error,
    },
}

/// The workspace's store, to resume a run from: none is created where no run was recorded.
pub fn recorded_store(root: &Path) -> Result<Store, ResumeError> {
    if !root.join(crate::store::FILE).exists() {
        return Err(ResumeError::NothingRecorded(root.to_path_buf()));
    }
    Ok(Store::open(root)?.0)
}

/// Where an interrupted run goes on from: its goal and last checkpoint (`None` when it was
/// interrupted before its first coder call, and starts over). `active` is the run this
/// process is running now, which is not interrupted. The one check every surface makes.
pub fn resume_point(
    store: &Store,
    run_id: &str,
    active: Option<&str>,
) -> Result<(String, Option<Run>), ResumeError> {
    let (goal, checkpoint, status) = store
        .resume_point(run_id)?
        .ok_or_else(|| ResumeError::NoRun(run_id.into()))?;
    if status != RunStatus::Running {
        return Err(ResumeError::Ended {
            run_id: run_id.into(),
            status,
        });
    }
    let interrupted = store.interrupted_runs(active)?;
    if !interrupted.iter().any(|r| r.run_id == run_id) {
        return Err(ResumeError::Elsewhere(run_id.into()));
    }
    let run =
        match checkpoint {
            Some(json) => Some(serde_json::from_str::<Run>(&json).map_err(|source| {
                ResumeError::Checkpoint {
                    run_id: run_id.into(),
                    source,
                }
            })?),
            None => None,
        };
    Ok((goal, run))
}
