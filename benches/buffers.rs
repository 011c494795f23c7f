//! Buffer figures for the README and issues: incremental change latency in a 100,000-line
//! document, opening a 10 MB file, and memory held by 1,000 open 1,000-line documents.
//! Run with `cargo bench --bench buffers`; it prints figures and asserts nothing.

use std::time::{Duration, Instant};

use agent_ls_core::text::{Buffer, Encoding, Position, Range, TextChange};

fn line(i: usize) -> String {
    format!("    let value_{i} = compute(\"ünïcödé\", {i}); // 😀\n")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_bytes() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn main() {
    // 1. Memory held by 1,000 open 1,000-line documents.
    let doc: String = (0..1_000).map(line).collect();
    let before = rss_bytes();
    let docs: Vec<Buffer> = (0..1_000)
        .map(|i| Buffer::new(&format!("// document {i}\n{doc}"), 1))
        .collect();
    let after = rss_bytes();
    let held: usize = docs.iter().map(|b| b.rope().len_bytes()).sum();
    println!(
        "1,000 documents x 1,000 lines: text {:.1} MB, resident growth {:.1} MB ({:.2}x the text)",
        held as f64 / 1e6,
        after.saturating_sub(before) as f64 / 1e6,
        after.saturating_sub(before) as f64 / held as f64,
    );
    drop(docs);

    // 2. One-character changes in a 100,000-line buffer.
    let text: String = (0..100_000).map(line).collect();
    let mut buffer = Buffer::new(&text, 1);
    let mut seed: u64 = 7;
    let mut samples = Vec::with_capacity(20_000);
    for version in 2..20_002 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let l = ((seed >> 33) % 100_000) as u32;
        let c = ((seed >> 20) % 20) as u32;
        let change = TextChange {
            range: Some(Range::new(Position::new(l, c), Position::new(l, c))),
            text: if version % 2 == 0 {
                "x".into()
            } else {
                "é".into()
            },
        };
        let start = Instant::now();
        buffer
            .apply_changes(std::slice::from_ref(&change), version, Encoding::Utf16)
            .expect("valid change");
        samples.push(start.elapsed());
    }
    samples.sort();
    println!(
        "incremental 1-char change, 100,000-line buffer (UTF-16, {} changes): p50 {:.2} µs, p99 {:.2} µs, max {:.2} µs",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.last().unwrap().as_secs_f64() * 1e6,
    );

    // 3. Opening a 10 MB file.
    let mut big = String::new();
    let mut i = 0;
    while big.len() < 10 * 1024 * 1024 {
        big.push_str(&line(i));
        i += 1;
    }
    let mut opens = Vec::new();
    for _ in 0..10 {
        let start = Instant::now();
        let b = Buffer::new(&big, 1);
        opens.push(start.elapsed());
        std::hint::black_box(&b);
    }
    opens.sort();
    println!(
        "open a {:.1} MB document: median {:.2} ms, worst {:.2} ms",
        big.len() as f64 / 1e6,
        percentile(&opens, 0.5).as_secs_f64() * 1e3,
        opens.last().unwrap().as_secs_f64() * 1e3,
    );
}
