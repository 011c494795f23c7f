//! Run setup, shared by every surface: a run's id, a new run under the configuration's
//! budgets, the named agent that runs it (whose prompt file is read here), and where an
//! interrupted run goes on from.

use crate::config::Config;
use crate::store::Store;
use agent_ls_core::agent::{self, Budget, Run, RunStatus};

pub fn new_run_id() -> String {
    format!("run_{:08x}", fastrand::u32(..))
}

/// A new run of `goal` under the configuration's budgets, by the configuration's default
/// agent: the one way every surface builds one.
pub fn new_run(config: &Config, goal: &str) -> Run {
    let mut run = Run::new(
        goal,
        agent::classify(goal),
        Budget {
            max_retries: config.agent.max_retries,
            max_iterations: config.agent.max_iterations,
            max_tool_steps: config.agent.max_tool_steps,
            summarize_after: config.context.summarize_after,
            max_corrections: config.agent.max_corrections,
        },
        String::new(),
    );
    run.evaluation = config.agent.evaluate;
    if let Ok(chosen) = choose_agent(config, &config.agent.default_agent) {
        chosen.apply(&mut run);
    }
    run
}

/// A named agent as a run uses it: its profile, and what it overrides of the configuration.
#[derive(Debug, Clone)]
pub struct ChosenAgent {
    pub profile: agent::AgentProfile,
    pub approval: Option<crate::config::Approval>,
    pub max_tool_steps: Option<u32>,
}

impl ChosenAgent {
    pub fn apply(&self, run: &mut Run) {
        run.agent = self.profile.clone();
        if let Some(n) = self.max_tool_steps {
            run.budget.max_tool_steps = n;
        }
    }
}

/// Finds an agent by name: a built-in one, or a custom one of `[agents]` with its prompt file
/// read now. An unknown name, or a prompt file that cannot be read, is an error for the user.
pub fn choose_agent(config: &Config, name: &str) -> Result<ChosenAgent, String> {
    if let Some(custom) = config.agents.get(name) {
        let prompt = match &custom.prompt {
            Some(path) => std::fs::read_to_string(path).map_err(|e| {
                format!(
                    "agent `{name}`: its prompt {} cannot be read: {e}",
                    path.display()
                )
            })?,
            None => return Err(format!("agent `{name}` has no `prompt` file")),
        };
        return Ok(ChosenAgent {
            profile: agent::AgentProfile::custom(name, &custom.tools, prompt)?,
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
            let mut names: Vec<String> = agent::agents::BUILT_IN
                .iter()
                .map(|s| s.to_string())
                .collect();
            names.extend(config.agents.keys().cloned());
            Err(format!(
                "there is no agent `{name}`; the agents are {}",
                names.join(", ")
            ))
        }
    }
}

/// Where an interrupted run goes on from: its goal and last checkpoint (`None` when it was
/// interrupted before its first coder call, and starts over). `active` is the run this
/// process is running now, which is not interrupted. The one check every surface makes.
pub fn resume_point(
    store: &Store,
    run_id: &str,
    active: Option<&str>,
) -> Result<(String, Option<Run>), String> {
    let (goal, checkpoint, status) = store
        .resume_point(run_id)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no run {run_id} in this workspace"))?;
    if status != RunStatus::Running {
        return Err(format!("run {run_id} already ended ({})", status.as_str()));
    }
    let interrupted = store.interrupted_runs(active).map_err(|e| e.to_string())?;
    if !interrupted.iter().any(|r| r.run_id == run_id) {
        return Err(format!(
            "run {run_id} is still going in another agent-ls process"
        ));
    }
    let run = match checkpoint {
        Some(json) => Some(
            serde_json::from_str::<Run>(&json)
                .map_err(|e| format!("the checkpoint of {run_id} cannot be read: {e}"))?,
        ),
        None => None,
    };
    Ok((goal, run))
}
