//! Prompt bytes per run and per call on the 280-file fixture (tests/support/deep.rs), through
//! the real binary and a stand-in model on 127.0.0.1 that fixes the bug as soon as its line
//! is in the conversation, reads a file once its path is, and greps for the failing name
//! otherwise: what a careful model needs to see, the way the issue's measurement counts it.
//! Run with `cargo bench --bench prompt` (or `cargo test --bench prompt` for a debug build:
//! the bytes do not depend on the build). It prints figures and asserts only that the fix
//! landed.

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::Value;
use support::deep;
use support::model_server::{ModelServer, Reply, conversation, openai_text, openai_tool_call_as};

fn stand_in(body: &Value) -> Reply {
    let said = conversation(body);
    let calls = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    let id = format!("call_{}", calls + 1);
    if said.contains(deep::BUG) {
        openai_text(&[deep::FIX])
    } else if said.contains("app/m29/pricing.py") && body.get("tools").is_some() {
        openai_tool_call_as(&id, "read_file", &[r#"{"path": "app/m29/pricing.py"}"#])
    } else if body.get("tools").is_some() {
        openai_tool_call_as(&id, "grep", &[r#"{"pattern": "def net"}"#])
    } else {
        openai_text(&["I cannot see the code."])
    }
}

/// One run: its calls' request bytes (the whole JSON body) and message bytes (the text of the
/// messages), and whether the fix landed.
fn measure(name: &str, config: &str) {
    let ws = deep::project(config);
    let server = ModelServer::answering(stand_in);
    let home = tempfile::tempdir().expect("home");
    let out = support::cli(
        &["run", "fix the failing tests", "--yes"],
        ws.path(),
        home.path(),
    )
    .env("AGENT_LS_MODEL__PROVIDER", "openai")
    .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
    .env("OPENAI_API_KEY", "bench-key")
    .output()
    .expect("agent-ls runs");
    let fixed = std::fs::read_to_string(ws.path().join("app/m29/pricing.py"))
        .expect("pricing.py")
        .contains("return price + tax");
    let requests = server.requests();
    let bodies: Vec<usize> = requests.iter().map(|r| r.body.to_string().len()).collect();
    let messages: Vec<usize> = requests
        .iter()
        .map(|r| conversation(&r.body).len())
        .collect();
    let kb = |n: usize| format!("{:.1}", n as f64 / 1024.0);
    println!(
        "{name}: {} call(s), {} KB of requests per run ({} KB of message text); per call {} KB; first call {} KB; fixed: {fixed}",
        requests.len(),
        kb(bodies.iter().sum()),
        kb(messages.iter().sum()),
        bodies
            .iter()
            .map(|b| kb(*b))
            .collect::<Vec<_>>()
            .join(" / "),
        kb(bodies.first().copied().unwrap_or(0)),
    );
    assert!(
        fixed,
        "{name}: the fix did not land: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn main() {
    measure(
        "280 files, defaults (tools on)",
        "[agent]\nevaluate = false\n",
    );
    // A first prompt too small for the module: the model reads it through the tools.
    measure(
        "280 files, first_prompt_bytes = 2000",
        "[agent]\nevaluate = false\n[context]\nfirst_prompt_bytes = 2000\n",
    );
    measure(
        "280 files, no tools",
        "[agent]\nevaluate = false\nmax_tool_steps = 0\n",
    );
}
