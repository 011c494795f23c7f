//! The project's own language server checks each applied edit (issue 42,
//! docs/project-lsp.md), through `agent-ls run --json` with a scripted model and a real
//! basedpyright (from PyPI; scripts/test installs it and sets AGENT_LS_TEST_BASEDPYRIGHT):
//! an undefined name comes back as the edit's result and the next answer fixes it before any
//! test runs; a clean edit adds nothing; errors already there are never new; a server that
//! hangs costs at most the wait budget; a missing one is one warning. With a real
//! typescript-language-server (from npm; AGENT_LS_TEST_TSLS), an undefined name in a .ts file
//! comes back too. Over LSP, an editor's forwarded diagnostics for the text before an edit
//! are never taken for its result; the first model request does not wait for the errors
//! already there.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

/// basedpyright's language server, or None to skip where it is not installed (with
/// AGENT_LS_REQUIRE_PROTOCOL_TESTS set, as scripts/test does, that fails instead).
fn basedpyright() -> Option<String> {
    match std::env::var("AGENT_LS_TEST_BASEDPYRIGHT") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("AGENT_LS_REQUIRE_PROTOCOL_TESTS").is_some() => {
            panic!("AGENT_LS_TEST_BASEDPYRIGHT is not set; scripts/test installs basedpyright")
        }
        _ => {
            eprintln!("skipped: AGENT_LS_TEST_BASEDPYRIGHT is not set (pip install basedpyright)");
            None
        }
    }
}

/// The calc example with the evaluator and the review off, checked in basedpyright's
/// standard mode (its default "recommended" mode calls unannotated code an error).
fn example() -> tempfile::TempDir {
    let ws = support::example();
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("pyrightconfig.json"),
        r#"{"typeCheckingMode": "standard"}"#,
    )
    .unwrap();
    ws
}

/// A user configuration that runs the tests with pytest and checks edits with `server`
/// (a command line) within `wait_ms`.
fn config(server: &[String], wait_ms: u64) -> String {
    format!(
        "[test]\ncommand = {}\n\n[lsp_servers]\nwait_ms = {wait_ms}\n\n[lsp_servers.servers.python]\ncommand = {}\npatterns = [\"*.py\"]\n",
        json!([support::python(), "-m", "pytest", "-q"]),
        json!(server),
    )
}

/// `agent-ls run GOAL --yes --json` under `config`, the model a local server answering
/// `answers` in turn: the run's output and the requests the model got.
fn run(ws: &Path, goal: &str, config: &str, answers: &[&str]) -> (Output, Vec<Value>) {
    let server = ModelServer::start(answers.iter().map(|a| openai_text(&[a])).collect());
    let home = support::home_with(config);
    // A temporary folder of its own, as a user's is not the folder that holds their home:
    // with HOME under TMPDIR, the sandbox lets a server list TMPDIR but read none of its files
    // (the user's config, which holds keys, is below it), and gopls reads back the go.mod
    // copy it writes there.
    let tmp = home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = support::cli(&["run", goal, "--yes"], ws, home.path())
        .env("TMPDIR", &tmp)
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .output()
        .unwrap();
    let requests = server.requests().into_iter().map(|r| r.body).collect();
    (out, requests)
}

/// The run's JSON outcome, which must be done with the tests passing.
fn done(out: &Output) -> Value {
    let o: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(o["status"], "done", "{o}\n{}", stderr(out));
    assert_eq!(o["tests"], json!({"passed": 3, "failed": 0}), "{o}");
    o
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A bad edit fixed before the tests ran: the baseline's test run, the bad edit's errors, the
/// coder again, the clean check, then the tests.
const FIXED_BEFORE_THE_TESTS: [&str; 6] = [
    "test_result",
    "model_call",
    "errors",
    "model_call",
    "clean",
    "test_result",
];

/// `sequence`, with each check as `errors` or `clean`.
fn kinds(ws: &Path) -> Vec<String> {
    sequence(ws)
        .iter()
        .map(|l| match l["type"].as_str().unwrap_or("") {
            "diagnostics" if l["data"]["errors"].as_array().is_some_and(Vec::is_empty) => {
                "clean".into()
            }
            "diagnostics" => "errors".into(),
            other => other.to_string(),
        })
        .collect()
}

/// The journal's lines of the kinds the checks are about, in order: `test_result`,
/// `diagnostics`, the coder's `model_call`s.
fn sequence(ws: &Path) -> Vec<Value> {
    support::journal(ws)
        .into_iter()
        .filter(|l| {
            l["type"] == "test_result"
                || l["type"] == "diagnostics"
                || (l["type"] == "model_call" && l["role"] == "coder")
        })
        .collect()
}

fn edit(search: &str, replace: &str) -> String {
    format!("calc.py\n<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE\n")
}

#[test]
fn an_undefined_name_comes_back_and_the_next_answer_fixes_it_before_any_test_runs() {
    let Some(server) = basedpyright() else { return };
    let ws = example();
    let bad = edit("    return a - b", "    return a + c");
    let good = edit("    return a + c", "    return a + b");
    let (out, requests) = run(
        ws.path(),
        "fix the failing tests",
        &config(&[server, "--stdio".into()], 120_000),
        &[&bad, &good],
    );
    let o = done(&out);
    assert_eq!(
        o["iterations"], 1,
        "the fix of the error is the same iteration: {o}"
    );
    let errors = o["edit_errors"].as_array().expect("edit_errors in --json");
    assert_eq!(errors.len(), 1, "{o}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.starts_with("calc.py:5:") && error.contains("\"c\" is not defined"),
        "{error}"
    );
    // The baseline's test run, the bad edit's errors, the coder again, the clean check,
    // then the tests: none ran between the bad edit and its fix.
    assert_eq!(kinds(ws.path()), FIXED_BEFORE_THE_TESTS, "{}", stderr(&out));
    // The second model call heard the error as the edit's result.
    assert_eq!(requests.len(), 2);
    let told = requests[1].to_string();
    assert!(
        told.contains("reports errors it introduced") && told.contains("is not defined"),
        "{told}"
    );
}

#[test]
fn an_edit_that_introduces_no_error_adds_nothing() {
    let Some(server) = basedpyright() else { return };
    let ws = example();
    let good = edit("    return a - b", "    return a + b");
    let (out, requests) = run(
        ws.path(),
        "fix the failing tests",
        &config(&[server, "--stdio".into()], 120_000),
        &[&good],
    );
    assert_eq!(requests.len(), 1, "one model call");
    let o = done(&out);
    assert!(o.get("edit_errors").is_none(), "{o}");
    let checks = support::journaled(ws.path(), "diagnostics");
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0]["data"]["errors"], json!([]));
    assert_eq!(checks[0]["data"]["before_edit"], false);
    assert!(!stderr(&out).contains("warning"), "{}", stderr(&out));
}

#[test]
fn errors_already_there_are_context_and_never_reported_as_new() {
    let Some(server) = basedpyright() else { return };
    let ws = example();
    let calc = ws.path().join("calc.py");
    let old = std::fs::read_to_string(&calc).unwrap();
    std::fs::write(
        &calc,
        format!("{old}\n\ndef unused():\n    return missing_name\n"),
    )
    .unwrap();
    // The first edit adds a line above the old error, which moves down by one, and a new
    // error of its own; the second fixes that. The errors before the edit are looked up in
    // the background and may come after the first request (whose context then lacks them),
    // but the first edit's check waits for them: the second request is made after they came.
    let bad = edit("    return a - b", "    total = a + c\n    return total");
    let fix = edit("    total = a + c", "    total = a + b");
    let (out, requests) = run(
        ws.path(),
        "fix the failing tests of calc.py",
        &config(&[server, "--stdio".into()], 120_000),
        &[&bad, &fix],
    );
    let o = done(&out);
    let checks = support::journaled(ws.path(), "diagnostics");
    let before: Vec<&Value> = checks
        .iter()
        .filter(|c| c["data"]["before_edit"] == true)
        .collect();
    assert_eq!(before.len(), 1, "{checks:?}");
    let known = before[0]["data"]["errors"].to_string();
    assert!(known.contains("missing_name"), "{known}");
    let after: Vec<&Value> = checks
        .iter()
        .filter(|c| c["data"]["before_edit"] == false)
        .collect();
    assert_eq!(after.len(), 2, "{checks:?}");
    // Only the edit's own error is its result: the one already there (moved down a line) is not.
    let new = after[0]["data"]["errors"].to_string();
    assert!(
        new.contains("is not defined")
            && new.contains("\\\"c\\\"")
            && !new.contains("missing_name"),
        "{checks:?}"
    );
    assert_eq!(after[1]["data"]["errors"], json!([]), "{checks:?}");
    let reported = o["edit_errors"].to_string();
    assert!(!reported.contains("missing_name"), "{o}");
    // The model was told of them as context, not as its own.
    assert_eq!(requests.len(), 2);
    let prompt = requests[1].to_string();
    assert!(
        prompt.contains("already reports") && prompt.contains("missing_name"),
        "{prompt}"
    );
}

/// A "language server" that reads and never answers, and writes its pid to `pid_file`.
fn hanging_server(dir: &Path, pid_file: &Path) -> Vec<String> {
    let script = dir.join("hang.py");
    std::fs::write(
        &script,
        format!(
            "import os, sys, time\nopen({:?}, 'w').write(str(os.getpid()))\nwhile True:\n    sys.stdin.buffer.read(1) or time.sleep(1)\n",
            pid_file.display().to_string()
        ),
    )
    .unwrap();
    vec![support::python(), script.display().to_string()]
}

#[test]
fn a_server_that_hangs_costs_at_most_the_wait_budget_and_one_warning() {
    let ws = example();
    let tools = tempfile::tempdir().unwrap();
    let pid_file = ws.path().join("server.pid");
    let server = hanging_server(tools.path(), &pid_file);
    let good = edit("    return a - b", "    return a + b");
    let started = std::time::Instant::now();
    let (out, _) = run(
        ws.path(),
        "fix the failing tests of calc.py",
        &config(&server, 1500),
        &[&good],
    );
    let o = done(&out);
    let err = stderr(&out);
    assert_eq!(
        err.matches("language server").count(),
        1,
        "one warning for the whole run: {err}"
    );
    assert!(err.contains("did not answer within 1500 ms"), "{err}");
    // The files before the edit and the edit: one wait, not two. A generous bound that only
    // waiting forever would break.
    assert!(started.elapsed().as_secs() < 60, "{o}");
    let checks = support::journaled(ws.path(), "diagnostics");
    assert!(
        checks.is_empty(),
        "a server given up checks nothing: {checks:?}"
    );
    let pid = std::fs::read_to_string(&pid_file).expect("the server ran");
    let gone = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !support::alive(&pid)
    });
    assert!(gone, "the hanging server {pid} was killed");
}

#[test]
fn a_missing_server_is_one_warning_and_the_run_goes_on() {
    let ws = example();
    let missing: Vec<String> = vec![
        PathBuf::from("/nonexistent/bin/pyright-nowhere")
            .display()
            .to_string(),
        "--stdio".into(),
    ];
    let good = edit("    return a - b", "    return a + b");
    let (out, _) = run(
        ws.path(),
        "fix the failing tests of calc.py",
        &config(&missing, 5000),
        &[&good],
    );
    done(&out);
    let err = stderr(&out);
    assert_eq!(err.matches("language server").count(), 1, "{err}");
    assert!(err.contains("pyright-nowhere"), "{err}");
}

/// A language server that answers `initialize` and publishes, for each opened or changed
/// file, an error already there ("old problem", line 9) and, while the text uses
/// `undefined_thing`, one on line 5; it publishes nothing before the run's journal has the
/// coder's first model call, so a run that waited for it before that call would wait
/// forever (and give up at the wait budget).
fn slow_server(dir: &Path, ws: &Path) -> Vec<String> {
    let script = dir.join("slow.py");
    let body = r#"
import glob, json, os, sys, time

def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))

def send(msg):
    body = json.dumps(msg).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()

def called():
    for f in glob.glob(os.path.join(WS, ".agent-ls", "runs", "*.jsonl")):
        if '"type":"model_call"' in open(f).read():
            return True
    return False

def publish(uri, version, text):
    while not called():
        time.sleep(0.1)
    errors = [{"range": {"start": {"line": 8, "character": 4}, "end": {"line": 8, "character": 9}},
               "severity": 1, "message": "old problem"}]
    if "undefined_thing" in text:
        errors.append({"range": {"start": {"line": 4, "character": 15}, "end": {"line": 4, "character": 30}},
                       "severity": 1, "message": '"undefined_thing" is not defined'})
    send({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics",
          "params": {"uri": uri, "version": version, "diagnostics": errors}})

while True:
    msg = read()
    method = msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"capabilities": {"textDocumentSync": 1}}})
    elif method == "textDocument/didOpen":
        d = msg["params"]["textDocument"]
        publish(d["uri"], d["version"], d["text"])
    elif method == "textDocument/didChange":
        p = msg["params"]
        publish(p["textDocument"]["uri"], p["textDocument"]["version"], p["contentChanges"][-1]["text"])
    elif method == "exit":
        sys.exit(0)
    elif "id" in msg:
        send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
"#;
    std::fs::write(
        &script,
        format!("WS = {:?}\n{body}", ws.display().to_string()),
    )
    .unwrap();
    vec![support::python(), script.display().to_string()]
}

#[test]
fn the_first_model_request_does_not_wait_for_the_errors_before_the_edit() {
    let ws = example();
    let tools = tempfile::tempdir().unwrap();
    let server = slow_server(tools.path(), &ws.path().canonicalize().unwrap());
    let bad = edit("    return a - b", "    return a + undefined_thing");
    let good = edit("    return a + undefined_thing", "    return a + b");
    let (out, requests) = run(
        ws.path(),
        "fix the failing tests of calc.py",
        &config(&server, 60_000),
        &[&bad, &good],
    );
    done(&out);
    // The server speaks only once the first model call is journaled: that call went out
    // without waiting for it, and the errors it then found are journaled after it.
    let order: Vec<String> = sequence(ws.path())
        .iter()
        .map(
            |l| match (l["type"].as_str().unwrap(), &l["data"]["before_edit"]) {
                ("diagnostics", Value::Bool(true)) => "before".into(),
                ("diagnostics", _) => "check".into(),
                (other, _) => other.to_string(),
            },
        )
        .collect();
    assert_eq!(
        order,
        [
            "test_result",
            "model_call",
            "before",
            "check",
            "model_call",
            "check",
            "test_result"
        ],
        "{}",
        stderr(&out)
    );
    // Handed in when they came: not in the first request, in the next context.
    assert_eq!(requests.len(), 2);
    let first = requests[0].to_string();
    assert!(!first.contains("old problem"), "{first}");
    let second = requests[1].to_string();
    assert!(
        second.contains("already reports") && second.contains("old problem"),
        "{second}"
    );
    assert!(
        second.contains("reports errors it introduced") && second.contains("undefined_thing"),
        "{second}"
    );
}

/// `agent-ls/editorDiagnostics` of calc.py (`uri`) at `version`: the error already there on
/// line 9, and `new` ones.
fn forwarded(uri: &str, version: i64, new: &[(u32, &str)]) -> Value {
    let at = |line: u32, message: &str| {
        json!({"range": {"start": {"line": line, "character": 4}, "end": {"line": line, "character": 9}},
            "severity": 1, "message": message})
    };
    let mut diagnostics = vec![at(8, "old problem")];
    diagnostics.extend(new.iter().map(|(l, m)| at(*l, m)));
    json!({"jsonrpc": "2.0", "method": "agent-ls/editorDiagnostics",
        "params": {"uri": uri, "version": version, "diagnostics": diagnostics}})
}

#[test]
fn an_editors_late_word_on_the_text_before_an_edit_is_not_taken_for_its_result() {
    // An editor that forwards its diagnostics, over LSP: as it applies the first edit it
    // says again what it thought of the text before (the old error alone, at the old
    // version), and only a while later what it thinks of the edit's text (a new error). The
    // run must wait for the latter, by version, not take the former because it came after
    // the edit was sent.
    let ws = example();
    let coder = |from: &str, to: &str| json!({"role": "coder", "content": edit(from, to)});
    std::fs::write(
        ws.path().join(".replay.jsonl"),
        support::replay_script(&[
            coder("    return a - b", "    return a + c"),
            coder("    return a + c", "    return a + b"),
        ]),
    )
    .unwrap();
    let mut c = support::Client::spawn(support::Spawn::default());
    c.initialize(
        ws.path(),
        json!({"workspace": {"workspaceEdit": {"documentChanges": true}},
            "experimental": {"agentLs": {"forwardsDiagnostics": true}}}),
        json!({"model": {"provider": "replay", "replay_file": ".replay.jsonl"},
            "agent": {"approval": "auto", "evaluate": false, "review": "off"},
            "git": {"commit": "never"}, "lsp_servers": {"wait_ms": 30000}}),
    );
    let calc = support::file_uri(&ws.path().join("calc.py"));
    let text = std::fs::read_to_string(ws.path().join("calc.py")).unwrap();
    c.open(&calc, &text);
    c.send(&forwarded(&calc, 1, &[]));
    let buffer = std::sync::Arc::new(std::sync::Mutex::new((text, 1i64)));
    let held = buffer.clone();
    let uri = calc.clone();
    c.on_request_before("workspace/applyEdit", move |p| {
        let mut b = held.lock().unwrap();
        let edits = p["edit"]["documentChanges"][0]["edits"].as_array().unwrap();
        let old = b.1;
        b.0 = support::apply_lsp_edits(&b.0, edits);
        b.1 += 1;
        let change = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
            "textDocument": {"uri": uri, "version": b.1}, "contentChanges": [{"text": b.0}]}});
        let notes = match b.1 {
            // The old word again, then the edit lands.
            2 => vec![forwarded(&uri, old, &[]), change],
            // The fix: its word comes with it.
            _ => vec![change, forwarded(&uri, b.1, &[])],
        };
        (json!({"applied": true}), notes)
    });
    c.command("agent-ls.fixTests", Value::Null).unwrap();
    c.wait_until(
        |c| {
            c.server_requests
                .iter()
                .any(|r| r["method"] == "workspace/applyEdit")
                .then_some(())
        },
        "the first edit",
    );
    // Well past the 300 ms of quiet after which a publication is taken.
    c.pump(std::time::Duration::from_millis(1500));
    c.send(&forwarded(&calc, 2, &[(4, "\"c\" is not defined")]));
    let finished = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(finished["status"], "done", "{finished}\n{}", c.stderr());
    let checks: Vec<Value> = support::journaled(ws.path(), "diagnostics")
        .into_iter()
        .filter(|l| l["data"]["before_edit"] == false)
        .collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    assert_eq!(
        checks[0]["data"]["errors"],
        json!(["calc.py:5:5: error: \"c\" is not defined"]),
        "{checks:?}"
    );
    assert_eq!(checks[1]["data"]["errors"], json!([]), "{checks:?}");
    assert_eq!(buffer.lock().unwrap().1, 3, "two edits applied");
}

/// typescript-language-server (from npm, with TypeScript 5; scripts/test installs both
/// under .tools/tsls and sets AGENT_LS_TEST_TSLS), or None to skip where it is not.
fn typescript_language_server() -> Option<String> {
    match std::env::var("AGENT_LS_TEST_TSLS") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("AGENT_LS_REQUIRE_PROTOCOL_TESTS").is_some() => {
            panic!(
                "AGENT_LS_TEST_TSLS is not set; scripts/test installs typescript-language-server"
            )
        }
        _ => {
            eprintln!(
                "skipped: AGENT_LS_TEST_TSLS is not set (npm install typescript-language-server typescript)"
            );
            None
        }
    }
}

#[test]
fn an_undefined_name_in_a_typescript_file_comes_back_from_typescript_language_server() {
    let Some(server) = typescript_language_server() else {
        return;
    };
    let ws = example();
    std::fs::write(
        ws.path().join("util.ts"),
        "export function double(x: number): number {\n  return x * 2;\n}\n",
    )
    .unwrap();
    std::fs::write(
        ws.path().join("tsconfig.json"),
        r#"{"compilerOptions": {"strict": true, "noEmit": true}}"#,
    )
    .unwrap();
    // The fix of calc.py, and an edit of util.ts that uses a name that does not exist.
    let ts = |from: &str, to: &str| {
        format!(
            "util.ts\n<<<<<<< SEARCH\n  return {from};\n=======\n  return {to};\n>>>>>>> REPLACE\n"
        )
    };
    let bad = format!(
        "{}\n{}",
        edit("    return a - b", "    return a + b"),
        ts("x * 2", "x * two")
    );
    let good = ts("x * two", "x * 2");
    let config = format!(
        "[test]\ncommand = {}\n\n[lsp_servers]\nwait_ms = 120000\n\n[lsp_servers.servers.python]\ncommand = []\n\n[lsp_servers.servers.typescript]\ncommand = {}\npatterns = [\"*.ts\"]\n",
        json!([support::python(), "-m", "pytest", "-q"]),
        json!([server, "--stdio"]),
    );
    let (out, requests) = run(ws.path(), "fix the failing tests", &config, &[&bad, &good]);
    let o = done(&out);
    let errors = o["edit_errors"].as_array().expect("edit_errors in --json");
    assert_eq!(errors.len(), 1, "{o}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.starts_with("util.ts:2:") && error.contains("Cannot find name 'two'"),
        "{error}"
    );
    assert_eq!(requests.len(), 2, "{o}");
    assert!(
        std::fs::read_to_string(ws.path().join("util.ts"))
            .unwrap()
            .contains("x * 2"),
        "the next answer fixed it"
    );
}

/// gopls (Debian's 0.5.0, which scripts/test installs with apt since the Go module proxy is
/// not reachable from CI, and sets AGENT_LS_TEST_GOPLS), or None to skip where it or Go is
/// not installed.
fn gopls() -> Option<String> {
    let go = agent_ls_runtime::tests_run::command::on_path("go");
    match std::env::var("AGENT_LS_TEST_GOPLS") {
        Ok(p) if !p.is_empty() && go => Some(p),
        _ if std::env::var_os("AGENT_LS_REQUIRE_PROTOCOL_TESTS").is_some() => {
            panic!("AGENT_LS_TEST_GOPLS is not set or go is missing; scripts/test installs both")
        }
        _ => {
            eprintln!(
                "skipped: AGENT_LS_TEST_GOPLS is not set or go is missing (apt install gopls)"
            );
            None
        }
    }
}

#[test]
fn an_undefined_name_in_a_go_file_comes_back_from_gopls() {
    let Some(gopls) = gopls() else {
        return;
    };
    let ws = support::workspace(&[
        (
            ".agent-ls.toml",
            "[agent]\nevaluate = false\nreview = \"off\"\n",
        ),
        ("go.mod", "module example.com/calc\n\ngo 1.19\n"),
        (
            "calc.go",
            "package calc\n\nfunc Add(a, b int) int {\n\treturn a - b\n}\n",
        ),
        (
            "calc_test.go",
            "package calc\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 2) != 4 {\n\t\tt.Fatal(\"want 4\")\n\t}\n}\n",
        ),
    ]);
    let go = |from: &str, to: &str| {
        format!(
            "calc.go\n<<<<<<< SEARCH\n\treturn {from}\n=======\n\treturn {to}\n>>>>>>> REPLACE\n"
        )
    };
    // An edit that uses a name that does not exist, then its fix.
    let (bad, good) = (go("a - b", "a + c"), go("a + c", "a + b"));
    let config = format!(
        "[test]\ncommand = [\"go\", \"test\", \"./...\"]\n\n[lsp_servers]\nwait_ms = 120000\n\n[lsp_servers.servers.go]\ncommand = {}\npatterns = [\"*.go\"]\n",
        json!([gopls]),
    );
    let (out, requests) = run(ws.path(), "fix the failing test", &config, &[&bad, &good]);
    let o: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    assert_eq!(o["status"], "done", "{o}\n{}", stderr(&out));
    // `go test` without -v names no passed tests: no failure is the pass.
    assert_eq!(o["tests"]["failed"], 0, "{o}");
    assert_eq!(
        o["iterations"], 1,
        "the fix of the error is the same iteration: {o}"
    );
    let errors = o["edit_errors"].as_array().expect("edit_errors in --json");
    assert_eq!(errors.len(), 1, "{o}");
    let error = errors[0].as_str().unwrap();
    assert!(
        error.starts_with("calc.go:4:") && error.contains("undeclared name: c"),
        "{error}"
    );
    assert_eq!(requests.len(), 2, "{o}");
    // None of the tests ran between the bad edit and its fix.
    assert_eq!(kinds(ws.path()), FIXED_BEFORE_THE_TESTS, "{}", stderr(&out));
}
