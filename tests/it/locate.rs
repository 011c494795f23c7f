//! Fault localisation from the tests' own coverage, against the real runners: a bug several
//! calls below the failing test, whose traceback names only the test file, ranked first under
//! pytest, unittest, node's test runner, `go test` and `cargo test`; a runner agent-ls cannot trace says
//! which tool it lacks; and a run's coder reads the suspects in its first prompt.

use crate::support;

use std::path::Path;

use agent_ls_runtime::config::Config;
use agent_ls_runtime::locate::{LocateError, locate};
use serde_json::json;
use support::model_server::{ModelServer, openai_text};
use tokio_util::sync::CancellationToken;

/// A shop whose bulk discount rule is wrong: test → total → price_of → discount → rule_for.
fn shop(test_file: &str) -> tempfile::TempDir {
    support::workspace(&[
        ("shop/__init__.py", ""),
        (
            "shop/cart.py",
            "from shop.pricing import price_of\n\n\ndef total(items):\n    return sum(price_of(name, qty) for name, qty in items)\n",
        ),
        (
            "shop/pricing.py",
            "from shop.rules import rule_for\n\nPRICES = {\"apple\": 2, \"pear\": 3}\n\n\ndef price_of(name, qty):\n    unit = PRICES[name]\n    return unit * qty * discount(qty)\n\n\ndef discount(qty):\n    if qty >= 10:\n        return rule_for(qty)\n    return 1\n",
        ),
        (
            "shop/rules.py",
            "def rule_for(qty):\n    \"\"\"The bulk discount: a tenth off.\"\"\"\n    return 9\n",
        ),
        ("tests/__init__.py", ""),
        ("tests/test_cart.py", test_file),
        // pytest's header then names it (`configfile: pyproject.toml`): no place of the bug.
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n",
        ),
    ])
}

const PYTEST_TESTS: &str = "from shop.cart import total\n\n\ndef test_small():\n    assert total([(\"apple\", 1)]) == 2\n\n\ndef test_mixed():\n    assert total([(\"apple\", 2), (\"pear\", 1)]) == 7\n\n\ndef test_bulk():\n    assert total([(\"apple\", 10)]) == 18\n";

const UNITTEST_TESTS: &str = "import unittest\n\nfrom shop.cart import total\n\n\nclass Cart(unittest.TestCase):\n    def test_small(self):\n        self.assertEqual(total([(\"apple\", 1)]), 2)\n\n    def test_mixed(self):\n        self.assertEqual(total([(\"apple\", 2), (\"pear\", 1)]), 7)\n\n    def test_bulk(self):\n        self.assertEqual(total([(\"apple\", 10)]), 18)\n";

fn config(command: &[&str]) -> Config {
    let mut c = Config::default();
    c.test.command = command.iter().map(|w| w.to_string()).collect();
    c
}

/// `agent-ls run "fix the failing tests" --yes` in a trusted `ws` whose tests run with
/// `command` (and `extra` in its `[agent]`), the coder's answer fixing the rule: the outcome, stderr, and the model requests
/// the journal recorded.
fn run_with(ws: &Path, command: &[&str], extra: &str) -> (serde_json::Value, String, Vec<String>) {
    let fix =
        "shop/rules.py\n<<<<<<< SEARCH\n    return 9\n=======\n    return 0.9\n>>>>>>> REPLACE\n";
    run_fixing(ws, command, &command[..3].join(" "), extra, fix, &[])
}

/// `run_with` for any runner: `allowed` is the allowlist's entry, `fix` the coder's answer,
/// `env` what agent-ls is started with beside it.
fn run_fixing(
    ws: &Path,
    command: &[&str],
    allowed: &str,
    extra: &str,
    fix: &str,
    env: &[(&str, String)],
) -> (serde_json::Value, String, Vec<String>) {
    let quoted: Vec<String> = command.iter().map(|w| format!("{w:?}")).collect();
    std::fs::write(
        ws.join(".agent-ls.toml"),
        format!(
            "[agent]\nevaluate = false\nreview = \"off\"\n{extra}[test]\ncommand = [{}]\nallowlist = [{allowed:?}]\n",
            quoted.join(", "),
        ),
    )
    .unwrap();
    let server = ModelServer::start(vec![openai_text(&[fix])]);
    let home = tempfile::tempdir().unwrap();
    let trust = support::agent_ls(&["trust"], home.path())
        .arg(ws)
        .output()
        .unwrap();
    assert!(trust.status.success(), "{trust:?}");
    let out = support::cli(&["run", "fix the failing tests", "--yes"], ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let o: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {said}"));
    // What the model was sent, each request's messages as one text.
    let prompts = server
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string().replace("\\n", "\n"))
        .collect();
    (o, said, prompts)
}

#[test]
fn the_bug_below_the_failing_test_is_ranked_first_under_pytest_and_unittest() {
    let python = support::python();
    for (tests, command) in [
        (PYTEST_TESTS, vec![python.as_str(), "-m", "pytest", "-q"]),
        (PYTEST_TESTS, vec![python.as_str(), "-m", "pytest", "-v"]),
        (
            UNITTEST_TESTS,
            vec![
                python.as_str(),
                "-m",
                "unittest",
                "discover",
                "-s",
                "tests",
                "-t",
                ".",
            ],
        ),
    ] {
        let ws = shop(tests);
        let (o, said, prompts) = run_with(ws.path(), &command, "");
        let case = format!("{}: {o}\n{said}", command.join(" "));
        assert_eq!(o["status"], "done", "{case}");
        // The outcome (`--json`, MCP's `run`, the editor's runFinished) names them too.
        assert_eq!(o["suspects"][0]["name"], "rule_for", "{case}");
        assert_eq!(o["suspects"][0]["lines"], serde_json::json!([3]), "{case}");
        // Four calls below the test, named by no traceback: first all the same.
        assert!(
            said.contains("(1 failing, 2 passing) points first at shop/rules.py:1 rule_for"),
            "{case}"
        );
        // This interpreter has no coverage.py: agent-ls traced by itself, and says what lacked.
        assert!(
            said.contains("agent-ls's tracer (sys.") && said.contains("has no coverage.py"),
            "{case}"
        );
        // The coder read it first, the suspicious line marked, and no test file among them.
        let first = prompts
            .first()
            .unwrap_or_else(|| panic!("no request: {case}"));
        assert!(first.contains("Where the failing tests point"), "{case}");
        assert!(
            first.contains("1. shop/rules.py:1-3 `rule_for`: score 1.00"),
            "{first}"
        );
        assert!(first.contains(">    3|     return 9"), "{first}");
        assert!(!first.contains("tests/test_cart.py:4-5"), "{first}");
    }
}

/// An interpreter with coverage.py: its lines are collected by coverage.py (a context a test),
/// and the ranking is the same; also when the project measures its own coverage with
/// pytest-cov (`addopts = --cov=shop`), whose coverage would pause ours.
#[test]
fn with_coverage_py_in_the_interpreter_it_collects_the_lines() {
    let Ok(python) = std::env::var("AGENT_LS_TEST_PYTHON_COVERAGE") else {
        if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() {
            panic!("AGENT_LS_TEST_PYTHON_COVERAGE is not set; scripts/test sets it");
        }
        eprintln!("skipped: no Python with coverage.py (scripts/test makes .venv-coverage)");
        return;
    };
    let unittest = vec![
        python.as_str(),
        "-m",
        "unittest",
        "discover",
        "-s",
        "tests",
        "-t",
        ".",
    ];
    for (tests, command, cov) in [
        (
            PYTEST_TESTS,
            vec![python.as_str(), "-m", "pytest", "-q"],
            false,
        ),
        (
            PYTEST_TESTS,
            vec![python.as_str(), "-m", "pytest", "-q"],
            true,
        ),
        (UNITTEST_TESTS, unittest, false),
    ] {
        let ws = shop(tests);
        if cov {
            std::fs::write(
                ws.path().join("pyproject.toml"),
                "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\naddopts = \"--cov=shop\"\n",
            )
            .unwrap();
        }
        let (o, said, prompts) = run_with(ws.path(), &command, "");
        let case = format!("{}: {o}\n{said}", command.join(" "));
        assert_eq!(o["status"], "done", "{case}");
        assert_eq!(o["suspects"][0]["name"], "rule_for", "{case}");
        assert_eq!(o["suspects"][0]["lines"], json!([3]), "{case}");
        assert!(
            said.contains("(1 failing, 2 passing) points first at shop/rules.py:1 rule_for"),
            "{case}"
        );
        assert!(said.contains("; coverage.py 7.6.10)"), "{case}");
        assert!(
            prompts[0].contains(">    3|     return 9"),
            "{}",
            prompts[0]
        );
    }
}

#[test]
fn a_runner_agent_ls_cannot_trace_says_which_tool_it_lacks() {
    let ws = shop(PYTEST_TESTS);
    let root = ws.path().canonicalize().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let lacks = |command: &[&str]| {
        let err = rt
            .block_on(locate(&root, &config(command), &CancellationToken::new()))
            .unwrap_err();
        assert!(matches!(err, LocateError::NoTool { .. }), "{err}");
        err.to_string()
    };
    // Rust's coverage is read by the toolchain's own llvm-tools; without them, the fix named
    // (with them, `under_cargo_test_…` reads it).
    if !llvm_tools() {
        assert!(lacks(&["cargo", "test"]).contains(
            "Rust needs llvm-tools (rustup component add llvm-tools-preview) (the test command: `cargo test`)"
        ));
    }
    assert!(lacks(&["cargo", "nextest", "run"]).contains("not nextest's"));
    assert!(lacks(&["npx", "jest"]).contains("not jest's or vitest's"));
    assert!(
        lacks(&["make", "check"])
            .contains("pytest, unittest, `node --test`, `go test` and `cargo test` only")
    );
}

/// A fresh copy of `tests/fixtures/locate/NAME`.
fn fixture(name: &str) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                std::fs::create_dir_all(&target).unwrap();
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).unwrap();
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    copy(
        &support::repo("tests/fixtures/locate").join(name),
        dir.path(),
    );
    dir
}

/// Whether `tool` is here: scripts/test installs it and requires it
/// (AGENT_LS_REQUIRE_REAL_MODEL); a plain `cargo test` without it skips, saying so.
fn have(tool: &str) -> bool {
    if agent_ls_runtime::tests_run::command::on_path(tool) {
        return true;
    }
    if std::env::var("AGENT_LS_REQUIRE_REAL_MODEL").is_ok() {
        panic!("{tool} is missing; scripts/test installs it");
    }
    eprintln!("skipped: {tool} is not installed (scripts/test installs it)");
    false
}

/// The shop's run under `command`: the suspect named first is `function` in `file` (`lines`
/// marked: V8 and Go count blocks, not statements, so a block's every line), though the failing test's stack names only the test file; the coder's fix
/// then makes the tests pass.
fn ranks_first(
    ws: &Path,
    command: &[&str],
    fix: &str,
    (file, function, lines): (&str, &str, &[u32]),
    env: &[(&str, String)],
) {
    let (o, said, prompts) = run_fixing(ws, command, &command[..2].join(" "), "", fix, env);
    let case = format!("{}: {o}\n{said}", command.join(" "));
    assert_eq!(o["status"], "done", "{case}");
    assert_eq!(o["suspects"][0]["path"], file, "{case}");
    assert_eq!(o["suspects"][0]["name"], function, "{case}");
    assert_eq!(o["suspects"][0]["lines"], json!(lines), "{case}");
    assert!(
        said.contains(&format!("(1 failing, 2 passing) points first at {file}:")),
        "{case}"
    );
    let first = prompts
        .first()
        .unwrap_or_else(|| panic!("no request: {case}"));
    assert!(first.contains("Where the failing tests point"), "{case}");
    assert!(
        first.contains(&format!("`{function}`: score 1.00")),
        "{first}"
    ); // What the coverage runs cost, for docs/locate.md (`--nocapture` shows it).
    if let Some(line) = said.lines().find(|l| l.contains("points first at")) {
        eprintln!("{}: {line}", command.join(" "));
    }
}

#[test]
fn under_nodes_test_runner_the_bug_below_the_failing_test_is_ranked_first() {
    if !have("node") {
        return;
    }
    let ws = fixture("node");
    let fix =
        "src/rules.js\n<<<<<<< SEARCH\n  return 9;\n=======\n  return 0.9;\n>>>>>>> REPLACE\n";
    // `npm test` runs the package.json script, `node --test`, which coverage runs read.
    ranks_first(
        ws.path(),
        &["npm", "test"],
        fix,
        ("src/rules.js", "ruleFor", &[1, 2, 3, 4]),
        &[],
    );
}

#[test]
fn under_go_test_the_bug_in_another_package_is_ranked_first() {
    if !have("go") {
        return;
    }
    let ws = fixture("go");
    let fix =
        "rules/rules.go\n<<<<<<< SEARCH\n\treturn 80\n=======\n\treturn 90\n>>>>>>> REPLACE\n";
    ranks_first(
        ws.path(),
        &["go", "test", "./..."],
        fix,
        ("rules/rules.go", "RuleFor", &[4, 5, 6]),
        &[],
    );
}

/// Whether the toolchain's llvm-tools are here: scripts/test adds them with rustup when it
/// can (and then says so with AGENT_LS_REQUIRE_LLVM_TOOLS); without them the test says what a
/// user is told instead.
fn llvm_tools() -> bool {
    let sysroot = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .unwrap();
    let rustlib = Path::new(String::from_utf8_lossy(&sysroot.stdout).trim()).join("lib/rustlib");
    let here = std::fs::read_dir(rustlib)
        .unwrap()
        .flatten()
        .any(|host| host.path().join("bin/llvm-cov").is_file());
    if !here && std::env::var("AGENT_LS_REQUIRE_LLVM_TOOLS").is_ok() {
        panic!("llvm-tools are missing; scripts/test added them");
    }
    here
}

#[test]
fn under_cargo_test_the_bug_in_another_module_is_ranked_first_from_integration_and_unit_tests() {
    if !llvm_tools() {
        eprintln!("skipped: the toolchain has no llvm-tools (rustup component add llvm-tools)");
        return;
    }
    let ws = fixture("rust");
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{real_home}/.cargo"));
    let rustup_home =
        std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{real_home}/.rustup"));
    let writable = json!([cargo_home, rustup_home]).to_string();
    let fix = "src/rules.rs\n<<<<<<< SEARCH\n    80\n=======\n    90\n>>>>>>> REPLACE\n";
    let env = [
        ("CARGO_HOME", cargo_home),
        ("RUSTUP_HOME", rustup_home),
        ("AGENT_LS_SANDBOX__WRITABLE", writable),
    ];
    ranks_first(
        ws.path(),
        &["cargo", "test", "--offline"],
        fix,
        ("src/rules.rs", "rule_for", &[2, 3, 4]),
        &env,
    );
    // The instrumented build is agent-ls's own, beside the user's.
    assert!(ws.path().join(".agent-ls/locate-target").is_dir());

    // The same tests as unit tests beside the code (`#[cfg(test)] mod tests` in src/cart.rs):
    // the failed assertion's place is a source file, and still no place of the bug; the
    // test's own body is no suspect.
    let ws = fixture("rust");
    std::fs::remove_file(ws.path().join("tests/cart.rs")).unwrap();
    let cart = ws.path().join("src/cart.rs");
    let mut text = std::fs::read_to_string(&cart).unwrap();
    text.push_str("\n#[cfg(test)]\nmod tests {\n    use super::total;\n\n    #[test]\n    fn small() {\n        assert_eq!(total(&[(\"apple\", 1)]), 20);\n    }\n\n    #[test]\n    fn mixed() {\n        assert_eq!(total(&[(\"apple\", 2), (\"pear\", 1)]), 70);\n    }\n\n    #[test]\n    fn bulk() {\n        assert_eq!(total(&[(\"apple\", 10)]), 180);\n    }\n}\n");
    std::fs::write(&cart, text).unwrap();
    ranks_first(
        ws.path(),
        &["cargo", "test", "--offline"],
        fix,
        ("src/rules.rs", "rule_for", &[2, 3, 4]),
        &env,
    );
}

/// The report names places of the project's own, and still not the bug: its warnings summary
/// names the line that warns (`shop/cart.py:5: DeprecationWarning`), and a second failing test
/// crashes in `price_of` (a KeyError for a fruit the shop does not sell) while `test_bulk`
/// fails on its assertion. One failure that points at no project code is enough to look:
/// both used to skip the localisation.
#[test]
fn a_crash_and_a_warning_in_the_project_beside_a_failing_assertion_still_localise() {
    let ws = shop(&format!(
        "{PYTEST_TESTS}\n\ndef test_kiwi():\n    assert total([(\"kiwi\", 1)]) == 0\n"
    ));
    std::fs::write(
        ws.path().join("shop/cart.py"),
        "import warnings\nfrom shop.pricing import price_of\n\n\ndef total(items):\n    warnings.warn(\"total() will take a dict\", DeprecationWarning)\n    return sum(price_of(name, qty) for name, qty in items)\n",
    )
    .unwrap();
    let python = support::python();
    let (o, said, prompts) = run_with(ws.path(), &[python.as_str(), "-m", "pytest"], "");
    assert!(
        said.contains("finding where the failing tests point"),
        "{said}"
    );
    assert!(
        said.contains("(2 failing, 2 passing) points first at"),
        "{said}"
    );
    // Two failures, two places: the rule is among the suspects, its line marked.
    let names: Vec<&str> = o["suspects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .collect();
    assert!(names.contains(&"rule_for"), "{o}");
    assert!(
        prompts[0].contains(">    3|     return 9"),
        "{}",
        prompts[0]
    );
    // The KeyError's stack passes through price_of: combined with the coverage, it is marked.
    let price_of = o["suspects"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == "price_of")
        .unwrap_or_else(|| panic!("{o}"));
    assert_eq!(price_of["on_path"], true, "{o}");
    assert!(
        prompts[0].contains(", on a failing test's stack;"),
        "{}",
        prompts[0]
    );
}

#[test]
fn turned_off_the_prompt_has_no_suspects() {
    let ws = shop(PYTEST_TESTS);
    let python = support::python();
    let command = [python.as_str(), "-m", "pytest", "-q"];
    let (o, said, prompts) = run_with(ws.path(), &command, "locate = false\n");
    assert_eq!(o["status"], "done", "{said}");
    assert!(
        !said.contains("finding where the failing tests point"),
        "{said}"
    );
    assert!(!prompts[0].contains("Where the failing tests point"));
}

#[test]
fn in_the_editor_an_unsolved_runs_suspects_are_hints_on_their_functions() {
    use support::{Client, Spawn, file_uri};
    let ws = shop(PYTEST_TESTS);
    let root = ws.path().canonicalize().unwrap();
    // A first answer that changes nothing that matters; then the script has no more, and the
    // run ends failed with the bug where it was.
    let wrong = json!({"role": "coder", "content": "shop/cart.py\n<<<<<<< SEARCH\ndef total(items):\n=======\ndef total(items):\n    \"\"\"The order's total.\"\"\"\n>>>>>>> REPLACE\n"});
    std::fs::write(root.join(".replay.jsonl"), support::replay_script(&[wrong])).unwrap();
    let python = support::python();
    let options = json!({
        "model": {"provider": "replay", "replay_file": ".replay.jsonl"},
        "agent": {"approval": "auto", "evaluate": false, "review": "off"},
        "test": {"command": [python, "-m", "pytest", "-q"]}
    });
    let mut c = Client::spawn(Spawn::default());
    c.initialize(
        &root,
        json!({"workspace": {"workspaceEdit": {"documentChanges": true}}}),
        options,
    );
    let buffers: support::editor::Buffers = Default::default();
    support::editor::applies(&mut c, buffers, Vec::new());
    c.command("agent-ls.fixTests", serde_json::Value::Null)
        .unwrap();
    let done = c.wait_notification("agent-ls/runFinished", |_| true);
    assert_eq!(done["status"], "failed", "{done}\n{}", c.stderr());
    assert_eq!(done["suspects"][0]["name"], "rule_for", "{done}");
    let rules = file_uri(&root.join("shop/rules.py"));
    let hints = c.wait_notification("textDocument/publishDiagnostics", |p| {
        p["uri"] == rules.as_str()
            && p["diagnostics"]
                .as_array()
                .is_some_and(|d| d.iter().any(|d| d["source"] == "agent-ls locate"))
    });
    let hint = hints["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["source"] == "agent-ls locate")
        .unwrap()
        .clone();
    assert_eq!(hint["severity"], 4, "{hint}");
    assert_eq!(hint["range"]["start"]["line"], 0, "{hint}");
    assert!(
        hint["message"]
            .as_str()
            .unwrap()
            .contains("`rule_for` was executed by 1 failing test(s) and 0 passing"),
        "{hint}"
    );
}
