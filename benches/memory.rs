//! Memory retrieval figures (docs/memory.md): the time a run's search takes (FTS5, BM25, the
//! words `memory::query_words` takes of a failure's signature, the best 8) at 10,000 and 100,000
//! records, with the time to write them, the store's size and the time to forget one (which
//! merges the index); then the same with an embedding of 384 dimensions per record (a small
//! embedding model's size; the candidates of sqlite-vec's bit index ranked by cosine
//! similarity, `store::vector_index`, fused with the text ranking by `memory::fuse`) at
//! 10,000 and 100,000. Run with
//! `cargo bench --bench memory`.

use std::time::Instant;

use agent_ls_core::memory::{self, Memory, episodes};
use agent_ls_core::test_output::{Failure, Location};
use agent_ls_runtime::store::Store;

const WORDS: [&str; 16] = [
    "config", "loader", "parser", "client", "cache", "settings", "router", "model", "session",
    "token", "schema", "index", "query", "worker", "queue", "render",
];
const KINDS: [&str; 6] = [
    "ImportError",
    "AssertionError",
    "KeyError",
    "TypeError",
    "ValueError",
    "AttributeError",
];

fn failure(i: usize) -> Failure {
    let w = |k: usize| WORDS[(i * k + i / 7) % WORDS.len()];
    Failure {
        test_id: format!("tests.test_{}.Test{}.test_{}_{i}", w(1), w(3), w(5)),
        location: Some(Location {
            file: format!("tests/test_{}.py", w(1)),
            line: (i % 300) as u32 + 1,
            column: None,
        }),
        message: format!(
            "{}: cannot use '{}_{i}' from '{}.{}' in {} {}",
            KINDS[i % KINDS.len()],
            w(7),
            w(11),
            w(13),
            w(2),
            w(9)
        ),
        frames: vec![Location {
            file: format!("app/{}/{}.py", w(3), w(5)),
            line: 10,
            column: None,
        }],
    }
}

fn fill(store: &Store, from: usize, to: usize) {
    for batch in (from..to).step_by(1000) {
        let records: Vec<Memory> = (batch..(batch + 1000).min(to))
            .flat_map(|i| {
                episodes(
                    &[failure(i)],
                    &[format!("app/{}.py", WORDS[i % WORDS.len()])],
                    &[],
                    None,
                    "failed",
                )
            })
            .map(Memory::Episode)
            .collect();
        store
            .remember("/bench", &format!("run_{batch:06}"), &records, false)
            .expect("records written");
    }
}

/// The embeddings' length: that of small embedding models (all-MiniLM-L6, bge-small).
const DIMS: usize = 384;

/// A deterministic pseudo-random vector (an xorshift stream seeded by `i`): records whose
/// vectors are as spread as real ones, with no model to run.
fn vector(i: usize) -> Vec<f32> {
    let mut x = (i as u64).wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..DIMS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn fill_embedded(store: &Store, from: usize, to: usize) {
    for batch in (from..to).step_by(1000) {
        let ids: Vec<usize> = (batch..(batch + 1000).min(to)).collect();
        let records: Vec<Memory> = ids
            .iter()
            .flat_map(|i| episodes(&[failure(*i)], &[], &[], None, "failed"))
            .map(Memory::Episode)
            .collect();
        let vectors: Vec<Option<Vec<f32>>> = ids.iter().map(|i| Some(vector(*i))).collect();
        store
            .remember_embedded(
                "/bench",
                &format!("run_{batch:06}"),
                &records,
                &vectors,
                "bench",
                false,
            )
            .expect("records written");
    }
}

fn percentiles(mut times: Vec<f64>) -> (f64, f64, f64) {
    times.sort_by(f64::total_cmp);
    (
        times[times.len() / 2],
        times[times.len() * 9 / 10],
        times[times.len() - 1],
    )
}

/// The least similarity of a record found by vector alone, as a run asks for it
/// (`memory.embeddings.min_similarity`'s default).
const MIN_SIMILARITY: f64 = 0.5;

/// Hybrid recall as a run does it: the text ranking, the vector ranking (a record's vector
/// with noise, so one record is close and the rest are not), fused.
fn vectors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, _) = Store::open(dir.path()).expect("store");
    let mut have = 0;
    for n in [10_000, 100_000] {
        let start = Instant::now();
        fill_embedded(&store, have, n);
        let write = start.elapsed();
        have = n;
        let (mut vector_ms, mut hybrid_ms, mut any_ms) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0..50 {
            let target = (k * 977 + 13) % n;
            let words = memory::query_words(&[memory::signature(&failure(target))]);
            let probe: Vec<f32> = vector(target)
                .iter()
                .zip(vector(target + 7_000_000))
                .map(|(a, b)| a + 0.3 * b)
                .collect();
            let start = Instant::now();
            let near = store
                .recall_vector(Some("/bench"), "bench", &probe, MIN_SIMILARITY, 8)
                .expect("vector search");
            vector_ms.push(start.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(
                near[0].record.run_id,
                format!("run_{:06}", target / 1000 * 1000)
            );
            // Every record a candidate, however dissimilar: the search's worst case.
            let start = Instant::now();
            let any = store
                .recall_vector(Some("/bench"), "bench", &probe, 0.0, 8)
                .expect("vector search");
            any_ms.push(start.elapsed().as_secs_f64() * 1000.0);
            assert_eq!(any[0].record.id, near[0].record.id);
            assert_eq!(any.len(), 8);
            let start = Instant::now();
            let (_, text) = store
                .recall_words(Some("/bench"), &words, 8)
                .expect("search");
            let near = store
                .recall_vector(Some("/bench"), "bench", &probe, MIN_SIMILARITY, 8)
                .expect("vector search");
            let fused = memory::fuse(text, near, 8);
            hybrid_ms.push(start.elapsed().as_secs_f64() * 1000.0);
            assert!(fused[0].vector.is_some() && fused[0].text.is_some());
        }
        let (vm, v90, vmax) = percentiles(vector_ms);
        let (hm, h90, hmax) = percentiles(hybrid_ms);
        let (am, a90, amax) = percentiles(any_ms);
        let size: u64 = ["store.sqlite", "store.sqlite-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.path().join(".agent-ls").join(f)).ok())
            .map(|m| m.len())
            .sum();
        println!(
            "memory with {DIMS}-d vectors: {n:>7} records: vector search median {vm:.2} ms, p90 {v90:.2} ms, \
             max {vmax:.2} ms; hybrid (text + vector + fusion) median {hm:.2} ms, p90 {h90:.2} ms, \
             max {hmax:.2} ms; vector search with no least similarity median {am:.2} ms, p90 {a90:.2} ms, \
             max {amax:.2} ms (50 queries); written in {:.1} s; store {:.1} MB",
            write.as_secs_f64(),
            size as f64 / 1e6
        );
    }
}

fn main() {
    text();
    vectors();
}

/// Full text alone, as a run without an embedding model searches.
fn text() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, _) = Store::open(dir.path()).expect("store");
    let mut have = 0;
    for n in [10_000, 100_000] {
        let start = Instant::now();
        fill(&store, have, n);
        let write = start.elapsed();
        have = n;
        let queries: Vec<Vec<String>> = (0..50)
            .map(|k| memory::query_words(&[memory::signature(&failure(k * 977 + 13))]))
            .collect();
        let mut times: Vec<f64> = queries
            .iter()
            .map(|q| {
                let start = Instant::now();
                let (_, hits) = store.recall_words(Some("/bench"), q, 8).expect("search");
                assert!(!hits.is_empty());
                start.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let size: u64 = ["store.sqlite", "store.sqlite-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.path().join(".agent-ls").join(f)).ok())
            .map(|m| m.len())
            .sum();
        println!(
            "memory: {n:>7} records: search median {:.2} ms, p90 {:.2} ms, max {:.2} ms (50 queries); \
             written in {:.1} s; store {:.1} MB",
            times[times.len() / 2],
            times[times.len() * 9 / 10],
            times[times.len() - 1],
            write.as_secs_f64(),
            size as f64 / 1e6
        );
    }
    let start = Instant::now();
    assert!(store.forget("run_050000-1").expect("forget"));
    println!(
        "memory: forgetting one record of 100,000 (index merged): {:.0} ms",
        start.elapsed().as_secs_f64() * 1000.0
    );
}
