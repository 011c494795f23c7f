//! Hooks through the real binary (docs/hooks.md): a `before_change` hook that exits 2 keeps
//! the change out and its stderr reaches the model in the next request (a model server on
//! 127.0.0.1 records it), and a workspace's hook runs only once its exact content is trusted
//! (`agent-ls hooks trust`), and not again after it changed until trusted anew; what an
//! `after_run` hook reports reaches the user and the journal; the editor asks to trust an
//! untrusted workspace hook, and only "Trust this hook" trusts it.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

pub(crate) const FIX: &str =
    "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE\n";

/// A home folder whose TMPDIR, config and state folders are its own (see tests/it/trust.rs).
pub(crate) fn home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join("tmp")).unwrap();
    home
}

/// `agent-ls ARGS` as the user of `home`, with `env` added, run to its end.
pub(crate) fn cli(home: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut cmd: Command = support::agent_ls(args, home);
    cmd.env("TMPDIR", home.join("tmp"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

pub(crate) fn user_file(home: &Path, text: &str) {
    std::fs::create_dir_all(home.join("config/agent-ls")).unwrap();
    std::fs::write(home.join("config/agent-ls/config.toml"), text).unwrap();
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub(crate) fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The replay provider answering `lines` for a run in `ws`.
pub(crate) fn replay(ws: &Path, lines: &[Value]) -> Vec<(&'static str, String)> {
    let file = ws.join(".replay.jsonl");
    std::fs::write(&file, support::replay_script(lines)).unwrap();
    vec![
        ("AGENT_LS_MODEL__PROVIDER", "replay".into()),
        ("AGENT_LS_MODEL__REPLAY_FILE", file.display().to_string()),
        ("AGENT_LS_AGENT__EVALUATE", "false".into()),
    ]
}

pub(crate) fn coder(content: &str) -> Value {
    json!({"role": "coder", "content": content})
}

/// `agent-ls run GOAL ARGS --workspace WS`.
pub(crate) fn run_in(home: &Path, ws: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let ws = ws.to_str().unwrap();
    let all = [
        &["run", "fix the failing tests"],
        args,
        &["--workspace", ws],
    ]
    .concat();
    cli(home, &all, env)
}

#[test]
fn a_hook_that_exits_2_blocks_the_change_and_the_model_hears_its_reason() {
    let home = home();
    let ws = support::example();
    let model = ModelServer::start(vec![
        openai_text(&[FIX]),
        openai_text(&["I leave calc.py alone."]),
    ]);
    // The hook keeps what it was given (in the workspace: the sandbox lets it write there).
    user_file(
        home.path(),
        &format!(
            r#"[model]
provider = "openai"
base_url = "{}/v1"
name = "m"
[agent]
evaluate = false

[[hooks]]
event = "before_change"
matcher = "calc.py"
command = ["sh", "-c", "cat > hook-input.json; echo 'calc.py is frozen until the release (policy R-17)' >&2; exit 2"]
"#,
            model.url
        ),
    );
    let env = [("OPENAI_API_KEY", "k".to_string())];
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "the change was kept out: {}",
        text(&out)
    );
    let input: Value = serde_json::from_str(&read(ws.path().join("hook-input.json")))
        .unwrap_or_else(|e| panic!("the hook got JSON on stdin ({e}): {}", text(&out)));
    assert_eq!(input["event"], "before_change", "{input}");
    assert_eq!(input["paths"], json!(["calc.py"]), "{input}");
    assert!(
        input["diff"]
            .as_str()
            .unwrap_or("")
            .contains("return a + b"),
        "{input}"
    );
    let requests = model.requests();
    assert!(
        requests.len() >= 2,
        "the model was asked again: {}",
        text(&out)
    );
    let next = requests[1].body.to_string();
    assert!(
        next.contains("policy R-17"),
        "the hook's reason reached the model: {next}"
    );
    assert!(
        !requests[0].body.to_string().contains("policy R-17"),
        "and not before the hook ran"
    );
}

/// The workspace file's hook: before each change, `sh hook.sh`, which notes in hook-ran.txt
/// that it ran.
fn with_hook(ws: &Path) {
    std::fs::write(
        ws.join(".agent-ls.toml"),
        "[[hooks]]\nevent = \"before_change\"\ncommand = [\"sh\", \"hook.sh\"]\n",
    )
    .unwrap();
    std::fs::write(ws.join("hook.sh"), "echo ran >> hook-ran.txt\n").unwrap();
}

#[test]
fn a_workspace_hook_runs_only_while_its_exact_content_is_trusted() {
    let home = home();
    let ws = support::example();
    with_hook(ws.path());
    let original = read(ws.path().join("calc.py"));
    let ran = ws.path().join("hook-ran.txt");
    let attempt = |label: &str| {
        std::fs::write(ws.path().join("calc.py"), &original).unwrap();
        let _ = std::fs::remove_file(&ran);
        let env = replay(ws.path(), &[coder(FIX)]);
        let out = run_in(home.path(), ws.path(), &["--yes"], &env);
        assert!(
            read(ws.path().join("calc.py")).contains("return a + b"),
            "{label}: {}",
            text(&out)
        );
        (
            ran.exists(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (hook_ran, stderr) = attempt("untrusted");
    assert!(!hook_ran, "an untrusted workspace hook does not run");
    assert!(
        stderr.contains("not trusted") && stderr.contains("agent-ls hooks trust"),
        "{stderr}"
    );

    let list = cli(
        home.path(),
        &["hooks", "list", "--workspace", ws.path().to_str().unwrap()],
        &[],
    );
    assert!(text(&list).contains("NOT TRUSTED"), "{}", text(&list));
    let trust = cli(
        home.path(),
        &["hooks", "trust", "--workspace", ws.path().to_str().unwrap()],
        &[],
    );
    assert!(trust.status.success(), "{}", text(&trust));
    let (hook_ran, _) = attempt("trusted");
    assert!(hook_ran, "a trusted hook runs");

    // The script changes: its hash is another, so it is not run until trusted again.
    std::fs::write(ws.path().join("hook.sh"), "echo changed >> hook-ran.txt\n").unwrap();
    let (hook_ran, stderr) = attempt("changed");
    assert!(!hook_ran, "a changed hook does not run");
    assert!(stderr.contains("not trusted"), "{stderr}");
    let trust = cli(
        home.path(),
        &["hooks", "trust", "--workspace", ws.path().to_str().unwrap()],
        &[],
    );
    assert!(trust.status.success(), "{}", text(&trust));
    let (hook_ran, _) = attempt("trusted again");
    assert!(hook_ran && read(&ran).contains("changed"));
}

#[test]
fn what_an_after_run_hook_reports_reaches_the_user_and_the_journal() {
    let home = home();
    let ws = support::example();
    user_file(
        home.path(),
        "[[hooks]]\nevent = \"after_run\"\ncommand = [\"sh\", \"-c\", \"echo 'the release notes were not updated' >&2; exit 1\"]\n",
    );
    let env = replay(ws.path(), &[coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    let said = "(after_run) failed (exit 1): the release notes were not updated";
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(said),
        "{}",
        text(&out)
    );
    let lines = support::journal(ws.path());
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["type"].as_str()).collect();
    let warning = kinds.iter().position(|k| *k == "warning");
    let finished = kinds.iter().position(|k| *k == "finished");
    assert!(
        warning.is_some() && warning < finished,
        "a warning line before the run's end: {kinds:?}"
    );
    let warning = &lines[warning.unwrap_or_default()];
    assert!(
        warning["data"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(said),
        "{warning}"
    );
}

/// Whether a message request is the question about a hook.
fn hook_question(request: &Value) -> bool {
    request["method"] == "window/showMessageRequest"
        && request["params"]["actions"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["title"] == "Trust this hook"))
}

/// An editor session on a workspace with an untrusted hook, whose question the test client
/// answers with `answer` (`None`: dismissed); then a run that fixes calc.py. Whether the run
/// ran the hook, and the questions about it.
fn editor_asked_to_trust(answer: Option<&'static str>) -> (bool, Vec<Value>) {
    let ws = support::example();
    with_hook(ws.path());
    let server = ModelServer::start(vec![openai_text(&[FIX])]);
    let mut c = support::Client::spawn(support::Spawn {
        env: vec![("OPENAI_API_KEY".into(), "test-key".into())],
        ..support::Spawn::default()
    });
    c.on_request("window/showMessageRequest", move |p| {
        let request = json!({"method": "window/showMessageRequest", "params": p});
        match (hook_question(&request), answer) {
            (true, Some(title)) => json!({"title": title}),
            (true, None) => Value::Null,
            (false, _) => p["actions"][0].clone(),
        }
    });
    crate::permissions::initialize_auto(&mut c, ws.path(), &server);
    c.wait_until(
        |c| c.server_requests.iter().find(|r| hook_question(r)).cloned(),
        "the question about the hook",
    );
    if answer == Some("Trust this hook") {
        c.wait_notification("window/showMessage", |p| {
            p["message"]
                .as_str()
                .unwrap_or("")
                .contains("is trusted as it is now")
        });
    }
    let started = c
        .command("agent-ls.run", json!({"goal": "fix the failing tests"}))
        .unwrap();
    let finished = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(finished["run_id"], started["run_id"], "{finished}");
    assert!(
        read(ws.path().join("calc.py")).contains("return a + b"),
        "{finished}"
    );
    let asked = c
        .server_requests
        .iter()
        .filter(|r| hook_question(r))
        .cloned()
        .collect();
    (ws.path().join("hook-ran.txt").exists(), asked)
}

#[test]
fn the_editor_asks_to_trust_a_workspace_hook_and_only_a_yes_trusts_it() {
    let (ran, asked) = editor_asked_to_trust(Some("Trust this hook"));
    assert!(ran, "a hook trusted from the editor runs");
    assert_eq!(asked.len(), 1, "{asked:?}");
    let message = asked[0]["params"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("`sh hook.sh` (before_change)") && message.contains("sha256:"),
        "{message}"
    );
    let titles = &asked[0]["params"]["actions"];
    assert_eq!(
        titles,
        &json!([{"title": "Trust this hook"}, {"title": "Not now"}])
    );

    for answer in [Some("Not now"), None] {
        let (ran, asked) = editor_asked_to_trust(answer);
        assert!(
            !ran,
            "{answer:?}: the hook is not trusted, and does not run"
        );
        assert_eq!(
            asked.len(),
            1,
            "{answer:?}: asked once a session: {asked:?}"
        );
    }
}
