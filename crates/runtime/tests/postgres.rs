//! The PostgreSQL memory store against a real PostgreSQL on 127.0.0.1 (scripts/postgres,
//! started by scripts/test): concurrent migrations and writers in two processes, the pgvector path with its HNSW
//! index, and the `real[]` path on a database where the role may not create the extension.
//! Each test works in a schema of its own, made fresh, so each migrates from nothing. The
//! ranking test (the right record first among 1,000, by text and by text and vector fused)
//! runs on the SQLite store too, through the same `Memories` interface.
//!
//! Without AGENT_LS_TEST_POSTGRES_URL these tests skip, saying so, unless
//! AGENT_LS_REQUIRE_POSTGRES is set (scripts/test sets both).

use agent_ls_core::memory::{self, Memory};
use agent_ls_core::test_output::{Failure, Location};
use agent_ls_runtime::config::DatabaseUrl;
use agent_ls_runtime::memory::Memories;
use agent_ls_runtime::memory::postgres::PgStore;

/// The URL of the database with pgvector (`plain`: without), or `None` to skip.
fn server(plain: bool) -> Option<String> {
    let var = if plain {
        "AGENT_LS_TEST_POSTGRES_PLAIN_URL"
    } else {
        "AGENT_LS_TEST_POSTGRES_URL"
    };
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("AGENT_LS_REQUIRE_POSTGRES").is_some() => {
            panic!("{var} is not set; scripts/test starts PostgreSQL (scripts/postgres start)")
        }
        _ => {
            eprintln!("skipped: {var} is not set (scripts/postgres start; scripts/test does it)");
            None
        }
    }
}

/// A new empty schema in `url`'s database, and the URL that works in it (pgvector's types stay
/// reachable through `public`).
fn fresh_schema(url: &str) -> String {
    // A random name, not the time: two test binaries may start in the same nanosecond.
    let name = format!("t{:016x}", fastrand::u64(..));
    exec(url, &format!("CREATE SCHEMA {name}"));
    format!("{url}?options=-c%20search_path%3D{name}%2Cpublic")
}

fn episode(test: &str, message: &str, fix: Option<&str>) -> Memory {
    let f = Failure {
        test_id: test.into(),
        location: Some(Location {
            file: "test_calc.py".into(),
            line: 8,
            column: None,
        }),
        message: message.into(),
        frames: Vec::new(),
    };
    let mut e = memory::episodes(&[f], &["calc.py".into()], &[], fix, "done");
    Memory::Episode(e.remove(0))
}

fn connect(url: &str) -> PgStore {
    PgStore::connect(&DatabaseUrl::new(url)).unwrap()
}

/// `f` with a client of the test's own on `url`, outside the store under test.
fn with_client<T>(url: &str, f: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        f(&client).await
    })
}

fn exec(url: &str, sql: &str) {
    with_client(url, async |c| c.batch_execute(sql).await.unwrap());
}

/// Rows of the schema's table, by a query of the test's own.
fn count(url: &str, sql: &str) -> i64 {
    with_client(url, async |c| c.query_one(sql, &[]).await.unwrap().get(0))
}

/// Whether the schema's `embedding` column is pgvector's `vector` (else it is `real[]`), as
/// the server's catalogue says.
fn embedding_is_vector(url: &str) -> bool {
    count(
        url,
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'agent_ls_memories' AND column_name = 'embedding' AND udt_name = 'vector'",
    ) == 1
}

/// The environment variables that make this test's binary a writer process (`writer`).
const WRITER: &str = "AGENT_LS_TEST_PG_WRITER";
const WRITER_URL: &str = "AGENT_LS_TEST_PG_WRITER_URL";
const WRITER_GO: &str = "AGENT_LS_TEST_PG_WRITER_GO";
const WRITERS: usize = 2;
const ROUNDS: usize = 5;

/// One writer process's work, with `threads` connections of its own: every connection
/// migrates the new schema at once (the advisory lock makes one of them create it and the
/// others find it made), then writes the runs every writer writes (the same keys) and one of
/// its own, `ROUNDS` times over.
fn write_as(writer: usize, url: &str, threads: usize) {
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let url = url.to_string();
            std::thread::spawn(move || {
                let i = writer * threads + t;
                let store = connect(&url);
                let mut m = Memories::postgres(store, "/team/repo", &format!("dev{i}"), false);
                let shared = [
                    episode("t.test_add", "AssertionError: -1 != 5", Some("-a\n+b\n")),
                    episode("t.test_io", "OSError: disk full", None),
                ];
                let own = [episode(
                    &format!("t.test_{i}"),
                    "AssertionError: 1 != 2",
                    Some("-x\n+y\n"),
                )];
                for _ in 0..ROUNDS {
                    m.remember("run_shared", &shared, None).unwrap();
                    m.remember(&format!("run_{i}"), &own, None).unwrap();
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
}

/// Two processes (this test's binary run again as writers, `WRITER`) migrate a new schema
/// and write at once, with three connections each: the runs they share are kept once, each
/// writer's own once, the schema's version once, and the pattern counts every run.
#[test]
fn processes_that_migrate_and_write_at_once_lose_and_duplicate_nothing() {
    if let Ok(writer) = std::env::var(WRITER) {
        let url = std::env::var(WRITER_URL).unwrap();
        let go = std::path::PathBuf::from(std::env::var(WRITER_GO).unwrap());
        // Both processes start writing when the test says so, not as each comes up.
        while !go.exists() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        write_as(writer.parse().unwrap(), &url, 3);
        return;
    }
    let Some(url) = server(false) else { return };
    let url = fresh_schema(&url);
    let dir = tempfile::tempdir().unwrap();
    let go = dir.path().join("go");
    let me = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WRITERS)
        .map(|w| {
            std::process::Command::new(&me)
                .args([
                    "--exact",
                    "processes_that_migrate_and_write_at_once_lose_and_duplicate_nothing",
                    "--nocapture",
                ])
                .env(WRITER, w.to_string())
                .env(WRITER_URL, &url)
                .env(WRITER_GO, &go)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    std::fs::write(&go, "").unwrap();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The writer ran the test as a writer (libtest would say "0 passed" had the name
        // matched nothing).
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
    }
    let writers = WRITERS * 3;
    assert_eq!(count(&url, "SELECT count(*) FROM agent_ls_schema"), 1);
    let episodes = count(
        &url,
        "SELECT count(*) FROM agent_ls_memories WHERE kind = 'episode'",
    );
    assert_eq!(episodes, 2 + writers as i64);
    assert_eq!(
        count(
            &url,
            "SELECT count(*) FROM (SELECT key FROM agent_ls_memories GROUP BY key HAVING count(*) > 1) d"
        ),
        0
    );
    // One pattern for the kind every writer fixed, counting every run that fixed it.
    let mut m = Memories::postgres(connect(&url), "/team/repo", "dev0", false);
    let patterns: Vec<_> = m
        .list(100)
        .unwrap()
        .into_iter()
        .filter_map(|r| match r.memory {
            Memory::Pattern(p) => Some(p),
            Memory::Episode(_) => None,
        })
        .collect();
    assert_eq!(patterns.len(), 1, "{patterns:?}");
    assert_eq!(patterns[0].count as usize, writers + 1);
}

/// Records whose words all match the query equally, and embeddings that tell them apart.
fn remember_with_vectors(m: &mut Memories) {
    let records = [
        episode("t.test_a", "ImportError: cannot import name x", None),
        episode("t.test_b", "ImportError: cannot import name y", None),
        episode("t.test_c", "ImportError: cannot import name z", None),
    ];
    let vectors = vec![
        vec![1.0, 0.0, 0.0],
        vec![0.0, 1.0, 0.0],
        vec![0.0, 0.0, 1.0],
    ];
    m.remember("run_v", &records, Some(&vectors)).unwrap();
}

fn best(m: &mut Memories, words: &[&str], embedding: Option<&[f32]>) -> Vec<String> {
    let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
    m.recall(&words, embedding, 3)
        .unwrap()
        .1
        .into_iter()
        .map(|h| h.record.id)
        .collect()
}

#[test]
fn with_pgvector_embeddings_are_vectors_with_an_hnsw_index_and_rank_with_the_text() {
    let Some(url) = server(false) else { return };
    let url = fresh_schema(&url);
    let store = connect(&url);
    assert!(embedding_is_vector(&url));
    let mut m = Memories::postgres(store, "/w", "dev", false);
    remember_with_vectors(&mut m);
    assert_eq!(
        count(
            &url,
            "SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'agent_ls_memories_hnsw_3' AND indexdef LIKE '%hnsw%'"
        ),
        1
    );
    // The text alone cannot tell them apart; the vector near record 2 puts it first.
    let near_b = [0.1f32, 0.9, 0.0];
    assert_eq!(best(&mut m, &["importerror"], Some(&near_b))[0], "run_v-2");
    let near_c = [0.0f32, 0.2, 0.9];
    assert_eq!(best(&mut m, &["importerror"], Some(&near_c))[0], "run_v-3");
    // Without a query embedding, the text alone: all three match.
    assert_eq!(best(&mut m, &["importerror"], None).len(), 3);
}

#[test]
fn without_pgvector_embeddings_are_real_arrays_ranked_by_cosine() {
    let Some(url) = server(true) else { return };
    let url = fresh_schema(&url);
    let store = connect(&url);
    assert!(
        !embedding_is_vector(&url),
        "the plain database must not have pgvector"
    );
    assert_eq!(
        count(
            &url,
            "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'agent_ls_memories' AND column_name = 'embedding' AND data_type = 'ARRAY'"
        ),
        1
    );
    let mut m = Memories::postgres(store, "/w", "dev", false);
    remember_with_vectors(&mut m);
    let near_b = [0.1f32, 0.9, 0.0];
    assert_eq!(best(&mut m, &["importerror"], Some(&near_b))[0], "run_v-2");
    // Reconnecting finds the schema made and keeps the real[] column.
    drop(connect(&url));
    assert!(!embedding_is_vector(&url));
}

#[test]
fn words_in_most_records_are_left_out_of_the_search_once_the_table_is_analyzed() {
    let Some(url) = server(false) else { return };
    let url = fresh_schema(&url);
    let mut m = Memories::postgres(connect(&url), "/w", "dev", false);
    let common: Vec<Memory> = (0..300)
        .map(|i| episode(&format!("t.test_{i}"), "ImportError: no module", None))
        .collect();
    m.remember("run_common", &common, None).unwrap();
    m.remember(
        "run_rare",
        &[episode("t.test_zebra", "ImportError: zebra missing", None)],
        None,
    )
    .unwrap();
    let words = vec!["importerror".to_string(), "zebra".to_string()];
    // Before statistics exist every word is searched: the common one matches everything.
    assert_eq!(m.recall(&words, None, 400).unwrap().1.len(), 301);
    // What autovacuum does in time on a live server.
    exec(&url, "ANALYZE agent_ls_memories");
    let (query, hits) = m.recall(&words, None, 400).unwrap();
    assert_eq!(query, "zebra");
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].record.id, "run_rare-1");
}

/// A failure of test `test` with `message`, in `file`.
fn failure(test: &str, file: &str, message: &str) -> Failure {
    Failure {
        test_id: test.into(),
        location: Some(Location {
            file: file.into(),
            line: 12,
            column: None,
        }),
        message: message.into(),
        frames: Vec::new(),
    }
}

/// A stand-in embedding: each word hashed into one of 64 dimensions, so texts that share
/// words are near. Deterministic, as a test needs.
fn embed(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; 64];
    for w in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
    {
        let h = w
            .to_lowercase()
            .bytes()
            .fold(5381u64, |h, b| h.wrapping_mul(33) ^ u64::from(b));
        v[(h % 64) as usize] += 1.0;
    }
    v
}

/// 1,000 records, ten runs of 100: six error kinds over 40 modules, every record sharing
/// words with others; among them, one record of the failure the query is about, in run 7.
fn thousand_records() -> Vec<(String, Vec<Memory>)> {
    let kinds = [
        "AssertionError: expected {n} items, got {m}",
        "KeyError: 'field_{n}'",
        "IndexError: list index out of range at item {n}",
        "TypeError: unsupported operand for {n}",
        "ValueError: invalid literal {n} for int()",
        "AttributeError: object has no attribute attr_{n}",
    ];
    (0..10)
        .map(|run| {
            let records = (0..100)
                .map(|i| {
                    let n = run * 100 + i;
                    let (test, message, file) = if n == 737 {
                        (
                            "tests.test_csv.ParseTests.test_trailing_comma_keeps_last_field"
                                .to_string(),
                            "IndexError: list index out of range in split_fields".to_string(),
                            "csvparse/fields.py".to_string(),
                        )
                    } else {
                        (
                            format!("tests.test_mod{}.Tests.test_case_{n}", n % 40),
                            kinds[n % 6]
                                .replace("{n}", &n.to_string())
                                .replace("{m}", &(n + 1).to_string()),
                            format!("pkg/mod{}.py", n % 40),
                        )
                    };
                    let f = failure(&test, &file, &message);
                    let fix = format!("+fixed {n}\n");
                    let mut e = memory::episodes(&[f], &[file], &[], Some(&fix), "done");
                    Memory::Episode(e.remove(0))
                })
                .collect();
            (format!("run_{run}"), records)
        })
        .collect()
}

/// The failure the query is about: the same test and error, other numbers and a moved line.
fn the_query() -> (Vec<String>, Vec<f32>) {
    let f = failure(
        "tests.test_csv.ParseTests.test_trailing_comma_keeps_last_field",
        "csvparse/fields.py",
        "IndexError: list index out of range in split_fields",
    );
    let s = [memory::signature(&f)];
    (memory::query_words(&s), embed(&memory::query_text(&s)))
}

/// Remembers the 1,000 records (with their embeddings) and checks that the right one ranks
/// first by text alone and by text and vector fused.
fn ranks_the_right_record_first(m: &mut Memories) {
    for (run, records) in thousand_records() {
        let vectors: Vec<Vec<f32>> = records
            .iter()
            .map(|r| embed(&memory::search_text(r)))
            .collect();
        m.remember(&run, &records, Some(&vectors)).unwrap();
    }
    let (words, vector) = the_query();
    for embedding in [None, Some(vector.as_slice())] {
        let (query, hits) = m.recall(&words, embedding, 8).unwrap();
        assert!(!hits.is_empty(), "nothing found for {query}");
        assert_eq!(
            hits[0].record.id,
            "run_7-38",
            "with embedding {}: {:?}",
            embedding.is_some(),
            hits.iter()
                .map(|h| (&h.record.id, h.score))
                .collect::<Vec<_>>()
        );
        if embedding.is_some() {
            assert!(
                hits[0].vector.is_some() && hits[0].text.is_some(),
                "{:?}",
                hits[0]
            );
        }
    }
}

#[test]
fn the_right_record_ranks_first_among_a_thousand_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    // A run's process has opened (and checked) the workspace's store before memory does.
    agent_ls_runtime::store::Store::open(dir.path()).unwrap();
    let mut config = agent_ls_runtime::config::MemoryConfig::default();
    config.embeddings = Some(agent_ls_runtime::config::EmbeddingsConfig {
        url: "http://127.0.0.1:9/v1".into(),
        model: "hashed-words".into(),
        api_key_env: None,
        timeout_secs: 1,
        min_similarity: 0.3,
    });
    let mut m = Memories::open(
        dir.path(),
        &config,
        agent_ls_runtime::memory::View::Workspace,
        true,
    )
    .unwrap();
    ranks_the_right_record_first(&mut m);
}

#[test]
fn the_right_record_ranks_first_among_a_thousand_in_postgres() {
    let Some(url) = server(false) else { return };
    let url = fresh_schema(&url);
    let store = connect(&url).with_min_similarity(0.3);
    let mut m = Memories::postgres(store, "/team/repo", "someone", false);
    ranks_the_right_record_first(&mut m);
}
