//! The tester role through `agent-ls run --json`, the real binary over a scripted
//! OpenAI-compatible server on 127.0.0.1, on a small pytest project whose `parse` drops the
//! last field of a line that ends with a comma and whose one test passes: the tester's tests
//! are written, run three times for real, kept only when they fail for the reason named, and
//! proposed as their own change; then the coder fixes the bug. Property tests too: a
//! Hypothesis property on that project, and a proptest property on a Rust fixture
//! (tests/fixtures/projects/rust_prop, built offline), whose shrunk counterexamples become
//! example tests, and whose library is installed only with approval.

use crate::support;

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use support::model_server::{ModelServer, openai_text};

const PARSE: &str = "def parse(line):\n    \"\"\"Splits a comma-separated line into its fields.\"\"\"\n    fields = line.split(\",\")\n    if line.endswith(\",\"):\n        fields = fields[:-1]\n    return fields\n";

const OLD_TEST: &str = "from csvline import parse\n\n\ndef test_two_fields():\n    assert parse(\"a,b\") == [\"a\", \"b\"]\n";

/// The coder's fix: the trailing empty field stays.
const FIX: &str = "csvline.py\n<<<<<<< SEARCH\n    fields = line.split(\",\")\n    if line.endswith(\",\"):\n        fields = fields[:-1]\n    return fields\n=======\n    return line.split(\",\")\n>>>>>>> REPLACE\n";

const BUG: &str = "fix: parse drops the last field when the line ends with a comma";

/// The pytest project, with `tester` settings in its configuration (no review, no
/// evaluator: the script plays the tester and the coder only).
fn project(tester: &str) -> tempfile::TempDir {
    support::workspace(&[
        ("csvline.py", PARSE),
        ("tests/test_csvline.py", OLD_TEST),
        (
            ".agent-ls.toml",
            &format!("[agent]\nevaluate = false\nreview = \"off\"\n\n[tester]\n{tester}"),
        ),
    ])
}

/// The tester's answer: one test in `tests/test_trailing.py` with this body and `expect`.
fn tester(body: &str, expect: &str) -> String {
    let content = format!("from csvline import parse\n\n\ndef test_trailing_comma():\n{body}");
    json!({"tests": [{"path": "tests/test_trailing.py", "name": "test_trailing_comma",
        "kind": "example", "reason": "a line ending with a comma has an empty last field",
        "expect": expect, "content": content}]})
    .to_string()
}

const EXPECT: &str = "assert ['a', 'b'] == ['a', 'b', '']";

/// A test that passes on the buggy code.
fn passing_test() -> String {
    tester("    assert parse(\"a,b\") == [\"a\", \"b\"]\n", EXPECT)
}

/// The right test, importing a module that does not exist.
fn import_error_test() -> String {
    let content = "from csvlinex import parse\n\n\ndef test_trailing_comma():\n    assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n";
    json!({"tests": [{"path": "tests/test_trailing.py", "name": "test_trailing_comma",
        "kind": "example", "reason": "r", "expect": EXPECT, "content": content}]})
    .to_string()
}

fn good_test() -> String {
    tester(
        "    assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n",
        EXPECT,
    )
}

/// `agent-ls run GOAL --yes --json` (and `extra`) against a server that answers `replies` in
/// order; the outcome, once it exited `code`, and the requests the server got.
fn run(
    ws: &Path,
    goal: &str,
    extra: &[&str],
    replies: &[String],
    code: i32,
) -> (Value, ModelServer) {
    let server = ModelServer::start(replies.iter().map(|r| openai_text(&[r])).collect());
    let home = tempfile::tempdir().unwrap();
    // Hypothesis's pytest plugin imports Hypothesis at every pytest start, a second and more
    // of CPU per run here; only a run whose tester writes a property needs it.
    let mut command = vec![
        support::python_with_hypothesis(),
        "-m".into(),
        "pytest".into(),
        "-q".into(),
    ];
    command.extend(["-p".into(), "no:cacheprovider".into()]);
    if !replies.iter().any(|r| r.contains("from hypothesis")) {
        command.extend(["-p".into(), "no:hypothesispytest".into()]);
    }
    let command = json!(command);
    let out: Output = support::cli(&[&["run", goal, "--yes"], extra].concat(), ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENT_LS_TEST__COMMAND", command.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}\nstderr {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(out.status.code(), Some(code), "{v}\nstderr {stderr}");
    (v, server)
}

fn read(ws: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(ws.join(path)).ok()
}

/// What the `n`th model call was told last (its last message).
fn told(server: &ModelServer, n: usize) -> String {
    let requests = server.requests();
    let messages = requests[n].body["messages"].as_array().unwrap().clone();
    messages.last().unwrap()["content"].to_string()
}

#[test]
fn a_described_bug_gets_a_test_that_fails_for_its_reason_first_then_the_fix() {
    let ws = project("");
    let replies = [
        passing_test(),
        import_error_test(),
        good_test(),
        FIX.to_string(),
    ];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 0);
    assert_eq!(o["status"], "done", "{o}");
    let t = &o["tester"];
    assert_eq!(t["mode"], "reproduce", "{t}");
    assert_eq!(t["status"], "kept", "{t}");
    assert_eq!(t["attempts"], 3, "{t}");
    let refused = t["refused"].as_array().unwrap();
    assert!(
        refused[0]
            .as_str()
            .unwrap()
            .contains("passes on the code with the bug"),
        "{t}"
    );
    assert!(refused[1].as_str().unwrap().contains("import error"), "{t}");
    assert_eq!(t["tests"][0]["path"], "tests/test_trailing.py");
    assert_eq!(t["tests"][0]["expect"], EXPECT);
    assert_eq!(t["ran"]["before"]["state"], "failed", "{t}");
    assert_eq!(t["ran"]["before"]["runs"], 3, "{t}");
    assert!(
        t["ran"]["before"]["message"]
            .as_str()
            .unwrap()
            .contains("AssertionError"),
        "{t}"
    );
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    // The tester heard why each test was refused, with the run's output.
    let second = told(&server, 1);
    assert!(
        second.contains("passes on the code with the bug"),
        "{second}"
    );
    let third = told(&server, 2);
    assert!(third.contains("ModuleNotFoundError"), "{third}");
    // The kept test is on disk, and the fix; the refused ones left nothing behind.
    assert!(
        read(ws.path(), "tests/test_trailing.py")
            .unwrap()
            .contains("parse(\"a,b,\")")
    );
    assert!(
        read(ws.path(), "csvline.py")
            .unwrap()
            .contains("return line.split(\",\")")
    );
    // Two changes, the test's alone first.
    let patches: Vec<Value> = support::journaled(ws.path(), "patch")
        .iter()
        .map(|p| p["data"]["files"].clone())
        .collect();
    assert_eq!(
        patches,
        [json!(["tests/test_trailing.py"]), json!(["csvline.py"])]
    );
    assert_eq!(support::journaled(ws.path(), "approval").len(), 2);
    // Each verdict is journaled, the last with the run after the fix.
    let records = support::journaled(ws.path(), "tester");
    let statuses: Vec<&str> = records
        .iter()
        .map(|r| r["data"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["refused", "refused", "kept", "kept"],
        "{records:?}"
    );
    assert_eq!(records[3]["role"], "tester");
    assert_eq!(records[3]["data"]["ran"]["after"]["state"], "passed");
}

#[test]
fn a_flaky_test_is_rejected_and_counts_as_an_attempt() {
    let ws = project("");
    // Fails on its first and third runs, passes on the second: a test whose result depends
    // on more than the code.
    let flaky = tester(
        "    import os\n    count = os.path.join(os.path.dirname(__file__), \".runs\")\n    n = int(open(count).read()) if os.path.exists(count) else 0\n    open(count, \"w\").write(str(n + 1))\n    if n % 2 == 0:\n        assert parse(\"a,b,\") == [\"a\", \"b\", \"\"]\n",
        EXPECT,
    );
    let replies = [flaky, good_test(), FIX.to_string()];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 0);
    let t = &o["tester"];
    assert_eq!(
        (t["status"].as_str(), t["attempts"].as_u64()),
        (Some("kept"), Some(2)),
        "{t}"
    );
    let why = t["refused"][0].as_str().unwrap();
    assert!(
        why.contains("flaky") && why.contains("failed, passed, failed"),
        "{why}"
    );
    assert!(told(&server, 1).contains("flaky"));
    assert_eq!(o["status"], "done", "{o}");
}

#[test]
fn when_the_attempts_are_spent_the_run_stops_and_keeps_no_test() {
    let ws = project("max_attempts = 2\n");
    // The first in a folder of its own, which the trial makes and removes.
    let in_new_folder =
        passing_test().replace("tests/test_trailing.py", "tests/unit/test_trailing.py");
    let replies = [in_new_folder, import_error_test()];
    let (o, server) = run(ws.path(), BUG, &[], &replies, 1);
    assert_eq!(o["status"], "failed", "{o}");
    let answer = o["answer"].as_str().unwrap();
    assert!(
        answer.contains("could not be reproduced") && answer.contains("tester.max_attempts"),
        "{answer}"
    );
    assert_eq!(o["tester"]["status"], "exhausted", "{o}");
    assert_eq!(o["tester"]["attempts"], 2);
    // No test kept, no coder call, the code as it was.
    assert_eq!(read(ws.path(), "tests/test_trailing.py"), None);
    assert!(
        !ws.path().join("tests/unit").exists(),
        "the trial's folder stays"
    );
    assert_eq!(read(ws.path(), "csvline.py").unwrap(), PARSE);
    assert_eq!(server.count(), 2);
    assert!(o["files_changed"].as_array().unwrap().is_empty());
}

#[test]
fn reproduce_makes_a_test_first_for_any_goal() {
    let ws = project("");
    let (o, _) = run(
        ws.path(),
        "parse and trailing commas",
        &["--reproduce"],
        &[good_test(), FIX.to_string()],
        0,
    );
    assert_eq!(o["tester"]["status"], "kept", "{o}");
    assert_eq!(o["status"], "done", "{o}");
    assert!(read(ws.path(), "tests/test_trailing.py").is_some());
}

#[test]
fn after_a_change_no_test_covered_a_regression_test_must_fail_before_and_pass_after() {
    let ws = project("after_fix = \"always\"\n");
    // The first test passes on the code before the change too: it tells nothing apart.
    let replies = [FIX.to_string(), passing_test(), good_test()];
    let goal = "change parse to keep the empty last field of a line ending with a comma";
    let (o, server) = run(ws.path(), goal, &[], &replies, 0);
    assert_eq!(o["status"], "done", "{o}");
    let t = &o["tester"];
    assert_eq!(
        (t["mode"].as_str(), t["status"].as_str()),
        (Some("after_fix"), Some("kept")),
        "{t}"
    );
    assert_eq!(t["ran"]["before"]["state"], "failed", "{t}");
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    assert!(
        t["refused"][0]
            .as_str()
            .unwrap()
            .contains("passes on the code with the bug"),
        "{t}"
    );
    // The tester saw the change it writes the test for.
    let first = server.requests()[1].body["messages"].to_string();
    assert!(first.contains("return line.split"), "{first}");
    // The fix stays, the code before it was put back after the trials, and the test is its
    // own change after the fix's.
    assert!(
        read(ws.path(), "csvline.py")
            .unwrap()
            .contains("return line.split(\",\")")
    );
    assert!(read(ws.path(), "tests/test_trailing.py").is_some());
    let patches: Vec<Value> = support::journaled(ws.path(), "patch")
        .iter()
        .map(|p| p["data"]["files"].clone())
        .collect();
    assert_eq!(
        patches,
        [json!(["csvline.py"]), json!(["tests/test_trailing.py"])]
    );
}

/// A Hypothesis property of `parse` (joining its fields gives the line back), on generated
/// lines of `a`, `b` and commas; no deadline, since this machine's load is not the bug.
fn hypothesis_property() -> String {
    let content = "from hypothesis import given, settings, strategies as st\n\nfrom csvline import parse\n\n\n@settings(deadline=None)\n@given(st.text(alphabet=\"ab,\"))\ndef test_round_trip(s):\n    assert \",\".join(parse(s)) == s\n";
    json!({"tests": [{"path": "tests/test_round_trip.py", "name": "test_round_trip",
        "kind": "property", "reason": "joining the fields must give the line back",
        "expect": "AssertionError", "content": content}]})
    .to_string()
}

#[test]
fn a_hypothesis_property_finds_a_counterexample_that_becomes_an_example_test() {
    let ws = project("");
    let (o, server) = run(
        ws.path(),
        BUG,
        &[],
        &[hypothesis_property(), FIX.to_string()],
        0,
    );
    assert_eq!(o["status"], "done", "{o}");
    let t = &o["tester"];
    assert_eq!(t["status"], "kept", "{t}");
    assert_eq!(t["attempts"], 1, "{t}");
    let tests = t["tests"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = tests
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("test_round_trip", "property"),
            ("test_round_trip_example", "example")
        ]
    );
    // Hypothesis shrinks the failing line to its smallest: one comma, which the answer
    // reports.
    assert_eq!(tests[0]["counterexample"], "s=','", "{t}");
    let answer = o["answer"].as_str().unwrap();
    assert!(
        answer.contains("the counterexample of test_round_trip: s=','"),
        "{answer}"
    );
    assert_eq!(t["ran"]["before"]["state"], "failed", "{t}");
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    // The example test is in the property's file, on disk, and passes with the fix.
    let file = read(ws.path(), "tests/test_round_trip.py").unwrap();
    assert!(
        file.contains("def test_round_trip_example():\n")
            && file.contains("test_round_trip.hypothesis.inner_test(s=',')"),
        "{file}"
    );
    // One model call for the tester, one for the coder: the example is the loop's.
    assert_eq!(server.count(), 2);
    let patches: Vec<Value> = support::journaled(ws.path(), "patch")
        .iter()
        .map(|p| p["data"]["files"].clone())
        .collect();
    assert_eq!(
        patches,
        [json!(["tests/test_round_trip.py"]), json!(["csvline.py"])]
    );
    let kept = support::journaled(ws.path(), "tester");
    assert_eq!(kept[0]["data"]["tests"][0]["kind"], "property");
    assert_eq!(kept[0]["data"]["tests"][1]["kind"], "example");
}

/// A Rust property whose example test the loop cannot make: the property must name the
/// plain function it calls (`check`), and the answer without it is sent back.
const ROUND_TRIP_RS: &str = "//! Joining parse's fields gives the line back.\n\nuse fixture_rust_prop::parse;\nuse proptest::prelude::*;\n\nfn check_round_trip(s: &str) {\n    assert_eq!(parse(s).join(\",\"), s);\n}\n\nproptest! {\n    #[test]\n    fn round_trip(s in \"[ab,]{0,6}\") {\n        check_round_trip(&s);\n    }\n}\n";

const RUST_FIX: &str = "src/lib.rs\n<<<<<<< SEARCH\n    let mut fields: Vec<String> = line.split(',').map(str::to_string).collect();\n    if line.ends_with(',') {\n        fields.pop();\n    }\n    fields\n=======\n    line.split(',').map(str::to_string).collect()\n>>>>>>> REPLACE\n";

/// The Rust fixture (tests/fixtures/projects/rust_prop: a committed Cargo.lock that has
/// proptest) in a temporary folder, without its `[dev-dependencies]`: the tester's property
/// needs proptest installed.
fn rust_project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/projects/rust_prop");
    for file in ["Cargo.toml", "Cargo.lock", "src/lib.rs"] {
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from.join(file), to).unwrap();
    }
    let manifest = std::fs::read_to_string(from.join("Cargo.toml")).unwrap();
    let without = manifest.replace("[dev-dependencies]\nproptest = \"1.12\"\n", "");
    assert_ne!(without, manifest, "the fixture's dev-dependencies changed");
    std::fs::write(dir.path().join("Cargo.toml"), without).unwrap();
    std::fs::write(
        dir.path().join(".agent-ls.toml"),
        "[agent]\nevaluate = false\nreview = \"off\"\n",
    )
    .unwrap();
    dir
}

/// The tester's proptest property of `parse` in `tests/round_trip.rs`, naming its `check`.
fn proptest_property(check: Option<&str>) -> String {
    let mut t = json!({"path": "tests/round_trip.rs", "name": "round_trip",
        "kind": "property", "reason": "joining the fields must give the line back",
        "expect": "assertion `left == right` failed", "content": ROUND_TRIP_RS});
    if let Some(c) = check {
        t["check"] = json!(c);
    }
    json!({"tests": [t]}).to_string()
}

/// `agent-ls run BUG` and `args` on the Rust fixture, against a server that answers
/// `replies`, with no terminal to ask on: the outcome, the server, and what it said on
/// stderr.
fn rust_run(ws: &Path, replies: &[String], args: &[&str]) -> (Value, ModelServer, String) {
    let server = ModelServer::start(replies.iter().map(|r| openai_text(&[r])).collect());
    let home = tempfile::tempdir().unwrap();
    // Offline, from the machine's cargo registry (scripts/test fetches the fixture's
    // dependencies), into one target folder the runs share, so proptest builds once.
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fixture-rust-prop");
    std::fs::create_dir_all(&target).unwrap();
    let command = json!(["cargo", "test", "--offline", "--target-dir", target]);
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cargo_home = std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{real_home}/.cargo"));
    let rustup_home =
        std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{real_home}/.rustup"));
    let writable = json!([target, cargo_home, rustup_home]);
    let out = support::cli(&[&["run", BUG], args].concat(), ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENT_LS_TEST__COMMAND", command.to_string())
        .env("AGENT_LS_TEST__TIMEOUT_SECS", "600")
        .env("AGENT_LS_SANDBOX__WRITABLE", writable.to_string())
        .env("CARGO_HOME", &cargo_home)
        // `cargo add` picks proptest's version from the registry's local copy.
        .env("CARGO_NET_OFFLINE", "true")
        .env("RUSTUP_HOME", &rustup_home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let o: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {:?}\nstderr {stderr}", out.stdout));
    (o, server, stderr)
}

#[test]
fn a_proptest_property_in_a_rust_fixture_gets_proptest_installed_and_an_example_test() {
    let ws = rust_project();
    // The repository's cargo configuration names a registry of its own for `cargo add`
    // (`cargo test` does not use it): the install, which runs outside the sandbox, must not
    // read the workspace's configuration, so it does not run in the workspace.
    std::fs::create_dir(ws.path().join(".cargo")).unwrap();
    std::fs::write(
        ws.path().join(".cargo/config.toml"),
        "[registry]\ndefault = \"the-repository-s-own\"\n",
    )
    .unwrap();
    let replies = [
        proptest_property(None),
        proptest_property(Some("check_round_trip")),
        RUST_FIX.to_string(),
    ];
    let (o, server, stderr) = rust_run(ws.path(), &replies, &["--yes"]);
    assert_eq!(o["status"], "done", "{o}\nstderr {stderr}");
    // proptest was missing: `cargo add --dev proptest` ran, approved by --yes.
    assert!(
        stderr.contains("installing it (--yes): cargo add --dev proptest"),
        "{stderr}"
    );
    let manifest = read(ws.path(), "Cargo.toml").unwrap();
    assert!(
        manifest.contains("[dev-dependencies]\nproptest = "),
        "{manifest}"
    );
    let t = &o["tester"];
    assert_eq!(t["status"], "kept", "{t}");
    // The answer without `check` was sent back once, and did not count as an attempt.
    assert_eq!(t["attempts"], 1, "{t}");
    assert!(told(&server, 1).contains("check"), "{}", told(&server, 1));
    assert_eq!(t["tests"][0]["kind"], "property", "{t}");
    assert_eq!(t["tests"][0]["counterexample"], "\",\"", "{t}");
    assert_eq!(t["tests"][1]["name"], "round_trip_example", "{t}");
    assert_eq!(t["tests"][1]["kind"], "example", "{t}");
    assert_eq!(t["ran"]["after"]["state"], "passed", "{t}");
    let file = read(ws.path(), "tests/round_trip.rs").unwrap();
    assert!(
        file.contains("#[test]\nfn round_trip_example() {\n    check_round_trip(\",\");\n}"),
        "{file}"
    );
    assert!(
        read(ws.path(), "src/lib.rs")
            .unwrap()
            .contains("line.split(',').map(str::to_string).collect()")
    );
}

#[test]
fn a_property_library_the_user_did_not_approve_is_not_installed() {
    let ws = rust_project();
    let manifest = read(ws.path(), "Cargo.toml").unwrap();
    with_tester_settings(ws.path(), "max_attempts = 1\n");
    // No --yes and no terminal to ask on: proptest is not installed, and the property,
    // never tried, is refused; with one attempt allowed the run stops.
    let (o, server, stderr) = rust_run(
        ws.path(),
        &[proptest_property(Some("check_round_trip"))],
        &[],
    );
    assert_eq!(o["status"], "failed", "{o}\nstderr {stderr}");
    assert!(stderr.contains("use --yes to install it"), "{stderr}");
    let t = &o["tester"];
    assert_eq!(t["status"], "exhausted", "{t}");
    let why = t["refused"][0].as_str().unwrap();
    assert!(
        why.contains("proptest is not installed")
            && why.contains("`cargo add --dev proptest --manifest-path ")
            && why.contains("was not approved"),
        "{why}"
    );
    assert_eq!(read(ws.path(), "Cargo.toml").unwrap(), manifest);
    assert_eq!(read(ws.path(), "tests/round_trip.rs"), None);
    assert_eq!(server.count(), 1);
}

/// Adds a `[tester]` section with `settings` to the workspace's .agent-ls.toml.
fn with_tester_settings(ws: &Path, settings: &str) {
    let config = ws.join(".agent-ls.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("\n[tester]\n{settings}"));
    std::fs::write(&config, text).unwrap();
}

#[test]
fn tester_install_false_installs_nothing_even_with_yes() {
    let ws = rust_project();
    let manifest = read(ws.path(), "Cargo.toml").unwrap();
    with_tester_settings(ws.path(), "max_attempts = 1\ninstall = false\n");
    let replies = [proptest_property(Some("check_round_trip"))];
    let (o, _, stderr) = rust_run(ws.path(), &replies, &["--yes"]);
    assert_eq!(o["status"], "failed", "{o}\nstderr {stderr}");
    let why = o["tester"]["refused"][0].as_str().unwrap();
    assert!(why.contains("tester.install = false"), "{why}");
    assert!(!stderr.contains("installing it"), "{stderr}");
    assert_eq!(read(ws.path(), "Cargo.toml").unwrap(), manifest);
}

/// A unittest project (`add` subtracts) whose tests run with `python`, with one attempt for
/// the tester, plus `files`.
fn calc_project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let calc = [
        ("calc.py", "def add(a, b):\n    return a - b\n"),
        (
            "test_calc.py",
            "import unittest\n\nfrom calc import add\n\n\nclass T(unittest.TestCase):\n    def test_zero(self):\n        self.assertEqual(add(1, 0), 1)\n",
        ),
        (
            ".agent-ls.toml",
            "[agent]\nevaluate = false\nreview = \"off\"\n\n[tester]\nmax_attempts = 1\n",
        ),
    ];
    support::workspace(&[&calc[..], files].concat())
}

/// The tester's Hypothesis property of `add`.
fn add_property() -> String {
    let content = "from hypothesis import given, strategies as st\n\nfrom calc import add\n\n\n@given(st.integers(), st.integers())\ndef test_add_commutes(a, b):\n    assert add(a, b) == a + b\n";
    json!({"tests": [{"path": "test_props.py", "name": "test_add_commutes",
        "kind": "property", "reason": "add must sum", "expect": "AssertionError",
        "content": content}]})
    .to_string()
}

/// A fresh virtual environment without pip: its Python has no Hypothesis, whatever the
/// machine's Python has, and installs nothing offline.
fn bare_venv() -> (tempfile::TempDir, std::path::PathBuf) {
    let venv = tempfile::tempdir().unwrap();
    let made = std::process::Command::new(support::python())
        .args(["-m", "venv", "--without-pip"])
        .arg(venv.path())
        .status()
        .unwrap();
    assert!(made.success());
    let python = venv.path().join("bin/python3");
    (venv, python)
}

/// `agent-ls run BUG` and `args` on `ws`, its tests run by `python -m unittest`, the model
/// answering the tester's `add_property` once, with no terminal to ask on and `tmp` as the
/// temporary folder (which the sandbox lets commands write): the outcome and its stderr.
fn calc_run(ws: &Path, python: &Path, args: &[&str], tmp: &Path) -> (Value, String) {
    let server = ModelServer::start(vec![openai_text(&[&add_property()])]);
    let home = tempfile::tempdir().unwrap();
    let command = json!([python, "-m", "unittest"]);
    let out = support::cli(&[&["run", BUG], args].concat(), ws, home.path())
        .env("AGENT_LS_MODEL__PROVIDER", "openai")
        .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
        .env("OPENAI_API_KEY", "test-key")
        .env("AGENT_LS_TEST__COMMAND", command.to_string())
        .env("TMPDIR", tmp)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let o: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: stdout {:?}\nstderr {stderr}", out.stdout));
    (o, stderr)
}

/// The approved `python -m pip install hypothesis` runs outside the sandbox, so it must run
/// pip, not a `pip.py` the repository put in the workspace (which `-m` would find first from
/// there): it runs isolated, from `/`.
#[test]
fn an_approved_install_runs_pip_not_a_pip_py_in_the_workspace() {
    let hostile = "import os\n\nwith open(os.path.join(os.path.dirname(os.path.abspath(__file__)), \"PWNED\"), \"w\") as f:\n    f.write(\"pip.py ran\")\n";
    let ws = calc_project(&[("pip.py", hostile)]);
    let (_venv, python) = bare_venv();
    let tmp = tempfile::tempdir().unwrap();
    let (o, stderr) = calc_run(ws.path(), &python, &["--yes"], tmp.path());
    assert!(
        !ws.path().join("PWNED").exists(),
        "the workspace's pip.py ran: {stderr}"
    );
    assert!(
        stderr.contains("installing hypothesis: ") && stderr.contains("-I -m pip install"),
        "the install was not tried: {stderr}"
    );
    // This Python has no pip: the install failed, and the property was refused for it.
    let why = o["tester"]["refused"][0].as_str().unwrap_or_default();
    assert!(
        why.contains("installing hypothesis") && why.contains("No module named pip"),
        "{o}\nstderr {stderr}"
    );
}

/// Whether the tests' Python has Hypothesis is asked before anyone approved anything, of a
/// Python that may be the workspace's own and runs code as it starts (a `.pth` file): it is
/// asked in the sandbox, which lets nothing write outside the workspace and the temporary
/// folder.
#[test]
fn whether_hypothesis_is_there_is_asked_in_the_sandbox() {
    let ws = calc_project(&[]);
    let (venv, python) = bare_venv();
    let marker = venv.path().join("PWNED");
    let site = std::fs::read_dir(venv.path().join("lib"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("site-packages");
    let pth = format!(
        "import os; open({:?}, \"w\").write(\"ran unconfined\")\n",
        marker.to_str().unwrap()
    );
    std::fs::write(site.join("zz_marker.pth"), pth).unwrap();
    // A temporary folder of its own, so the virtual environment is not in the one the
    // sandbox lets commands write.
    let tmp = tempfile::tempdir().unwrap();
    let (o, stderr) = calc_run(ws.path(), &python, &[], tmp.path());
    let why = o["tester"]["refused"][0].as_str().unwrap_or_default();
    assert!(
        why.contains("hypothesis is not installed") && why.contains("was not approved"),
        "{o}\nstderr {stderr}"
    );
    assert!(
        !marker.exists(),
        "the tests' Python started outside the sandbox: {stderr}"
    );
}
