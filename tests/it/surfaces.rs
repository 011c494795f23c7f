//! One run behind four surfaces: the same scripted scenarios through `agent-ls run`, the
//! language server, ACP (the official SDK's client) and MCP (the official SDK's client), each
//! checked for the same files, journal events and decisions. A surface where someone is there
//! to ask (an editor, an ACP client) is asked; one where nobody is (a script, a tool call) gets
//! the same policy's answer for nobody, in words that say how to allow it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::support::{self, Client, Spawn};
use support::editor::{Buffers, applies};
use support::git::{example_repository, git};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    Cli,
    Lsp,
    Acp,
    Mcp,
}

use Surface::{Acp, Cli, Lsp, Mcp};

const ALL: [Surface; 4] = [Cli, Lsp, Acp, Mcp];

impl Surface {
    /// Someone is there to answer a question: an editor, an ACP client.
    fn present(self) -> bool {
        matches!(self, Lsp | Acp)
    }
}

/// One thing the user does.
#[derive(Debug, Clone)]
enum Step {
    /// Runs the goal.
    Run(&'static str),
    /// Rolls the latest run back (forced or not).
    Rollback(bool),
    /// Undoes the latest applied step.
    Undo,
    /// Writes a file by hand, as the user would in another window.
    Write(&'static str, &'static str),
}

/// How the user answers the questions put to them.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Yes,
    No,
    /// Deletes the file, then says yes: the file goes away while its edit waits.
    DeleteThenYes(&'static str),
}

const BROKEN: &str = "    return a - b";
const FIXED: &str = "    return a + b";
const GOAL: &str = "fix the failing tests";

/// The coder's answer that fixes `add`.
fn fix() -> Value {
    json!({"role": "coder", "content": format!("calc.py\n<<<<<<< SEARCH\n{BROKEN}\n=======\n{FIXED}\n>>>>>>> REPLACE\n")})
}

/// The coder's answer that writes an editor setting, a protected file.
fn protected() -> Value {
    json!({"role": "coder", "content": ".vscode/settings.json\n<<<<<<< SEARCH\n=======\n{\"python.testing.pytestEnabled\": true}\n>>>>>>> REPLACE\n"})
}

/// A committed repository with the bundled example (add is broken), a trusted folder, and a
/// user configuration that answers the model's calls from `answers`.
struct Place {
    ws: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Place {
    fn new(config: &str, answers: &[Value]) -> Place {
        let ws = example_repository();
        let home = tempfile::tempdir().unwrap();
        let replay = home.path().join("replay.jsonl");
        std::fs::write(&replay, support::replay_script(answers)).unwrap();
        std::fs::create_dir_all(home.path().join("agent-ls")).unwrap();
        std::fs::write(
            home.path().join("agent-ls/config.toml"),
            format!(
                "[model]\nprovider = \"replay\"\nreplay_file = {:?}\n{config}",
                replay.display().to_string()
            ),
        )
        .unwrap();
        std::fs::write(home.path().join("agent-ls/fixer.md"), "You fix bugs.").unwrap();
        // The user's git identity, for the commits runs make.
        std::fs::write(
            home.path().join(".gitconfig"),
            "[user]\n\tname = T\n\temail = t@example.com\n",
        )
        .unwrap();
        let place = Place { ws, home };
        let out = support::agent_ls(&["trust"], place.home.path())
            .arg(place.root())
            .envs(place.env())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        place
    }

    fn root(&self) -> PathBuf {
        self.ws.path().canonicalize().unwrap()
    }

    fn env(&self) -> Vec<(String, String)> {
        let home = self.home.path().display().to_string();
        vec![
            ("HOME".into(), home.clone()),
            ("XDG_CONFIG_HOME".into(), home.clone()),
            ("XDG_STATE_HOME".into(), format!("{home}/.local/state")),
        ]
    }

    /// `agent-ls ARGS --workspace WS`, as a script runs it (no terminal).
    fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = support::in_workspace(args, &self.root(), self.home.path());
        cmd.envs(self.env());
        cmd
    }

    fn node(&self, script: &str) -> Option<Command> {
        let deps = support::protocol_deps()?;
        let mut cmd = Command::new("node");
        cmd.arg(deps.join(script))
            .arg(support::binary())
            .arg(self.root())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(self.env());
        Some(cmd)
    }

    fn read(&self, file: &str) -> Option<String> {
        std::fs::read_to_string(self.ws.path().join(file)).ok()
    }

    /// The journal lines' types of every run here, in order.
    fn journal_types(&self) -> Vec<String> {
        support::journal(self.ws.path())
            .iter()
            .filter_map(|l| l["type"].as_str().map(str::to_string))
            .collect()
    }
}

/// Does `steps` through `surface`; what the surface said at each step (for a `Write`, "").
/// `None` when the protocol clients from npm are not installed.
fn drive(surface: Surface, place: &Place, steps: &[Step], answer: Answer) -> Option<Vec<String>> {
    match surface {
        Cli => Some(steps.iter().map(|s| by_cli(place, s)).collect()),
        Mcp => steps.iter().map(|s| by_mcp(place, s)).collect(),
        Acp => by_acp(place, steps, answer),
        Lsp => Some(by_lsp(place, steps, answer)),
    }
}

/// Everything a command printed.
fn printed(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn by_cli(place: &Place, step: &Step) -> String {
    match step {
        Step::Run(goal) => printed(&mut place.cli(&["run", goal, "--json"])),
        Step::Rollback(false) => printed(&mut place.cli(&["rollback"])),
        Step::Rollback(true) => printed(&mut place.cli(&["rollback", "--force"])),
        Step::Undo => printed(&mut place.cli(&["undo"])),
        Step::Write(file, text) => {
            std::fs::write(place.ws.path().join(file), text).unwrap();
            String::new()
        }
    }
}

/// Each call a session of its own, as the Inspector's CLI makes them. MCP has no undo tool:
/// its documented undo is `agent-ls undo`.
fn by_mcp(place: &Place, step: &Step) -> Option<String> {
    let call = match step {
        Step::Run(goal) => json!([["run", {"goal": goal}]]),
        Step::Rollback(force) => json!([["rollback", {"force": force}]]),
        Step::Undo | Step::Write(..) => return Some(by_cli(place, step)),
    };
    let mut cmd = place.node("mcp-calls.mjs")?;
    Some(printed(cmd.arg(call.to_string())))
}

/// One session through all the steps.
fn by_acp(place: &Place, steps: &[Step], answer: Answer) -> Option<Vec<String>> {
    let script: Vec<Value> = steps
        .iter()
        .map(|s| match s {
            Step::Run(goal) => json!({"prompt": goal}),
            Step::Rollback(false) => json!({"prompt": "/rollback"}),
            Step::Rollback(true) => json!({"prompt": "/rollback force"}),
            Step::Undo => json!({"prompt": "/undo"}),
            Step::Write(file, text) => json!({"write": [file, text]}),
        })
        .collect();
    let answer = match answer {
        Answer::Yes => "allow".to_string(),
        Answer::No => "reject".to_string(),
        Answer::DeleteThenYes(file) => format!("delete:{file}"),
    };
    let out = place
        .node("acp-session.mjs")?
        .arg(Value::from(script).to_string())
        .env("ACP_ANSWER", answer)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("{e}: {stderr}");
    });
    assert!(out.status.success(), "{seen}\n{stderr}");
    let mut turns = seen["turns"].as_array().unwrap().iter();
    let permissions = seen["permissions"].to_string();
    Some(
        steps
            .iter()
            .map(|s| match s {
                Step::Write(..) => String::new(),
                // The permission requests belong to the run that asked them.
                Step::Run(_) => format!("{}{permissions}", turns.next().unwrap()),
                _ => turns.next().unwrap().to_string(),
            })
            .collect(),
    )
}

/// One editor session through all the steps: edits land in the editor's buffers (the files
/// are not opened, so the server writes them on disk), questions are answered as `answer`
/// says.
fn by_lsp(place: &Place, steps: &[Step], answer: Answer) -> Vec<String> {
    let mut c = Client::spawn(Spawn {
        env: place.env(),
        ..Default::default()
    });
    let caps = json!({"workspace": {"workspaceEdit": {"documentChanges": true, "resourceOperations": ["create", "delete"]}}});
    c.initialize(&place.root(), caps, json!({}));
    let buffers: Buffers = Default::default();
    let _edits = applies(&mut c, buffers, Vec::new());
    let asked = Arc::new(Mutex::new(Vec::<String>::new()));
    let (heard, root) = (asked.clone(), place.root());
    c.on_request("window/showMessageRequest", move |p| {
        heard.lock().unwrap().push(p.to_string());
        let titles: Vec<&str> = p["actions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["title"].as_str())
            .collect();
        let yes = |t: &str| t.starts_with("Accept") || t.starts_with("Allow");
        let pick = match answer {
            Answer::No => titles.iter().find(|t| !yes(t) && **t != "Show diff"),
            Answer::Yes => titles.iter().find(|t| yes(t)),
            Answer::DeleteThenYes(file) => {
                let _ = std::fs::remove_file(root.join(file));
                titles.iter().find(|t| yes(t))
            }
        };
        pick.map_or(Value::Null, |t| json!({"title": t}))
    });
    let said = steps
        .iter()
        .map(|step| {
            c.notifications.clear();
            asked.lock().unwrap().clear();
            let answered = match step {
                Step::Run(goal) => c
                    .command("agent-ls.run", json!({"goal": goal}))
                    .map(|_| c.wait_notification("agent-ls/runFinished", |_| true)),
                Step::Rollback(force) => c.command("agent-ls.rollback", json!({"force": force})),
                Step::Undo => c.command("agent-ls.undo", Value::Null),
                Step::Write(file, text) => {
                    std::fs::write(place.ws.path().join(file), text).unwrap();
                    return String::new();
                }
            };
            let shown: Vec<String> = c
                .notifications
                .iter()
                .filter(|n| n["method"] == "window/showMessage")
                .map(|n| n["params"]["message"].to_string())
                .collect();
            let answered = match answered {
                Ok(v) | Err(v) => v.to_string(),
            };
            format!(
                "{answered}{}{}",
                shown.join(""),
                asked.lock().unwrap().join("")
            )
        })
        .collect();
    let _ = c.shutdown();
    said
}

/// The agent-ls commit on top of the repository, if the run made one.
fn last_commit(root: &Path) -> String {
    git(root, &["log", "-1", "--format=%s%n%b", "--name-only"])
}

/// The run ended done, as each surface says it: `"status":"done"` in the outcome (the CLI's
/// JSON, MCP's result, the editor's runFinished), or ACP's closing words.
fn done(said: &str) -> bool {
    said.contains("\"status\":\"done\"") || said.contains("done: the tests pass")
}

const QUIET: &str = "[agent]\nevaluate = false\nreview = \"off\"\n";

#[test]
fn a_fix_is_the_same_run_everywhere_and_commits_on_success() {
    let mut journals = Vec::new();
    for surface in ALL {
        let config = format!("{QUIET}approval = \"auto\"\n[git]\ncommit = \"on_success\"\n");
        let place = Place::new(&config, &[fix()]);
        let Some(said) = drive(surface, &place, &[Step::Run(GOAL)], Answer::Yes) else {
            return;
        };
        let calc = place.read("calc.py").unwrap();
        assert!(calc.contains(FIXED), "{surface:?}: {calc}\n{said:?}");
        assert!(done(&said[0]), "{surface:?}: {said:?}");
        // One commit on top of the repository's first, holding calc.py.
        let commits = git(&place.root(), &["rev-list", "--count", "HEAD"]);
        let commit = last_commit(&place.root());
        assert!(
            commits.trim() == "2" && commit.contains("calc.py"),
            "{surface:?}: the run was not committed: {commit}\n{said:?}"
        );
        // Clean: the commit holds the run's change, and nothing else is left over.
        let status = git(&place.root(), &["status", "--porcelain", "--", "calc.py"]);
        assert_eq!(status, "", "{surface:?}");
        journals.push((surface, place.journal_types()));
    }
    let (first, kinds) = &journals[0];
    for (surface, other) in &journals[1..] {
        assert_eq!(
            other, kinds,
            "{surface:?}'s journal differs from {first:?}'s"
        );
    }
}

#[test]
fn a_protected_file_gets_the_same_decision_in_each_approval_mode() {
    for approval in ["auto", "confirm"] {
        for surface in ALL {
            let config = format!("{QUIET}approval = \"{approval}\"\n");
            let place = Place::new(&config, &[protected()]);
            let Some(said) = drive(surface, &place, &[Step::Run(GOAL)], Answer::No) else {
                return;
            };
            let said = &said[0];
            let case = format!("{surface:?} under {approval}: {said}");
            // Never written without the user naming it.
            assert!(place.read(".vscode/settings.json").is_none(), "{case}");
            assert!(said.contains(".vscode/settings.json"), "{case}");
            if surface.present() {
                // Asked by name (and the user said no).
                assert!(said.contains("Allow .vscode/settings.json"), "{case}");
            } else {
                assert!(
                    said.contains("no one is here to confirm them by name"),
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn a_chosen_agent_brings_its_approval_everywhere() {
    // The configuration asks before each change, the chosen agent does not: every surface
    // runs the agent's way, so nobody is asked and the fix is written.
    let config = format!(
        "{QUIET}approval = \"confirm\"\ndefault_agent = \"fixer\"\n[agents.fixer]\nprompt = \"fixer.md\"\napproval = \"auto\"\n"
    );
    for surface in ALL {
        let place = Place::new(&config, &[fix()]);
        let Some(said) = drive(surface, &place, &[Step::Run(GOAL)], Answer::No) else {
            return;
        };
        let calc = place.read("calc.py").unwrap();
        assert!(calc.contains(FIXED), "{surface:?}: {said:?}");
        assert!(done(&said[0]), "{surface:?}: {said:?}");
    }
}

#[test]
fn rollback_then_undo_and_a_second_rollback_over_a_change_made_again() {
    let config = format!("{QUIET}approval = \"auto\"\n");
    let fixed = "\"\"\"A tiny calculator with a bug for the agent to fix.\"\"\"\n\n\ndef add(a, b):\n    return a + b\n\n\ndef multiply(a, b):\n    return a * b\n";
    let steps = [
        Step::Run(GOAL),
        Step::Rollback(false),
        Step::Undo,
        Step::Write("calc.py", fixed),
        Step::Rollback(false),
    ];
    for surface in ALL {
        let place = Place::new(&config, &[fix()]);
        let Some(said) = drive(surface, &place, &steps, Answer::Yes) else {
            return;
        };
        let case = format!("{surface:?}: {said:#?}");
        assert!(done(&said[0]), "{case}");
        // Rolled back: the run's change is gone.
        assert!(said[1].contains("calc.py"), "{case}");
        // Undo does not take the run's step back a second time, and never blames the user.
        assert!(
            said[2].contains("no applied step") || said[2].contains("nothing to undo"),
            "{case}"
        );
        assert!(
            !said[2].contains("undo never overwrites your typing"),
            "{case}"
        );
        // The user made the fix by hand: the second rollback refuses and names the file, and
        // the user's text stays.
        assert!(said[4].contains("rolled back already"), "{case}");
        assert!(said[4].contains("calc.py"), "{case}");
        assert_eq!(place.read("calc.py").as_deref(), Some(fixed), "{case}");
    }
}

#[test]
fn a_file_deleted_while_its_edit_waits_is_not_written_back() {
    // Only where someone is asked does an edit wait: a script or a tool call has no one.
    let config = format!("{QUIET}approval = \"prompt\"\n");
    for surface in [Lsp, Acp] {
        let place = Place::new(&config, &[fix()]);
        let answer = Answer::DeleteThenYes("calc.py");
        let Some(said) = drive(surface, &place, &[Step::Run(GOAL)], answer) else {
            return;
        };
        assert!(place.read("calc.py").is_none(), "{surface:?}: {said:?}");
        assert!(!done(&said[0]), "{surface:?}: {said:?}");
    }
}

#[test]
fn a_run_isolated_in_a_worktree_leaves_the_checkout_alone_everywhere() {
    let config = format!("{QUIET}approval = \"auto\"\n[git]\nisolation = \"worktree\"\n");
    for surface in ALL {
        let place = Place::new(&config, &[fix()]);
        let Some(said) = drive(surface, &place, &[Step::Run(GOAL)], Answer::Yes) else {
            return;
        };
        let case = format!("{surface:?}: {said:?}");
        // The checkout is as it was; the fix is in the run's worktree.
        assert!(place.read("calc.py").unwrap().contains(BROKEN), "{case}");
        let worktrees = place.root().join(".agent-ls/worktrees");
        let fixed = std::fs::read_dir(&worktrees)
            .unwrap_or_else(|e| panic!("{e}: {case}"))
            .flatten()
            .any(|w| {
                std::fs::read_to_string(w.path().join("calc.py")).is_ok_and(|t| t.contains(FIXED))
            });
        assert!(fixed, "{case}");
        assert!(said[0].contains("worktree"), "{case}");
    }
}
