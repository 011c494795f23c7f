//! `agent-ls doctor` through the real binary against a scripted server on 127.0.0.1.

use crate::support;

use std::process::Output;

use serde_json::json;
use support::model_server::{ModelServer, Reply, openai_text};

fn doctor(env: &[(&str, String)]) -> Output {
    let ws = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    support::in_workspace(&["doctor"], ws.path(), home.path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

fn server_env(url: &str, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AGENT_LS_MODEL__PROVIDER", "openai".into()),
        ("AGENT_LS_MODEL__BASE_URL", format!("{url}/v1")),
        ("AGENT_LS_MODEL__NAME", model.into()),
        ("AGENT_LS_MODEL__API_KEY", "sk-doctor-secret".into()),
    ]
}

#[test]
fn a_working_server_passes_every_check() {
    let server = ModelServer::start(vec![
        Reply::json(json!({"data": [{"id": "small"}, {"id": "big"}]})),
        openai_text(&["OK"]),
    ]);
    let out = doctor(&server_env(&server.url, "small"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for check in ["key", "reachable", "model listed", "completion"] {
        assert!(
            text.contains(&format!("ok   openai (small) {check}")),
            "{check}: {text}"
        );
    }
    // The sandbox check runs a command confined, as test runs are.
    assert!(
        text.contains("ok   sandbox confines a command: a command ran under Landlock"),
        "{text}"
    );
    assert!(!text.contains("sk-doctor-secret"));
    let reqs = server.requests();
    assert_eq!(
        (reqs[0].method.as_str(), reqs[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(reqs[1].body["max_tokens"], 1);
}

#[test]
fn a_model_the_server_does_not_have_is_named_with_the_choices() {
    let server = ModelServer::start(vec![Reply::json(json!({"data": [{"id": "small"}]}))]);
    let out = doctor(&server_env(&server.url, "huge"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("FAIL openai (huge) model listed") && text.contains("(small)"),
        "{text}"
    );
}

#[test]
fn an_unreachable_server_and_a_missing_key_fail_with_a_fix() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = doctor(&server_env(&format!("http://127.0.0.1:{port}"), "m"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("FAIL openai (m) reachable") && text.contains("cannot reach"),
        "{text}"
    );

    let out = doctor(&[("AGENT_LS_MODEL__PROVIDER", "openai".into())]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("FAIL openai (gpt-4o-mini) key") && text.contains("OPENAI_API_KEY"),
        "{text}"
    );
}
