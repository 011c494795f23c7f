//! A run's set-up and drive, the same for every surface: the settings under the
//! configuration's budgets, then `--reproduce` (or ACP's `/test`), then the chosen agent, in
//! that one order; the approval policy from the chosen agent's or the configuration's mode and
//! what the request says; the `Drive` over the front end's shell.

use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, Inputs, Isolation, Loaded, WorkspaceTrust};
use crate::drive::{
    self, AgentError, ChosenAgent, Drive, OnEvent, Outcome, Policy, ReviewTarget, Shell,
};
use crate::git::isolate::{self, IsolateError, Isolated};
use crate::model::{Models, OnToken};
use crate::store::StoreThread;
use crate::trust::{Decision, TrustStore};
use agent_ls_core::agent::{self, Event, Input, Run, RunStatus};
use agent_ls_core::conversation::Earlier;

/// How a run begins.
#[derive(Debug, Clone)]
pub enum Begin {
    /// A new run of the goal.
    New,
    /// An interrupted run goes on from its checkpoint (`None`: it had none and starts over
    /// under its own id).
    Resume(Option<Box<Run>>),
    /// A review of a diff alone (`agent-ls review`, `agent-ls.review`).
    Review(ReviewTarget),
    /// A new run that follows an earlier run's conversation up to the step it was rewound
    /// to (`rewind::plan`): the files are already back there.
    Rewound(Box<Earlier>),
}

/// What a front end asks for.
#[derive(Debug, Clone)]
pub struct RunRequest {
    pub goal: String,
    /// The agent to run it (`--agent`, a code action's agent); the configuration's default
    /// when `None`.
    pub agent: Option<String>,
    /// Have the tester reproduce the goal's bug with a test before any fix.
    pub reproduce: bool,
    pub begin: Begin,
    /// Show the change and write nothing.
    pub dry_run: bool,
    /// Protected files and flagged changes were allowed beforehand (`--allow-protected`).
    pub allow_protected: bool,
    /// Apply without asking (`--yes`): what needs a question is refused instead.
    pub yes: bool,
    /// Work in a new worktree whatever `git.isolation` says (`--isolated`).
    pub worktree: bool,
}

impl RunRequest {
    /// A new run of `goal`, by the default agent, asking as the configuration says.
    pub fn new(goal: impl Into<String>) -> RunRequest {
        RunRequest {
            goal: goal.into(),
            agent: None,
            reproduce: false,
            begin: Begin::New,
            dry_run: false,
            allow_protected: false,
            yes: false,
            worktree: false,
        }
    }
}

/// A request made ready: the configuration as the run sees it (the chosen agent's approval
/// over the configuration's), the run, and its policy.
#[derive(Debug)]
pub struct Prepared {
    pub config: Config,
    pub run: Run,
    pub policy: Policy,
    pub begin: Begin,
    /// Where the run works (`isolation`): in the checkout, on a new branch, or in a worktree.
    pub isolation: Isolation,
}

/// Sets the run up: an agent that cannot run is the user's error, before anything starts.
pub fn prepare(config: &Config, request: RunRequest) -> Result<Prepared, AgentError> {
    let mut config = config.clone();
    // The agent named in the request, else the configuration's default one: either brings
    // its approval mode with it.
    let chosen: Option<ChosenAgent> = match &request.agent {
        Some(name) => Some(drive::choose_agent(&config, name)?),
        None => drive::choose_agent(&config, &config.agent.default_agent).ok(),
    };
    let mut settings = drive::run_settings(&config, &request.goal);
    if request.reproduce {
        drive::reproduce_first(&mut settings);
    }
    if let Some(c) = &chosen {
        c.apply(&mut settings);
        if let Some(a) = c.approval {
            config.agent.approval = a;
        }
    }
    // `--yes` is approval = "auto" for this run.
    let mut policy = Policy::new(config.agent.approval);
    if request.yes {
        policy.approval = crate::config::Approval::Auto;
    }
    policy.dry_run = request.dry_run;
    policy.allow_protected = request.allow_protected;
    policy.yes = request.yes;
    let run = Run::new(&request.goal, settings);
    let isolation = isolation(&config, &request);
    Ok(Prepared {
        config,
        run,
        policy,
        begin: request.begin,
        isolation,
    })
}

/// Where a run of `request` works, one rule for every surface: a resumed or rewound run goes
/// on where its files are, a dry run and a review write nothing, so they stay in the
/// checkout; `--isolated` asks for a worktree; else `git.isolation`.
pub fn isolation(config: &Config, request: &RunRequest) -> Isolation {
    match request.begin {
        Begin::Resume(_) | Begin::Review(_) | Begin::Rewound(_) => Isolation::None,
        Begin::New if request.dry_run => Isolation::None,
        Begin::New if request.worktree => Isolation::Worktree,
        Begin::New => config.git.isolation,
    }
}

/// Starts the run where `prepared` says (blocking: git): `None` in the checkout as it is,
/// else the new branch or worktree (or the worktree the workspace already is) it works in.
pub fn isolate(root: &Path, prepared: &Prepared) -> Result<Option<Isolated>, IsolateError> {
    isolate::start(root, prepared.isolation, prepared.run.goal())
}

/// The configuration that applies in `root` (the user's alone without one), as every surface
/// loads it: a worktree agent-ls made for an isolated run is as trusted as the workspace it
/// was made in.
pub fn configuration(root: Option<PathBuf>) -> Loaded {
    let mut inputs = Inputs::from_process(root);
    if let Some(workspace) = inputs.workspace_root.as_deref().and_then(isolate::made_in)
        && TrustStore::for_user().is_ok_and(|s| s.decision(&workspace) == Decision::Trusted)
    {
        inputs.workspace_trust = WorkspaceTrust::Trusted;
    }
    config::load(&inputs)
}

/// Where a run works and where it reports.
pub struct Env<'a> {
    /// Where the run works (an isolated run's worktree).
    pub root: &'a Path,
    /// The workspace the configuration was loaded in: its relative paths (a replay file) are
    /// from there, also for a run in a worktree.
    pub home: &'a Path,
    pub cancel: &'a CancellationToken,
    pub run_id: String,
    /// Record the run: its journal and its figures in the store.
    pub store: Option<&'a StoreThread>,
    /// The run's events as they happen (the editor's run view, ACP's session updates).
    pub events: Option<OnEvent<'a>>,
    /// Streamed model text (the terminal's stderr for `agent-ls run`).
    pub on_token: Option<OnToken<'a>>,
}

/// Drives the prepared run to its outcome through `shell`; the run as it ended comes back
/// with it (its original texts serve a rollback the user asks for at the end).
pub async fn drive(p: Prepared, env: Env<'_>, shell: &mut impl Shell) -> (Run, Outcome) {
    let Prepared {
        config,
        mut run,
        policy,
        begin,
        ..
    } = p;
    let models = Models::new(&config, Some(env.home));
    let driver = Drive {
        models: &models,
        config: &config,
        root: env.root,
        cancel: env.cancel,
        on_token: env.on_token,
        record: env.store,
        events: env.events,
        policy,
    };
    let id = env.run_id;
    let outcome = match begin {
        Begin::New | Begin::Resume(None) => driver.run(&mut run, shell, id).await,
        Begin::Rewound(earlier) => {
            let effects = agent::step(&mut run, Event::Input(Input::Earlier(earlier)));
            debug_assert!(effects.is_empty(), "an input produced effects: {effects:?}");
            driver.run(&mut run, shell, id).await
        }
        Begin::Resume(Some(checkpoint)) => {
            run = *checkpoint;
            driver.resume(&mut run, shell, id).await
        }
        Begin::Review(target) => {
            let root = env.root.to_path_buf();
            let diff =
                tokio::task::spawn_blocking(move || drive::review_diff(&root, &target)).await;
            match diff {
                Ok(Ok(change)) => driver.review(&mut run, shell, id, change).await,
                Ok(Err(e)) => not_started(id, format!("nothing reviewed: {e}")),
                Err(e) => not_started(id, format!("nothing reviewed: {e}")),
            }
        }
    };
    (run, outcome)
}

/// The outcome of a run that ended before its loop began.
pub fn not_started(run_id: String, why: String) -> Outcome {
    Outcome {
        run_id,
        status: RunStatus::Failed,
        answer: why,
        iterations: 0,
        files_changed: Vec::new(),
        tests: Default::default(),
        tokens: 0,
        duration_ms: 0,
        cost_usd: None,
        checkpoint: None,
        commit: None,
        branch: None,
        worktree: None,
        failure_kind: None,
        review: None,
        tester: None,
        decision: None,
        edit_errors: Vec::new(),
        suspects: Vec::new(),
        ignored_config: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Approval;
    use agent_ls_core::agent;

    fn config_with_agent() -> Config {
        let mut config = Config::default();
        config.agent.approval = Approval::Confirm;
        config
    }

    #[test]
    fn reproduce_then_the_chosen_agent_in_one_order() {
        let mut request = RunRequest::new("make add add");
        request.reproduce = true;
        request.agent = Some("plan".into());
        let p = prepare(&config_with_agent(), request).expect("a built-in agent");
        assert_eq!(p.run.settings().agent.name, "plan");
        assert!(p.run.settings().tester.reproduce);
        assert_eq!(p.run.settings().intent, Some(agent::Intent::Fix));
    }

    #[test]
    fn yes_is_auto_and_an_unknown_agent_is_an_error() {
        let mut request = RunRequest::new("fix it");
        request.yes = true;
        let p = prepare(&config_with_agent(), request).expect("prepared");
        assert_eq!(p.policy.approval, Approval::Auto);
        assert!(p.policy.yes);
        let mut request = RunRequest::new("fix it");
        request.agent = Some("nobody".into());
        assert!(matches!(
            prepare(&config_with_agent(), request),
            Err(AgentError::Unknown { .. })
        ));
    }

    #[test]
    fn the_default_agent_brings_its_approval_too() {
        let mut config = config_with_agent();
        let dir = tempfile::tempdir().expect("a folder");
        let prompt = dir.path().join("fixer.md");
        std::fs::write(&prompt, "You fix bugs.").expect("the prompt");
        let fixer = crate::config::CustomAgent {
            prompt: Some(prompt),
            approval: Some(Approval::Auto),
            ..Default::default()
        };
        config.agents.insert("fixer".into(), fixer);
        config.agent.default_agent = "fixer".into();
        let p = prepare(&config, RunRequest::new("fix it")).expect("prepared");
        assert_eq!(p.run.settings().agent.name, "fixer");
        assert_eq!(p.policy.approval, Approval::Auto);
        // Named in the request, another agent's mode is the run's.
        let mut request = RunRequest::new("fix it");
        request.agent = Some("build".into());
        let p = prepare(&config, request).expect("prepared");
        assert_eq!(p.policy.approval, Approval::Confirm);
    }

    #[test]
    fn where_a_run_works_is_one_rule() {
        let mut config = config_with_agent();
        config.git.isolation = Isolation::Branch;
        let new = RunRequest::new("fix it");
        assert_eq!(isolation(&config, &new), Isolation::Branch);
        let worktree = RunRequest {
            worktree: true,
            ..new.clone()
        };
        assert_eq!(isolation(&config, &worktree), Isolation::Worktree);
        // A dry run writes nothing, and a resumed run goes on where it was.
        let dry = RunRequest {
            dry_run: true,
            ..worktree.clone()
        };
        assert_eq!(isolation(&config, &dry), Isolation::None);
        let resumed = RunRequest {
            begin: Begin::Resume(None),
            ..worktree
        };
        assert_eq!(isolation(&config, &resumed), Isolation::None);
    }
}
