//! Configuration through the real binary: every layer with its source, errors that name the
//! file, line and key while the previous valid configuration stays, and secrets kept secret.

use crate::support;

use serde_json::{Value, json};
use support::{Client, Spawn, workspace};

fn entry(config: &Value, key: &str) -> (Value, String) {
    let e = config["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"] == key)
        .unwrap_or_else(|| panic!("no key {key} in {config}"));
    (
        e["value"].clone(),
        e["source"].as_str().unwrap().to_string(),
    )
}

fn configuration(c: &mut Client) -> Value {
    c.request("agent-ls/configuration", Value::Null)
        .expect("configuration")
}

#[test]
fn every_layer_applies_in_order_and_reports_its_source() {
    let ws = workspace(&[(
        ".agent-ls.toml",
        "[model]\nname = \"from-workspace\"\nbase_url = \"http://ws\"\n",
    )]);
    let mut c = Client::spawn(Spawn {
        user_config: Some("[log]\nlevel = \"warn\"\n[model]\nname = \"from-user\"\n".into()),
        env: vec![(
            "AGENT_LS_MODEL__BASE_URL".into(),
            "http://127.0.0.1:9".into(),
        )],
        ..Spawn::default()
    });
    c.initialize(
        ws.path(),
        json!({}),
        json!({"model": {"provider": "replay"}}),
    );
    let config = configuration(&mut c);
    assert_eq!(config["errors"], json!([]));
    let (level, source) = entry(&config, "log.level");
    assert_eq!(
        (level, source.starts_with("user file")),
        (json!("warn"), true)
    );
    let (name, source) = entry(&config, "model.name");
    assert_eq!(name, "from-workspace");
    assert!(source.starts_with("workspace file"), "{source}");
    assert_eq!(
        entry(&config, "model.base_url"),
        (
            json!("http://127.0.0.1:9"),
            "environment variable AGENT_LS_MODEL__BASE_URL".into()
        )
    );
    assert_eq!(
        entry(&config, "model.provider"),
        (json!("replay"), "LSP initializationOptions".into())
    );
    assert_eq!(entry(&config, "log.file"), (Value::Null, "default".into()));

    c.notify(
        "workspace/didChangeConfiguration",
        json!({"settings": {"agent-ls": {"model": {"name": "from-client"}}}}),
    );
    let config = configuration(&mut c);
    assert_eq!(
        entry(&config, "model.name"),
        (
            json!("from-client"),
            "LSP workspace/didChangeConfiguration".into()
        )
    );
    // Layers below the client's settings are still there.
    assert_eq!(entry(&config, "model.provider").0, "replay");
}

#[test]
fn a_bad_workspace_file_is_reported_with_file_line_and_key_and_left_out() {
    let ws = workspace(&[(
        ".agent-ls.toml",
        "[model]\nname = \"ok\"\n\n[log]\nlevel = \"loud\"\n",
    )]);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), Value::Null);
    let shown = c.wait_notification("window/showMessage", |p| p["type"] == 1);
    let message = shown["message"].as_str().unwrap();
    assert!(message.contains(".agent-ls.toml"), "{message}");
    assert!(message.contains("line 5"), "{message}");
    assert!(message.contains("log.level"), "{message}");
    let config = configuration(&mut c);
    // The whole layer is left out, so even its valid key does not apply.
    assert_eq!(
        entry(&config, "model.name"),
        (Value::Null, "default".into())
    );
    assert_eq!(config["errors"].as_array().unwrap().len(), 1);
}

#[test]
fn invalid_client_settings_keep_the_previous_valid_configuration() {
    let ws = workspace(&[]);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), Value::Null);
    c.notify(
        "workspace/didChangeConfiguration",
        json!({"settings": {"log": {"level": "debug"}}}),
    );
    assert_eq!(entry(&configuration(&mut c), "log.level").0, "debug");
    c.notify(
        "workspace/didChangeConfiguration",
        json!({"settings": {"log": {"level": 17}, "model": {"name": "x"}}}),
    );
    let shown = c.wait_notification("window/showMessage", |p| p["type"] == 1);
    assert!(
        shown["message"].as_str().unwrap().contains("log.level"),
        "{shown}"
    );
    let config = configuration(&mut c);
    assert_eq!(
        entry(&config, "log.level").0,
        "debug",
        "previous value stays"
    );
    assert_eq!(
        entry(&config, "model.name").0,
        Value::Null,
        "nothing of the bad settings applies"
    );
}

#[test]
fn saving_the_workspace_file_reloads_it() {
    let ws = workspace(&[(".agent-ls.toml", "[model]\nname = \"first\"\n")]);
    let mut c = Client::spawn(Spawn::default());
    c.initialize(ws.path(), json!({}), Value::Null);
    assert_eq!(entry(&configuration(&mut c), "model.name").0, "first");
    let path = ws.path().join(".agent-ls.toml");
    std::fs::write(&path, "[model]\nname = \"second\"\n").unwrap();
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": support::file_uri(&path)}}),
    );
    assert_eq!(entry(&configuration(&mut c), "model.name").0, "second");
}

#[test]
fn secrets_are_refused_from_the_workspace_and_never_shown_or_logged() {
    let ws = workspace(&[(
        ".agent-ls.toml",
        "[model]\napi_key = \"sk-workspace-secret\"\n",
    )]);
    let mut c = Client::spawn(Spawn {
        user_config: Some("[model]\napi_key = \"sk-user-secret\"\n".into()),
        ..Spawn::default()
    });
    c.initialize(
        ws.path(),
        json!({}),
        json!({"model": {"api_key": "sk-client-secret"}}),
    );
    let shown = c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .unwrap_or("")
            .contains(".agent-ls.toml")
    });
    assert!(
        shown["message"].as_str().unwrap().contains("model.api_key"),
        "{shown}"
    );
    let config = configuration(&mut c);
    assert_eq!(entry(&config, "model.api_key").0, "<redacted>");
    assert!(entry(&config, "model.api_key").1.starts_with("user file"));
    c.drain();
    let everything = format!("{} {:?} {}", c.stderr(), c.notifications, config);
    for secret in ["sk-workspace-secret", "sk-user-secret", "sk-client-secret"] {
        assert!(!everything.contains(secret), "{secret} leaked");
    }
}

#[test]
fn the_config_command_prints_values_with_sources_and_fails_on_a_bad_file() {
    let ws = workspace(&[(".agent-ls.toml", "[model]\nname = \"ws-model\"\n")]);
    let home = tempfile::tempdir().unwrap();
    let run = |dir: &std::path::Path| {
        support::in_workspace(&["config"], dir, home.path())
            .env("AGENT_LS_LOG__LEVEL", "debug")
            .output()
            .unwrap()
    };
    let out = run(ws.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("model.name = \"ws-model\"    # workspace file"),
        "{stdout}"
    );
    assert!(
        stdout.contains("log.level = \"debug\"    # environment variable AGENT_LS_LOG__LEVEL"),
        "{stdout}"
    );
    assert!(
        stdout.contains("model.provider = (unset)    # default"),
        "{stdout}"
    );

    let bad = workspace(&[(".agent-ls.toml", "[model]\nnmae = \"typo\"\n")]);
    let out = run(bad.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr.contains("line 2") && stderr.contains("nmae"),
        "{stderr}"
    );
}

#[test]
fn trusting_the_folder_while_the_settings_change_keeps_both() {
    let ws = workspace(&[(
        ".agent-ls.toml",
        "[model]\nname = \"from-workspace\"\nbase_url = \"http://ws\"\n",
    )]);
    let mut c = Client::spawn(Spawn::default());
    c.on_request("window/showMessageRequest", |_| json!(support::DEFER));
    c.initialize(
        ws.path(),
        json!({}),
        json!({"model": {"provider": "replay"}}),
    );
    // The trust question waits while the client's settings change; then the user trusts.
    c.wait_deferred("window/showMessageRequest");
    c.notify(
        "workspace/didChangeConfiguration",
        json!({"settings": {"agent-ls": {"model": {"name": "from-client"}}}}),
    );
    c.answer_deferred(
        "window/showMessageRequest",
        json!({"title": "Trust Folder"}),
    );
    c.wait_notification("window/showMessage", |p| {
        p["message"]
            .as_str()
            .unwrap_or("")
            .contains("this folder is trusted")
    });
    let config = configuration(&mut c);
    assert_eq!(
        entry(&config, "model.name"),
        (
            json!("from-client"),
            "LSP workspace/didChangeConfiguration".into()
        )
    );
    // The trust applies too: the workspace file's address is used now.
    assert_eq!(entry(&config, "model.base_url").0, "http://ws");
}
