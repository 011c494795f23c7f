//! JSON-RPC robustness through the real binary: malformed frames and JSON, wrong parameter
//! types, unknown methods, a panicking handler, and the exit codes of shutdown and exit.

use crate::support;

use serde_json::{Value, json};
use support::{Client, Spawn, workspace};

fn started(env: Vec<(String, String)>) -> (Client, tempfile::TempDir) {
    let ws = workspace(&[]);
    let mut c = Client::spawn(Spawn {
        env,
        ..Spawn::default()
    });
    c.initialize(ws.path(), json!({}), Value::Null);
    (c, ws)
}

/// The server still answers an ordinary request.
fn assert_alive(c: &mut Client) {
    let uri = "file:///ws/alive.txt";
    c.open(uri, "alive");
    assert_eq!(c.document_state(uri)["text"], "alive");
}

fn wait_error_for_null_id(c: &mut Client) -> Value {
    // Errors for messages that could not be read carry a null id.
    c.wait_until(
        |c| c.take_response(&Value::Null),
        "an error response with a null id",
    )
}

#[test]
fn invalid_json_gets_a_parse_error_and_the_server_keeps_serving() {
    let (mut c, _ws) = started(vec![]);
    let body = b"{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": ";
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body);
    c.send_raw(&frame);
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32700, "{err}");
    assert_alive(&mut c);
}

#[test]
fn a_bad_content_length_gets_a_parse_error_and_the_server_keeps_serving() {
    let (mut c, _ws) = started(vec![]);
    c.send_raw(b"Content-Length: twelve\r\n\r\n{\"jsonrpc\":\"2.0\"}");
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32700, "{err}");
    assert_alive(&mut c);
}

#[test]
fn a_message_that_is_not_a_request_gets_invalid_request() {
    let (mut c, _ws) = started(vec![]);
    c.send(&json!({"jsonrpc": "2.0", "id": 3, "result": "no such request"}));
    c.send(&json!({"hello": "world"}));
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_alive(&mut c);
}

#[test]
fn wrong_parameter_types_get_invalid_params() {
    let (mut c, _ws) = started(vec![]);
    let err = c
        .request(
            "agent-ls/documentState",
            json!({"textDocument": {"uri": 42}}),
        )
        .unwrap_err();
    assert_eq!(err["code"], -32602, "{err}");
    let err = c
        .request("workspace/executeCommand", json!("not an object"))
        .unwrap_err();
    assert_eq!(err["code"], -32602, "{err}");
    // A malformed notification cannot be answered; it is dropped and logged.
    c.notify("textDocument/didChange", json!({"textDocument": "nope"}));
    assert_alive(&mut c);
    assert!(c.stderr_says("malformed textDocument/didChange"));
}

#[test]
fn unknown_methods_get_method_not_found_and_unknown_notifications_are_ignored() {
    let (mut c, _ws) = started(vec![]);
    let err = c.request("agent-ls/noSuchThing", json!({})).unwrap_err();
    assert_eq!(err["code"], -32601, "{err}");
    let err = c.request("$/noSuchThing", json!({})).unwrap_err();
    assert_eq!(err["code"], -32601, "{err}");
    c.notify("$/noSuchNotification", json!({}));
    c.notify("custom/noSuchNotification", json!({}));
    assert_alive(&mut c);
}

#[test]
fn a_panic_in_a_request_handler_answers_that_request_and_the_next_one_succeeds() {
    let (mut c, _ws) = started(vec![("AGENT_LS_TEST_HOOKS".into(), "1".into())]);
    let err = c
        .request(
            "workspace/executeCommand",
            json!({"command": "agent-ls.debug.panic", "arguments": []}),
        )
        .unwrap_err();
    assert_eq!(err["code"], -32603, "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("deliberate panic"),
        "{err}"
    );
    assert_alive(&mut c);
}

#[test]
fn the_panic_hook_is_off_without_the_test_environment() {
    let (mut c, _ws) = started(vec![]);
    let err = c
        .request(
            "workspace/executeCommand",
            json!({"command": "agent-ls.debug.panic"}),
        )
        .unwrap_err();
    assert_eq!(err["code"], -32602, "{err}");
}

#[test]
fn shutdown_then_exit_ends_with_code_0() {
    let (c, _ws) = started(vec![]);
    assert_eq!(c.shutdown().code(), Some(0));
}

#[test]
fn exit_without_shutdown_ends_with_code_1() {
    let (mut c, _ws) = started(vec![]);
    c.notify("exit", Value::Null);
    assert_eq!(c.wait_exit().code(), Some(1));
}

#[test]
fn requests_after_shutdown_are_invalid() {
    let (mut c, _ws) = started(vec![]);
    c.request("shutdown", Value::Null).unwrap();
    let err = c
        .request(
            "agent-ls/documentState",
            json!({"textDocument": {"uri": "file:///x"}}),
        )
        .unwrap_err();
    assert_eq!(err["code"], -32600, "{err}");
    c.notify("exit", Value::Null);
    assert_eq!(c.wait_exit().code(), Some(0));
}

#[test]
fn closing_stdin_without_shutdown_ends_with_code_1() {
    let (mut c, _ws) = started(vec![]);
    c.close_stdin();
    assert_eq!(c.wait_exit().code(), Some(1));
}

#[test]
fn stdout_carries_nothing_but_protocol_frames() {
    let (mut c, _ws) = started(vec![("AGENT_LS_TEST_HOOKS".into(), "1".into())]);
    let _ = c.request(
        "workspace/executeCommand",
        json!({"command": "agent-ls.debug.panic"}),
    );
    assert_alive(&mut c);
    c.drain();
    assert!(
        c.protocol_violations.is_empty(),
        "{:?}",
        c.protocol_violations
    );
    assert!(c.stderr_says("panicked"), "logs go to stderr");
}

#[test]
fn version_and_help_print_and_exit_0() {
    let out = std::process::Command::new(support::binary())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
    let out = std::process::Command::new(support::binary())
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("serve") && help.contains("config"), "{help}");
}

#[test]
fn a_header_block_without_its_blank_line_is_refused_after_8_kib_and_nothing_else_is_lost() {
    let (mut c, _ws) = started(vec![]);
    let started = std::time::Instant::now();
    c.send_raw(b"Content-Length: 10\r\nX-Junk: ");
    // 64 MB of a header that never ends, which used to be buffered whole.
    let junk = vec![b'a'; 1 << 20];
    for _ in 0..64 {
        c.send_raw(&junk);
    }
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32700, "{err}");
    assert_alive(&mut c);
    eprintln!("64 MB of header refused in {:?}", started.elapsed());
    assert!(
        c.stderr_says("header block of more than 8192 bytes"),
        "the reason is logged"
    );
}

#[test]
fn two_content_lengths_are_a_parse_error_and_the_requests_after_are_answered() {
    let (mut c, _ws) = started(vec![]);
    c.send_raw(b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}");
    let first = c.send_request("agent-ls/configuration", Value::Null);
    let second = c.send_request("agent-ls/configuration", Value::Null);
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32700, "{err}");
    assert!(c.wait_response(&first).is_ok());
    assert!(c.wait_response(&second).is_ok());
}

#[test]
fn an_id_that_is_neither_a_string_nor_a_number_is_answered_with_a_null_id() {
    let (mut c, _ws) = started(vec![]);
    c.send(&json!({"jsonrpc": "2.0", "id": {"evil": [1, 2]}, "method": "agent-ls/configuration"}));
    let err = wait_error_for_null_id(&mut c);
    assert_eq!(err["error"]["code"], -32600, "{err}");
    assert_eq!(err["id"], Value::Null);
    assert_alive(&mut c);
}

#[test]
fn execute_command_with_null_arguments_means_no_arguments() {
    // Emacs's eglot sends `"arguments": null` for a command without arguments.
    let (mut c, _ws) = started(vec![]);
    let status = c
        .request(
            "workspace/executeCommand",
            json!({"command": "agent-ls.status", "arguments": null}),
        )
        .expect("agent-ls.status answers");
    assert!(status["steps"].is_array(), "{status}");
    assert_alive(&mut c);
}

#[test]
fn a_request_whose_params_nest_too_deep_is_answered_with_an_error() {
    let (mut c, _ws) = started(vec![]);
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    let body = format!(
        r#"{{"jsonrpc": "2.0", "id": 41, "method": "workspace/executeCommand", "params": {{"command": "agent-ls.status", "arguments": {deep}}}}}"#
    );
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body.as_bytes());
    c.send_raw(&frame);
    let err = c
        .wait_response(&json!(41))
        .expect_err("an error answer, not silence");
    assert_eq!(err["code"], -32602, "{err}");
    assert_alive(&mut c);
}

#[test]
fn ordinary_failures_are_request_failed_not_invalid_request() {
    let (mut c, _ws) = started(vec![]);
    // -32600 is JSON-RPC's for a message that is not a request; these are valid requests
    // that failed, LSP's RequestFailed (-32803).
    for (command, arg) in [
        ("agent-ls.undo", Value::Null),
        ("agent-ls.undo", json!({"step": 999})),
        ("agent-ls.run", json!({"goal": " "})),
    ] {
        let err = c.command(command, arg.clone()).unwrap_err();
        assert_eq!(err["code"], -32803, "{command} {arg}: {err}");
    }
}
