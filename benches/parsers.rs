//! Parser figures: 10 MB of pytest output and 10 MB of cargo test output, built by repeating
//! the recorded real outputs. Run with `cargo bench --bench parsers`.

use std::path::Path;
use std::time::Instant;

use agent_ls_core::test_output::parse::{Context, parse};

fn grow(sample: &str, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + sample.len());
    while out.len() < bytes {
        out.push_str(sample);
    }
    out
}

fn main() {
    let projects = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/projects");
    let root = projects.join("python");
    let ctx = Context {
        root: &root,
        go_module: None,
    };
    for (name, file) in [
        ("pytest", "pytest.txt"),
        ("cargo test", "cargo.txt"),
        ("node TAP", "node-tap.txt"),
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/outputs")
            .join(file);
        let sample = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .replace("@PROJECTS@", &projects.to_string_lossy());
        let text = grow(&sample, 10 * 1024 * 1024);
        let mut best = f64::MAX;
        let mut failures = 0;
        for _ in 0..5 {
            let start = Instant::now();
            let (_, parsed) = parse(&text, &ctx);
            best = best.min(start.elapsed().as_secs_f64());
            failures = parsed.failures.len();
        }
        println!(
            "parse {:.1} MB of {name} output: {:.1} ms ({failures} failures after de-duplication)",
            text.len() as f64 / 1e6,
            best * 1e3
        );
    }
}
