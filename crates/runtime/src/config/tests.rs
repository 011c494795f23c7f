//! Unit tests of loading and layering: defaults, errors with their lines, secrets, origins.

use super::layer::{env_layer, read_file_layer};
use super::*;

fn ws_error(text: &str) -> ConfigError {
    parse_toml_layer(Source::WorkspaceFile(".agent-ls.toml".into()), text)
        .unwrap_err()
        .remove(0)
}

#[test]
fn the_documented_default_file_is_the_built_in_default() {
    let parsed: Config =
        toml::from_str(DEFAULT_FILE).expect("crates/runtime/defaults/agent-ls.toml parses");
    assert_eq!(parsed, Config::default());
}

#[test]
fn every_key_is_documented_in_the_default_file() {
    let loaded = load(&Inputs::default());
    for (key, _, _) in loaded.entries() {
        let leaf = key.rsplit('.').next().unwrap();
        assert!(
            DEFAULT_FILE
                .lines()
                .any(|l| l.trim_start_matches('#').trim_start().starts_with(leaf)),
            "{key} is not in crates/runtime/defaults/agent-ls.toml"
        );
    }
}

#[test]
fn an_unknown_default_agent_is_an_error_and_build_runs() {
    let loaded = load(&Inputs {
        env: vec![("AGENT_LS_AGENT__DEFAULT_AGENT".into(), "planner".into())],
        ..Inputs::default()
    });
    let err = loaded
        .errors
        .iter()
        .find(|e| e.key.as_deref() == Some("agent.default_agent"))
        .expect("an error");
    assert!(err.message.contains("no agent `planner`"), "{err}");
    assert_eq!(loaded.config.agent.default_agent, "build");
    let ok = load(&Inputs {
        env: vec![("AGENT_LS_AGENT__DEFAULT_AGENT".into(), "review".into())],
        ..Inputs::default()
    });
    assert!(ok.errors.is_empty(), "{:?}", ok.errors);
    assert_eq!(ok.config.agent.default_agent, "review");
}

#[test]
fn a_wrong_type_names_file_line_and_key() {
    let err = ws_error("[log]\nlevel = \"loud\"\n");
    assert_eq!(err.line, Some(2));
    assert_eq!(err.key.as_deref(), Some("log.level"));
    assert!(err.message.contains("loud"), "{err}");
}

#[test]
fn an_unknown_key_is_an_error() {
    let err = ws_error("[log]\nlevel = \"info\"\nlevle = 3\n");
    assert_eq!(err.line, Some(3));
    assert!(err.message.contains("levle"), "{err}");
}

#[test]
fn a_file_that_is_not_utf8_or_too_large_is_an_error_with_its_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(".agent-ls.toml");
    let source = Source::WorkspaceFile(path.clone());
    std::fs::write(&path, b"[log]\nlevel = \"info\"\n# caf\xe9\n").expect("write");
    let err = read_file_layer(source.clone(), &path).expect_err("not UTF-8");
    assert_eq!(err[0].line, Some(3), "{}", err[0]);
    assert!(err[0].to_string().contains("not UTF-8"), "{}", err[0]);
    let big = format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize));
    std::fs::write(&path, big).expect("write");
    let err = read_file_layer(source, &path).expect_err("too large");
    assert!(
        err[0].to_string().contains("over 1048576 bytes"),
        "{}",
        err[0]
    );
}

#[test]
fn a_key_nested_too_deep_is_an_error_with_its_line() {
    let deep = vec!["a"; 100].join(".");
    let err = ws_error(&format!("[log]\nlevel = \"info\"\n[{deep}]\nx = 1\n"));
    assert_eq!(err.line, Some(3), "{err}");
    assert!(err.message.contains("100 tables deep"), "{err}");
    let err = ws_error(&format!("[log]\n{deep} = 1\n"));
    assert_eq!(err.line, Some(2), "{err}");
    // Dots inside a quoted key are part of a name, not nesting.
    let quoted = format!("\"{}\"", vec!["a"; 100].join("."));
    let err = ws_error(&format!("[log]\n{quoted} = 1\n"));
    assert!(!err.message.contains("deep"), "{err}");
}

#[test]
fn a_syntax_error_names_the_line() {
    let err = ws_error("[log]\nlevel = \n");
    assert_eq!(err.line, Some(2));
}

#[test]
fn secrets_are_refused_from_workspace_files_and_client_settings() {
    let err = ws_error("[model]\napi_key = \"sk-123\"\n");
    assert_eq!(err.key.as_deref(), Some("model.api_key"));
    assert_eq!(err.line, Some(2));
    assert!(!err.to_string().contains("sk-123"));
    let json = serde_json::json!({"model": {"api_key": "sk-123"}});
    assert!(json_layer(Source::ClientSettings, &json).is_err());
    assert!(parse_toml_layer(Source::UserFile("u".into()), "[model]\napi_key = \"sk\"\n").is_ok());
}

#[test]
fn env_values_are_typed_and_strings_fall_back() {
    let layer = env_layer("AGENT_LS_LOG__LEVEL", "debug").unwrap().unwrap();
    assert_eq!(layer.table["log"]["level"].as_str(), Some("debug"));
    assert!(env_layer("AGENT_LS_LOG__LEVEL", "loud").is_err());
    assert!(env_layer("AGENT_LS_TEST_HOOKS", "1").unwrap().is_none());
    assert!(env_layer("PATH", "/bin").unwrap().is_none());
}

#[test]
fn later_layers_win_and_origins_say_which() {
    let inputs = Inputs {
        env: vec![("AGENT_LS_LOG__LEVEL".into(), "warn".into())],
        client_settings: Some(serde_json::json!({"agent-ls": {"log": {"level": "trace"}}})),
        ..Inputs::default()
    };
    let loaded = load(&inputs);
    assert_eq!(loaded.config.log.level, LogLevel::Trace);
    assert_eq!(loaded.origin("log.level"), Source::ClientSettings);
    assert_eq!(loaded.origin("model.name"), Source::Default);
}

#[test]
fn every_configured_key_is_in_the_redaction_set() {
    let mut c = Config::default();
    c.model.api_key = Some(Secret::new("model-key"));
    c.model.fallback = vec![TargetConfig {
        api_key: Some(Secret::new("fallback-key")),
        ..TargetConfig::default()
    }];
    c.roles.tester.api_key = Some(Secret::new("tester-key"));
    c.roles.coder.fallback = Some(vec![TargetConfig {
        api_key: Some(Secret::new("coder-fallback-key")),
        ..TargetConfig::default()
    }]);
    let found = configured_secrets(&c);
    for key in [
        "model-key",
        "fallback-key",
        "tester-key",
        "coder-fallback-key",
    ] {
        assert!(found.iter().any(|s| s == key), "{key}: {found:?}");
    }
}

#[test]
fn secrets_never_print() {
    let mut c = Config::default();
    c.model.api_key = Some(Secret::new("sk-live-abc"));
    assert!(!format!("{c:?}").contains("sk-live-abc"));
    assert!(!toml::to_string(&c).unwrap().contains("sk-live-abc"));
}
