//! Memory retrieval figures for a team's PostgreSQL store (docs/memory.md "PostgreSQL"): the
//! time a run's search takes (`ts_rank` over the GIN-indexed words `memory::query_words` takes
//! of a failure's signature, the best 8), by text alone and hybrid with a 256-dimension
//! embedding (pgvector's HNSW index, fused with the text's ranking), at 10,000 records (and
//! 100,000 with `--large`), with the time to write them. Needs a server: run
//! `scripts/postgres start`, then `AGENT_LS_TEST_POSTGRES_URL=$(scripts/postgres url) cargo
//! bench --bench memory_postgres`. Each run works in a new schema of its own.

use std::time::Instant;

use agent_ls_core::memory::{self, Memory, episodes};
use agent_ls_core::test_output::{Failure, Location};
use agent_ls_runtime::config::DatabaseUrl;
use agent_ls_runtime::memory::Memories;
use agent_ls_runtime::memory::postgres::PgStore;

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
const DIMS: usize = 256;

/// The same synthetic failures as `benches/memory.rs`, so the figures compare.
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

/// A pseudo-random unit-free vector for record `i` (xorshift), the stand-in for an embedding.
fn embedding(i: usize) -> Vec<f32> {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIMS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn fill(m: &mut Memories, from: usize, to: usize) {
    for batch in (from..to).step_by(1000) {
        let range = batch..(batch + 1000).min(to);
        let records: Vec<Memory> = range
            .clone()
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
        let vectors: Vec<Vec<f32>> = range.map(embedding).collect();
        m.remember(&format!("run_{batch:06}"), &records, Some(&vectors))
            .expect("records written");
    }
}

/// A new schema in the server's database, and the URL that works in it.
fn fresh_schema(url: &str) -> String {
    let name = format!("bench{}", std::process::id());
    with_client(url, async |c| {
        c.batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name}"
        ))
        .await
        .expect("schema")
    });
    format!("{url}?options=-c%20search_path%3D{name}%2Cpublic")
}

/// `f` with a client of the bench's own on `url`, outside the store it measures.
fn with_client<T>(url: &str, f: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(conn);
        f(&client).await
    })
}

fn analyze(url: &str) {
    with_client(url, async |c| {
        c.batch_execute("ANALYZE agent_ls_memories")
            .await
            .expect("analyze")
    });
}

/// The type of the store's `embedding` column: pgvector's `vector`, else `real[]`.
fn embedding_type(url: &str) -> String {
    with_client(url, async |c| {
        c.query_one(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
             WHERE attrelid = 'agent_ls_memories'::regclass AND attname = 'embedding'",
            &[],
        )
        .await
        .expect("the embedding column's type")
        .get(0)
    })
}

fn timed(mut f: impl FnMut(usize)) -> (f64, f64, f64) {
    let mut times: Vec<f64> = (0..50)
        .map(|k| {
            let start = Instant::now();
            f(k);
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    times.sort_by(f64::total_cmp);
    (times[25], times[45], times[49])
}

fn main() {
    let Ok(url) = std::env::var("AGENT_LS_TEST_POSTGRES_URL") else {
        println!(
            "memory_postgres: skipped, AGENT_LS_TEST_POSTGRES_URL is not set (scripts/postgres start)"
        );
        return;
    };
    let url = fresh_schema(&url);
    let store = PgStore::connect(&DatabaseUrl::new(url.clone())).expect("connect");
    println!("memory_postgres: embeddings: {}", embedding_type(&url));
    let mut m = Memories::postgres(store, "/bench", "bench", false);
    let sizes: &[usize] = if std::env::args().any(|a| a == "--large") {
        &[10_000, 100_000]
    } else {
        &[10_000]
    };
    let mut have = 0;
    for &n in sizes {
        let start = Instant::now();
        fill(&mut m, have, n);
        let write = start.elapsed();
        have = n;
        // What autovacuum does on a live server: the statistics the search's choice of words
        // reads (`PgStore::rare_words`).
        analyze(&url);
        let target = |k: usize| (k * 977 + 13) % n;
        let words = |k: usize| memory::query_words(&[memory::signature(&failure(target(k)))]);
        let text = timed(|k| {
            let (_, hits) = m.recall(&words(k), None, 8).expect("search");
            assert!(!hits.is_empty());
        });
        let mut first = 0;
        let hybrid = timed(|k| {
            let e = embedding(target(k));
            let (_, hits) = m.recall(&words(k), Some(&e), 8).expect("search");
            if hits[0].record.id
                == format!(
                    "run_{:06}-{}",
                    target(k) / 1000 * 1000,
                    target(k) % 1000 + 1
                )
            {
                first += 1;
            }
        });
        println!(
            "memory_postgres: {n:>7} records: text search median {:.2} ms, p90 {:.2} ms, max {:.2} ms; \
             hybrid (text + HNSW) median {:.2} ms, p90 {:.2} ms, max {:.2} ms, the record itself first in {first} of 50; \
             written in {:.1} s",
            text.0,
            text.1,
            text.2,
            hybrid.0,
            hybrid.1,
            hybrid.2,
            write.as_secs_f64()
        );
    }
}
