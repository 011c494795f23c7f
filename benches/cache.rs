//! Response cache figures (docs/cache.md): the time `Models::call` takes to answer from the
//! cache when it holds `cache.max_entries` (500) answers of ~12 KB prompts, all in one
//! near-duplicate scope (the worst case for the near scan): an exact hit, and a near hit,
//! which scores every entry of the scope. The model is a stand-in HTTP server on 127.0.0.1,
//! called only to fill the cache. Run with `cargo bench --bench cache`.

#[path = "../tests/support/model_server.rs"]
mod model_server;

use std::time::Instant;

use agent_ls_runtime::config::Config;
use agent_ls_runtime::model::{Message, Models, Request, Role};
use model_server::{ModelServer, openai_text};
use tokio_util::sync::CancellationToken;

fn request(goal: &str, code: &str) -> Request {
    Request {
        messages: vec![
            Message::system("Explain the code."),
            Message::user(format!("{goal}\n\nCode:\ncalc.py\n```\n{code}```\n")),
        ],
        question: Some(goal.into()),
        reading_only: true,
        ..Request::default()
    }
}

fn main() {
    let ws = tempfile::tempdir().expect("a temporary workspace");
    let server = ModelServer::answering(|_| openai_text(&["an answer of some length"]));
    let mut c = Config::default();
    c.model.provider = Some("openai".into());
    c.model.base_url = Some(format!("{}/v1", server.url));
    c.model.name = Some("m".into());
    let models = Models::new(&c, Some(ws.path()));
    let code: String = (0..400)
        .map(|i| format!("def f{i}(a, b):\n    return a + b\n"))
        .collect();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let call = |goal: &str| {
        let started = Instant::now();
        rt.block_on(models.call(
            Role::Coder,
            &request(goal, &code),
            &CancellationToken::new(),
            None,
        ))
        .expect("an answer");
        started.elapsed().as_secs_f64() * 1000.0
    };
    let filled = Instant::now();
    for i in 0..c.cache.max_entries {
        call(&format!("explain w{i} x{i} y{i} z{i} v{i}"));
    }
    println!(
        "filled {} entries in {:.1} s ({} model calls)",
        c.cache.max_entries,
        filled.elapsed().as_secs_f64(),
        server.count()
    );
    for name in ["exact hit", "near hit"] {
        let mut times: Vec<f64> = (0..50)
            .map(|j| match name {
                "exact hit" => call("explain w7 x7 y7 z7 v7"),
                // 5 of 6 words shared with entry 7, and a new wording each time.
                _ => call(&format!("explain w7 x7 y7 z7 v7 q{j}")),
            })
            .collect();
        times.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.2} ms, p90 {:.2} ms",
            times[times.len() / 2],
            times[times.len() * 9 / 10]
        );
    }
    assert_eq!(
        server.count(),
        c.cache.max_entries,
        "every timed call was answered from the cache"
    );
}
