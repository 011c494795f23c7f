//! Permission rules and modes through the real binary (docs/permissions.md): a deny rule
//! beats an allow rule and the refusal names it, for a change and for a command; a workspace
//! file cannot choose `auto` nor undo the user's deny, even in a trusted folder; plan mode
//! writes nothing.

use crate::hooks::{FIX, cli, coder, home, read, replay, run_in, text, user_file};
use crate::support;

use serde_json::{Value, json};

#[test]
fn a_deny_rule_beats_an_allow_rule_and_the_refusal_names_it() {
    let home = home();
    let ws = support::example();
    user_file(
        home.path(),
        "[permissions]\nallow = [\"edit(**)\", \"command(python3 *)\"]\ndeny = [\"edit(calc.py)\", \"command(python3 -m pytest *)\"]\n",
    );
    let pytest = json!({"role": "coder", "content": "", "tool_calls": [
        {"name": "run_command", "arguments": {"argv": ["python3", "-m", "pytest", "-q"]}}
    ]});
    let env = replay(ws.path(), &[pytest, coder(FIX), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "writing calc.py is denied by `edit(calc.py)` in permissions.deny (user settings)"
        ),
        "{stderr}"
    );
    // The command's refusal is the tool's result, which the journal keeps.
    let journal = journals(ws.path());
    assert!(
        journal.contains(
            "denied by `command(python3 -m pytest *)` in permissions.deny (user settings)"
        ),
        "{journal}"
    );
}

/// Every journal of the workspace's runs, as one text.
fn journals(ws: &std::path::Path) -> String {
    let dir = ws.join(".agent-ls/runs");
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| read(e.path()))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn a_trusted_workspace_cannot_choose_auto_nor_undo_the_users_deny() {
    let home = home();
    let ws = support::example();
    let ws_arg = ws.path().to_str().unwrap();
    user_file(
        home.path(),
        "[permissions]\ndeny = [\"edit(secrets/**)\"]\n",
    );
    std::fs::write(
        ws.path().join(".agent-ls.toml"),
        "[agent]\napproval = \"auto\"\n\n[permissions]\nallow = [\"edit(**)\"]\ndeny = [\"edit(vendor/**)\"]\n",
    )
    .unwrap();
    let out = cli(home.path(), &["trust", ws_arg], &[]);
    assert!(out.status.success(), "{}", text(&out));

    let out = cli(
        home.path(),
        &["permissions", "--workspace", ws_arg, "--json"],
        &[],
    );
    let view: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)));
    assert_eq!(view["mode"], "confirm", "{view}");
    let rules = view["rules"].as_array().cloned().unwrap_or_default();
    for (list, rule, from) in [
        ("deny", "edit(secrets/**)", "user settings"),
        ("deny", "edit(vendor/**)", "workspace file"),
        ("allow", "edit(**)", "workspace file"),
    ] {
        let expected = json!({"list": list, "rule": rule, "from": from});
        assert!(rules.contains(&expected), "{expected} in {view}");
    }
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("agent.approval = \"auto\" is ignored"),
        "{}",
        text(&out)
    );

    // Without --yes and nobody at a terminal, nothing is applied: the workspace's "auto" is
    // not the mode.
    let env = replay(ws.path(), &[coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &[], &env);
    assert!(
        read(ws.path().join("calc.py")).contains("return a - b"),
        "{}",
        text(&out)
    );

    // The workspace's allow does not undo the user's deny.
    let secret = "secrets/key.txt\n<<<<<<< SEARCH\n=======\nhunter2\n>>>>>>> REPLACE\n";
    let env = replay(ws.path(), &[coder(secret), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    assert!(
        !ws.path().join("secrets/key.txt").exists(),
        "{}",
        text(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`edit(secrets/**)` in permissions.deny (user settings)"),
        "{}",
        text(&out)
    );
    assert!(
        read(ws.path().join("calc.py")).contains("return a + b"),
        "{}",
        text(&out)
    );
}

#[test]
fn plan_mode_writes_nothing() {
    let home = home();
    let ws = support::example();
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(ws.path())
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap()
    };
    git(&["init", "-q"]);
    git(&["add", "calc.py", "test_calc.py"]);
    assert!(git(&["commit", "-qm", "start"]).status.success());
    user_file(home.path(), "[agent]\napproval = \"plan\"\n");
    let created = "notes/plan.md\n<<<<<<< SEARCH\n=======\n1. fix add\n>>>>>>> REPLACE\n";
    let env = replay(ws.path(), &[coder(FIX), coder(created), coder(FIX)]);
    let out = run_in(home.path(), ws.path(), &["--yes"], &env);
    let diff = git(&["diff", "--stat", "HEAD"]);
    assert!(
        diff.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&diff.stdout)
    );
    assert!(!ws.path().join("notes").exists(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("plan mode (agent.approval = \"plan\") is read only"),
        "{}",
        text(&out)
    );
}
