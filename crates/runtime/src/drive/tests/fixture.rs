//! A workspace for driving the loop in-process: a tempdir with a small Python project, a
//! replay script of the models' answers beside it (docs/replay.md), a configuration that
//! answers every model call from that script, and the run's journal and live events read
//! back for the tests.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use super::super::{Drive, Outcome, new_run};
use super::shell::TestShell;
use crate::config::Config;
use crate::model::{Models, Role};
use crate::store::StoreThread;
use agent_ls_core::events::{LiveEvent, RunEvent};

/// The project's code, with its bug: `add` subtracts.
pub(super) const CALC: &str =
    "def add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n";
const TEST_CALC: &str = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n";

/// The coder's answers: the right fix, a wrong one, and the fix of the wrong one.
pub(super) const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";
pub(super) const WRONG: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a * b\n>>>>>>> REPLACE\n";
pub(super) const RIGHT: &str = "calc.py\n<<<<<<< SEARCH\ndef add(a, b):\n    return a * b\n=======\ndef add(a, b):\n    return a + b\n>>>>>>> REPLACE\n";
pub(super) const REFLECTION: &str = r#"{"task_id": "T1", "passed": false, "report": "add multiplies: add(2, 3) gives 6", "next_step": "return a + b"}"#;

pub(super) const GOAL: &str = "fix the failing test in calc.py";

pub(super) struct Workspace {
    /// Holds the workspace (`ws/`) and, outside it, the replay script.
    _dir: TempDir,
    pub(super) root: PathBuf,
    script: PathBuf,
    /// The run's cancel token, which a test's shell may fire.
    pub(super) cancel: CancellationToken,
}

impl Workspace {
    /// The project, and the models' answers in the order each role is to give them.
    pub(super) fn new(answers: &[(Role, &str)]) -> Workspace {
        let dir = tempfile::tempdir().expect("a tempdir");
        let root = dir.path().join("ws");
        std::fs::create_dir(&root).expect("the workspace folder");
        std::fs::write(root.join("calc.py"), CALC).expect("calc.py");
        std::fs::write(root.join("test_calc.py"), TEST_CALC).expect("test_calc.py");
        let script = dir.path().join("replay.jsonl");
        let lines: String = answers
            .iter()
            .map(|(role, content)| format!("{}\n", json!({"role": role, "content": content})))
            .collect();
        std::fs::write(&script, lines).expect("the replay script");
        Workspace {
            _dir: dir,
            root,
            script,
            cancel: CancellationToken::new(),
        }
    }

    /// A test shell on this workspace's files, with nothing scripted yet.
    pub(super) fn shell(&self) -> TestShell {
        TestShell::new(&self.root)
    }

    /// Drives `GOAL` under `config()` (the fix loop) to its outcome.
    pub(super) async fn fix(&self, shell: &mut TestShell) -> Outcome {
        self.drive(&self.config(), GOAL, shell).await.0
    }

    /// Every model answers from the script; the run is the fix loop alone (no reviewer,
    /// no evaluator, no git checkpoint, no response cache), memory as configured by default.
    pub(super) fn config(&self) -> Config {
        let mut c = Config::default();
        // The driver's flow with a shell's scripted test runs: no coverage run of its own.
        c.agent.locate = false;
        c.model.provider = Some("replay".into());
        c.model.replay_file = Some(self.script.clone());
        c.agent.review = agent_ls_core::agent::review::ReviewMode::Off;
        c.agent.evaluate = agent_ls_core::agent::Evaluation::Off;
        c.git.checkpoints = false;
        c.cache.enabled = agent_ls_core::cache::Mode::Off;
        c
    }

    pub(super) fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.root.join(relative)).expect("a workspace file")
    }

    /// Drives a new run of `goal` to its end, recorded (journal and store) as the front ends
    /// record theirs; the live events it emitted come back beside its outcome.
    pub(super) async fn drive(
        &self,
        config: &Config,
        goal: &str,
        shell: &mut TestShell,
    ) -> (Outcome, Vec<LiveEvent>) {
        let models = Models::new(config, Some(&self.root));
        let store = StoreThread::open(self.root.clone(), |_| {});
        let live = Mutex::new(Vec::new());
        let on_event = |e: LiveEvent| live.lock().unwrap_or_else(|e| e.into_inner()).push(e);
        let driver = Drive {
            models: &models,
            config,
            root: &self.root,
            cancel: &self.cancel,
            on_token: None,
            record: Some(&store),
            events: Some(&on_event),
            policy: crate::drive::Policy::new(config.agent.approval),
        };
        let mut run = new_run(config, goal);
        let outcome = driver.run(&mut run, shell, "run_test0001".into()).await;
        store.flush_blocking();
        (
            outcome,
            live.into_inner().unwrap_or_else(|e| e.into_inner()),
        )
    }

    /// The run's journal (`.agent-ls/runs/<ms>-run_test0001.jsonl`), one value a line.
    pub(super) fn journal(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.journal_path()).expect("the journal");
        text.lines()
            .map(|l| serde_json::from_str(l).expect("a journal line is JSON"))
            .collect()
    }

    pub(super) fn journal_path(&self) -> PathBuf {
        crate::journal::path_of(&self.root, "run_test0001").expect("the run's journal")
    }

    pub(super) fn script(&self) -> &Path {
        &self.script
    }
}

/// A journal line's kind, with the role for a model's lines: "model_call coder".
pub(super) fn kind(line: &Value) -> String {
    let kind = line["type"].as_str().unwrap_or("?");
    match kind {
        "model_call" | "prompt" => format!("{kind} {}", line["role"].as_str().unwrap_or("?")),
        _ => kind.to_string(),
    }
}

/// The first journal line of `kind` (its `type`).
pub(super) fn line<'j>(journal: &'j [Value], kind: &str) -> &'j Value {
    journal
        .iter()
        .find(|l| l["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} line in {:?}", kinds(journal)))
}

/// The kinds of a journal's lines, in order.
pub(super) fn kinds(journal: &[Value]) -> Vec<String> {
    journal.iter().map(kind).collect()
}

/// The kinds of the live events that are journal lines too, in order.
pub(super) fn live_kinds(live: &[LiveEvent]) -> Vec<String> {
    live.iter()
        .filter(|e| e.event.journaled())
        .map(|e| {
            let w = e.event.wire(agent_ls_core::events::Audience::Journal);
            kind(&json!({"type": w.kind, "role": w.role}))
        })
        .collect()
}

/// `role`'s answers as the live view was shown them, token by token.
pub(super) fn streamed(live: &[LiveEvent], role: Role) -> String {
    live.iter()
        .filter_map(|e| match &e.event {
            RunEvent::Token { role: r, text } if *r == role => Some(text.as_str()),
            _ => None,
        })
        .collect()
}
