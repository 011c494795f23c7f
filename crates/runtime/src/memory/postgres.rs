//! The PostgreSQL memory store for a team (`memory.url`, docs/memory.md "PostgreSQL"): the same
//! records as the SQLite store, in one table every member writes to at once. Text is searched
//! through a `tsvector` column with a GIN index and ranked with `ts_rank`; embeddings are
//! pgvector `vector`s with an HNSW index per dimension when the `vector` extension can be
//! had, else `real[]` ranked here (cosine). The schema is versioned and migrated under an
//! advisory lock, so two processes starting at once migrate it once.
//!
//! tokio-postgres is async; the memory stores' interface is blocking (the SQLite store is), so
//! each connection drives its own single-threaded runtime, as the `postgres` crate does. It is
//! therefore used from blocking threads only (`spawn_blocking`, or a command without a
//! runtime).

use std::time::Duration;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Transaction};

use super::{
    MAX_WORD_RECORDS, MemoryError, fixed_kinds, kind_name, mark_rolled_back, pattern_key,
    pattern_of, sig_kind,
};
use crate::clock::now_ms;
use crate::config::DatabaseUrl;
use agent_ls_core::memory::{self, Hit, Memory, Record, cosine};

/// How long connecting may take before the run goes on without memory.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one operation may take (a migration waiting for another process's included).
const OPERATION_TIMEOUT: Duration = Duration::from_secs(20);
/// The advisory lock migrations take: any number, the same in every process ("agentls" in
/// ASCII).
const MIGRATION_LOCK: i64 = 0x0061_6765_6e74_6c73;
/// The schema's newest version (see `migrate`).
pub const SCHEMA_VERSION: i32 = 1;

/// A connection to the team's store.
pub struct PgStore {
    runtime: tokio::runtime::Runtime,
    client: Client,
    /// The `embedding` column is pgvector's `vector` (else `real[]`).
    vector: bool,
    /// pgvector is 0.8 or newer, so a filtered HNSW search may scan on until it has enough
    /// rows (`hnsw.iterative_scan`); older servers refuse the setting.
    iterative_scan: bool,
    url: String,
    /// The least cosine similarity of a record found by its embedding
    /// (`memory.embeddings.min_similarity`): a store of unrelated records adds nothing.
    min_similarity: f64,
}

static FALLBACK_WARNED: std::sync::Once = std::sync::Once::new();

/// Whether pgvector `version` ("0.8.0") has `hnsw.iterative_scan` (0.8 and newer).
fn has_iterative_scan(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (0, 8)
}

fn vector_literal(v: &[f32]) -> pgvector::Vector {
    pgvector::Vector::from(v.to_vec())
}

/// A tsquery matching any of `words` (alphanumeric, as `memory::words_of` gives them, so no
/// word can be read as an operator).
fn ts_query(words: &[String]) -> String {
    words
        .iter()
        .filter(|w| w.chars().all(char::is_alphanumeric) && !w.is_empty())
        .cloned()
        .collect::<Vec<_>>()
        .join(" | ")
}

impl PgStore {
    /// The same store, leaving out records found by vector alone under `min` similarity.
    pub fn with_min_similarity(mut self, min: f64) -> PgStore {
        self.min_similarity = min;
        self
    }

    /// Connects (within `CONNECT_TIMEOUT`) and brings the schema up to date.
    pub fn connect(url: &DatabaseUrl) -> Result<PgStore, MemoryError> {
        let shown = url.redacted();
        let err = |reason: String| MemoryError::Postgres {
            url: shown.clone(),
            reason,
        };
        let mut config: tokio_postgres::Config = url
            .expose()
            .parse()
            .map_err(|e: tokio_postgres::Error| err(format!("not a PostgreSQL URL: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("agent-ls");
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(format!("cannot start a runtime: {e}")))?;
        // The timer belongs to the runtime, so it is made inside it.
        let connecting = runtime
            .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, config.connect(NoTls)).await });
        let (client, connection) = match connecting {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(err(format!("cannot connect: {e}"))),
            Err(_) => {
                return Err(err(format!(
                    "cannot connect: no answer within {} s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        };
        runtime.spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("memory: the PostgreSQL connection ended: {e}");
            }
        });
        let mut store = PgStore {
            runtime,
            client,
            vector: false,
            iterative_scan: false,
            url: shown,
            min_similarity: 0.0,
        };
        (store.vector, store.iterative_scan) = store.migrate()?;
        Ok(store)
    }

    /// Runs `f` to its end within `OPERATION_TIMEOUT`.
    fn run<T>(
        &mut self,
        f: impl AsyncFnOnce(&mut Client) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, MemoryError> {
        let url = self.url.clone();
        let client = &mut self.client;
        let done = self
            .runtime
            .block_on(async { tokio::time::timeout(OPERATION_TIMEOUT, f(client)).await });
        match done {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(MemoryError::Postgres {
                url,
                reason: pg_reason(&e),
            }),
            Err(_) => Err(MemoryError::Postgres {
                url,
                reason: format!("no answer within {} s", OPERATION_TIMEOUT.as_secs()),
            }),
        }
    }

    /// Creates or updates the schema under an advisory lock held to the transaction's end, so
    /// processes that start together wait for one another instead of racing. Returns whether
    /// the `embedding` column is a pgvector `vector`, and whether that pgvector has iterative
    /// index scans.
    fn migrate(&mut self) -> Result<(bool, bool), MemoryError> {
        self.run(async move |client| {
            let mut tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS agent_ls_schema (version integer NOT NULL)",
            )
            .await?;
            let version: Option<i32> = tx
                .query_one("SELECT max(version) FROM agent_ls_schema", &[])
                .await?
                .get(0);
            let version = version.unwrap_or(0);
            if version < 1 {
                migration_1(&mut tx).await?;
            }
            if version < SCHEMA_VERSION {
                tx.execute(
                    "INSERT INTO agent_ls_schema (version) VALUES ($1)",
                    &[&SCHEMA_VERSION],
                )
                .await?;
            }
            let kind: String = tx
                .query_one(
                    "SELECT format_type(atttypid, atttypmod) FROM pg_attribute
                     WHERE attrelid = 'agent_ls_memories'::regclass AND attname = 'embedding'",
                    &[],
                )
                .await?
                .get(0);
            let pgvector: Option<String> = tx
                .query_opt(
                    "SELECT extversion FROM pg_extension WHERE extname = 'vector'",
                    &[],
                )
                .await?
                .map(|row| row.get(0));
            tx.commit().await?;
            let iterative = pgvector.as_deref().is_some_and(has_iterative_scan);
            Ok((kind.starts_with("vector"), iterative))
        })
    }

    fn warn_fallback(&self) {
        if !self.vector {
            FALLBACK_WARNED.call_once(|| {
                tracing::warn!(
                    "memory: the PostgreSQL server has no pgvector (CREATE EXTENSION vector failed \
                     when the schema was made), so embeddings are kept as real[] and ranked by \
                     agent-ls itself, which reads every embedding of the scope at each search"
                )
            });
        }
    }

    /// Keeps a run's records, already redacted, in one transaction. Episodes are keyed by
    /// (scope, run, episode): writing the same one again changes nothing, and a resumed run's
    /// new version replaces the old. Patterns are counted under a lock per scope and kind, so
    /// two runs finishing together count each other. `across` also counts the owner's runs of
    /// every workspace, into the owner's user-wide pattern.
    pub fn remember(
        &mut self,
        scope: &str,
        owner: &str,
        run_id: &str,
        episodes: &[Memory],
        embeddings: Option<&[Vec<f32>]>,
        across: bool,
    ) -> Result<Vec<String>, MemoryError> {
        if embeddings.is_some() {
            self.warn_fallback();
        }
        let vector = self.vector;
        let rows: Vec<Row> = episodes
            .iter()
            .enumerate()
            .map(|(n, m)| Row {
                key: format!("{run_id}-{}", n + 1),
                episode: Some(n as i32 + 1),
                memory: m.clone(),
                embedding: embeddings.and_then(|e| e.get(n)).cloned(),
            })
            .collect();
        let kinds = fixed_kinds(episodes);
        let (scope, owner, run_id) = (scope.to_string(), owner.to_string(), run_id.to_string());
        self.run(async move |client| {
            let tx = client.transaction().await?;
            tx.execute(
                "DELETE FROM agent_ls_memories WHERE scope = $1 AND run_id = $2
                 AND kind = 'episode' AND episode > $3",
                &[&scope, &run_id, &(rows.len() as i32)],
            )
            .await?;
            let mut ids = Vec::new();
            for row in &rows {
                put(&tx, vector, row, &scope, &owner, &run_id).await?;
                ids.push(row.key.clone());
            }
            let mut wanted = vec![(scope.clone(), false)];
            if across {
                wanted.push((format!("user:{owner}"), true));
            }
            for kind in &kinds {
                for (pattern_scope, across) in &wanted {
                    if let Some(id) =
                        pattern(&tx, vector, pattern_scope, &owner, kind, *across).await?
                    {
                        ids.push(id);
                    }
                }
            }
            tx.commit().await?;
            Ok(ids)
        })
    }

    /// The records matching `words` (any of them, ranked with `ts_rank`) and, given a query
    /// embedding, the nearest by cosine similarity; both lists
    /// fused (`agent_ls_core::memory::fuse`) when both
    /// exist. Only the scope's records, and the owner's from every workspace when `owner` is
    /// given; every record of the owner when `scope` is `None`.
    pub fn recall(
        &mut self,
        scope: Option<&str>,
        owner: Option<&str>,
        words: &[String],
        embedding: Option<&[f32]>,
        limit: usize,
    ) -> Result<(String, Vec<Hit>), MemoryError> {
        let kept = self.rare_words(words)?;
        let query = ts_query(&kept);
        let q = query.clone();
        let (s, o) = (scope.map(str::to_string), owner.map(str::to_string));
        let text: Vec<Hit> = if query.is_empty() {
            Vec::new()
        } else {
            self.run(async move |client| {
                let rows = client
                    .query(
                        "SELECT key, run_id, scope, record, ts_rank(words, q)::float8 AS s
                         FROM agent_ls_memories, to_tsquery('simple', $1) q
                         WHERE words @@ q AND ($2::text IS NULL OR scope = $2
                               OR ($3::text IS NOT NULL AND owner = $3))
                           AND ($2::text IS NOT NULL OR owner = $3)
                         ORDER BY s DESC, id LIMIT $4",
                        &[&q, &s, &o, &(limit as i64)],
                    )
                    .await?;
                Ok(rows.iter().filter_map(text_hit_of).collect())
            })?
        };
        let Some(e) = embedding.filter(|e| !e.is_empty()) else {
            return Ok((query, text));
        };
        let mut near = self.nearest(scope, owner, e, limit)?;
        near.retain(|h| h.score >= self.min_similarity);
        Ok((query, memory::fuse(text, near, limit)))
    }

    /// Of `words`, those worth searching for, as the SQLite store chooses them
    /// (`Store::recall_words`): words in more than a quarter of the records (once there are
    /// over 200), or in more than `MAX_WORD_RECORDS`, are left out, as stop words are, since they barely change the ranking yet
    /// every record they match must be ranked; at most the 12 rarest are kept, or the 3 rarest
    /// when every word is that common. How common a word is comes from the planner's
    /// statistics of the `words` column (`pg_stats.most_common_elems`, which ANALYZE and
    /// autovacuum keep), so it costs one small query; before the table was ever analyzed
    /// every word is kept.
    fn rare_words(&mut self, words: &[String]) -> Result<Vec<String>, MemoryError> {
        let stats = self.run(async move |client| {
            client
                .query_opt(
                    "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs,
                            c.reltuples::float8
                     FROM pg_stats s JOIN pg_class c ON c.oid = 'agent_ls_memories'::regclass
                     WHERE s.schemaname = current_schema() AND s.tablename = 'agent_ls_memories'
                       AND s.attname = 'words' AND s.most_common_elems IS NOT NULL",
                    &[],
                )
                .await
        })?;
        let Some(row) = stats else {
            return Ok(words.to_vec());
        };
        let (elems, freqs, rows): (Vec<String>, Vec<f32>, f64) =
            (row.get(0), row.get(1), row.get(2));
        let freq = |w: &String| {
            elems
                .iter()
                .position(|e| e == w)
                .and_then(|i| freqs.get(i).copied())
                .unwrap_or(0.0)
        };
        let mut counted: Vec<(f32, &String)> = words.iter().map(|w| (freq(w), w)).collect();
        counted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let common =
            |f: f32| rows > 200.0 && (f > 0.25 || f64::from(f) * rows > MAX_WORD_RECORDS as f64);
        let rare: Vec<String> = counted
            .iter()
            .filter(|(f, _)| !common(*f))
            .take(12)
            .map(|(_, w)| (*w).clone())
            .collect();
        if rare.is_empty() {
            return Ok(counted.iter().take(3).map(|(_, w)| (*w).clone()).collect());
        }
        Ok(rare)
    }

    /// The records nearest `embedding` (same dimension), best first, scored by cosine
    /// similarity: by the HNSW index with pgvector, else by reading the scope's embeddings.
    fn nearest(
        &mut self,
        scope: Option<&str>,
        owner: Option<&str>,
        embedding: &[f32],
        limit: usize,
    ) -> Result<Vec<Hit>, MemoryError> {
        self.warn_fallback();
        let (scope, owner) = (scope.map(str::to_string), owner.map(str::to_string));
        let dims = embedding.len() as i32;
        const FILTER: &str = "dims = $1 AND ($2::text IS NULL OR scope = $2
             OR ($3::text IS NOT NULL AND owner = $3)) AND ($2::text IS NOT NULL OR owner = $3)";
        if self.vector {
            let v = vector_literal(embedding);
            // The index is on the expression cast to this dimension (see `put`), so the
            // query says the same cast; iterative scans keep going past records of other
            // scopes instead of returning fewer than asked. pgvector's default search list
            // (`ef_search` 40) missed a record's own vector as the nearest in 3 of 50
            // searches at 100,000 records (benches/memory_postgres.rs); 200 missed none, for
            // a few milliseconds.
            let sql = format!(
                "SELECT key, run_id, scope, record,
                        (1 - (embedding::vector({dims}) <=> $4))::float8 AS s
                 FROM agent_ls_memories WHERE {FILTER}
                 ORDER BY embedding::vector({dims}) <=> $4 LIMIT $5"
            );
            let settings = if self.iterative_scan {
                "SET LOCAL hnsw.iterative_scan = relaxed_order; SET LOCAL hnsw.ef_search = 200"
            } else {
                "SET LOCAL hnsw.ef_search = 200"
            };
            return self.run(async move |client| {
                let tx = client.transaction().await?;
                tx.batch_execute(settings).await?;
                let rows = tx
                    .query(&sql, &[&dims, &scope, &owner, &v, &(limit as i64)])
                    .await?;
                tx.commit().await?;
                Ok(rows.iter().filter_map(vector_hit_of).collect())
            });
        }
        let sql = format!(
            "SELECT key, run_id, scope, record, embedding FROM agent_ls_memories WHERE {FILTER}"
        );
        let rows =
            self.run(async move |client| client.query(&sql, &[&dims, &scope, &owner]).await)?;
        let mut hits: Vec<Hit> = rows
            .iter()
            .filter_map(|r| {
                let e: Vec<f32> = r.try_get(4).ok()?;
                let record = record_of(r)?;
                Some(Hit::vector(record, cosine(embedding, &e)))
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        hits.truncate(limit);
        Ok(hits)
    }

    /// The newest records first, at most `limit`: the scope's, or the owner's when `scope` is
    /// `None`.
    pub fn memories(
        &mut self,
        scope: Option<&str>,
        owner: &str,
        limit: usize,
    ) -> Result<Vec<Record>, MemoryError> {
        let (scope, owner) = (scope.map(str::to_string), owner.to_string());
        let limit = limit.min(i64::MAX as usize) as i64;
        self.run(async move |client| {
            let rows = client
                .query(
                    "SELECT key, run_id, scope, record FROM agent_ls_memories
                     WHERE ($1::text IS NULL AND owner = $2) OR scope = $1
                     ORDER BY created_ms DESC, id DESC LIMIT $3",
                    &[&scope, &owner, &limit],
                )
                .await?;
            Ok(rows.iter().filter_map(record_of).collect())
        })
    }

    pub fn memory(&mut self, id: &str) -> Result<Option<Record>, MemoryError> {
        let id = id.to_string();
        self.run(async move |client| {
            let row = client
                .query_opt(
                    "SELECT key, run_id, scope, record FROM agent_ls_memories WHERE key = $1",
                    &[&id],
                )
                .await?;
            Ok(row.as_ref().and_then(record_of))
        })
    }

    /// Remembers run `run_id` as rolled back (`ROLLED_BACK`, as the SQLite store does) and
    /// counts the patterns of the kinds it fixed again without it. How many episodes changed.
    pub fn remember_rolled_back(
        &mut self,
        run_id: &str,
        owner: &str,
        across: bool,
    ) -> Result<usize, MemoryError> {
        let vector = self.vector;
        let (run_id, owner) = (run_id.to_string(), owner.to_string());
        self.run(async move |client| {
            let tx = client.transaction().await?;
            let rows = tx
                .query(
                    "SELECT key, scope, record FROM agent_ls_memories
                     WHERE run_id = $1 AND kind = 'episode' FOR UPDATE",
                    &[&run_id],
                )
                .await?;
            let mut kinds = Vec::new();
            let mut changed = 0;
            for r in &rows {
                let (key, scope, json): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                let Ok(mut m) = serde_json::from_str::<Memory>(&json) else {
                    continue;
                };
                if !mark_rolled_back(&mut m) {
                    continue;
                }
                let json = serde_json::to_string(&m).unwrap_or_default();
                tx.execute(
                    "UPDATE agent_ls_memories SET record = $1 WHERE key = $2",
                    &[&json, &key],
                )
                .await?;
                changed += 1;
                if matches!(&m, Memory::Episode(e) if e.fix.is_some()) {
                    kinds.push((scope, sig_kind(&m)));
                }
            }
            kinds.sort();
            kinds.dedup();
            for (scope, kind) in &kinds {
                let mut wanted = vec![(scope.clone(), false)];
                if across {
                    wanted.push((format!("user:{owner}"), true));
                }
                for (pattern_scope, across) in &wanted {
                    pattern(&tx, vector, pattern_scope, &owner, kind, *across).await?;
                }
            }
            tx.commit().await?;
            Ok(changed)
        })
    }

    /// Deletes a record, whoever wrote it. Whether it existed.
    pub fn forget(&mut self, id: &str) -> Result<bool, MemoryError> {
        let id = id.to_string();
        self.run(async move |client| {
            let n = client
                .execute("DELETE FROM agent_ls_memories WHERE key = $1", &[&id])
                .await?;
            Ok(n > 0)
        })
    }
}

/// A database error's message with its detail (which names the table or constraint), never
/// the URL.
fn pg_reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => e.to_string(),
    }
}

/// The first schema: the records, their words for full text, and their embeddings.
async fn migration_1(tx: &mut Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    // pgvector is not a trusted extension: a role that is not a superuser cannot create it, so
    // a failure here is expected on many servers. A savepoint keeps the transaction usable.
    let sp = tx.savepoint("vector").await?;
    let vector = match sp
        .batch_execute("CREATE EXTENSION IF NOT EXISTS vector")
        .await
    {
        Ok(()) => {
            sp.commit().await?;
            true
        }
        Err(e) => {
            tracing::info!(
                "memory: no pgvector ({}); embeddings as real[]",
                pg_reason(&e)
            );
            sp.rollback().await?;
            false
        }
    };
    let embedding = if vector { "vector" } else { "real[]" };
    tx.batch_execute(&format!(
        "CREATE TABLE agent_ls_memories (
            id bigserial PRIMARY KEY,
            key text NOT NULL UNIQUE,
            scope text NOT NULL,
            owner text NOT NULL,
            run_id text NOT NULL,
            episode integer,
            kind text NOT NULL,
            sig_kind text NOT NULL,
            record text NOT NULL,
            words tsvector NOT NULL,
            embedding {embedding},
            dims integer,
            created_ms bigint NOT NULL,
            UNIQUE (scope, run_id, episode)
        );
        CREATE INDEX agent_ls_memories_words ON agent_ls_memories USING gin (words);
        CREATE INDEX agent_ls_memories_scope ON agent_ls_memories (scope, created_ms);
        CREATE INDEX agent_ls_memories_owner ON agent_ls_memories (owner, created_ms);
        CREATE INDEX agent_ls_memories_kind ON agent_ls_memories (sig_kind);"
    ))
    .await
}

/// One record to write.
struct Row {
    key: String,
    /// The episode's number in its run; `None` for a pattern.
    episode: Option<i32>,
    memory: Memory,
    embedding: Option<Vec<f32>>,
}

/// Inserts a record, or updates the one of the same (scope, run, episode), or of the same key
/// for a pattern, when it differs; an identical write changes nothing.
async fn put(
    tx: &Transaction<'_>,
    vector: bool,
    row: &Row,
    scope: &str,
    owner: &str,
    run_id: &str,
) -> Result<(), tokio_postgres::Error> {
    let m = &row.memory;
    let json = serde_json::to_string(m).unwrap_or_default();
    let words = memory::words_of(&memory::search_text(m)).join(" ");
    let dims = row.embedding.as_ref().map(|e| e.len() as i32);
    let (as_vector, as_array) = match (&row.embedding, vector) {
        (Some(e), true) => (Some(vector_literal(e)), None),
        (Some(e), false) => (None, Some(e.clone())),
        (None, _) => (None, None),
    };
    let embedding: &(dyn ToSql + Sync) = if vector { &as_vector } else { &as_array };
    if let (Some(d), true) = (dims, vector) {
        hnsw_index(tx, d).await?;
    }
    let conflict = if row.episode.is_some() {
        "(scope, run_id, episode)"
    } else {
        "(key)"
    };
    let sql = format!(
        "INSERT INTO agent_ls_memories
           (key, scope, owner, run_id, episode, kind, sig_kind, record, words, embedding, dims, created_ms)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, to_tsvector('simple', $9), $10, $11, $12)
         ON CONFLICT {conflict} DO UPDATE SET
           run_id = EXCLUDED.run_id, sig_kind = EXCLUDED.sig_kind, record = EXCLUDED.record,
           words = EXCLUDED.words, embedding = EXCLUDED.embedding, dims = EXCLUDED.dims,
           created_ms = EXCLUDED.created_ms
         WHERE agent_ls_memories.record IS DISTINCT FROM EXCLUDED.record
            OR agent_ls_memories.embedding IS DISTINCT FROM EXCLUDED.embedding"
    );
    tx.execute(
        &sql,
        &[
            &row.key,
            &scope,
            &owner,
            &run_id,
            &row.episode,
            &kind_name(m),
            &sig_kind(m),
            &json,
            &words,
            embedding,
            &dims,
            &now_ms(),
        ],
    )
    .await?;
    Ok(())
}

/// The HNSW index for embeddings of `dims` dimensions: pgvector indexes one dimension per
/// index, and the embedding model (so the dimension) is the user's choice, so each dimension
/// met gets a partial index on the column cast to it. Made once, under a lock, by whichever
/// writer first stores such an embedding.
async fn hnsw_index(tx: &Transaction<'_>, dims: i32) -> Result<(), tokio_postgres::Error> {
    let name = format!("agent_ls_memories_hnsw_{dims}");
    let exists = tx
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await?
        .get::<_, bool>(0);
    if exists {
        return Ok(());
    }
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&(MIGRATION_LOCK + i64::from(dims))],
    )
    .await?;
    tx.batch_execute(&format!(
        "CREATE INDEX IF NOT EXISTS {name} ON agent_ls_memories
         USING hnsw ((embedding::vector({dims})) vector_cosine_ops) WHERE dims = {dims}"
    ))
    .await
}

/// Writes (or updates) the pattern of `kind`: the scope's runs that fixed it, or with
/// `across` the owner's runs in every workspace. Two writers of one pattern wait for each other
/// (an advisory lock on the scope and kind), so neither misses the other's run.
async fn pattern(
    tx: &Transaction<'_>,
    vector: bool,
    scope: &str,
    owner: &str,
    kind: &str,
    across: bool,
) -> Result<Option<String>, tokio_postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtext($1))",
        &[&format!("{scope}\n{kind}")],
    )
    .await?;
    let rows = tx
        .query(
            "SELECT run_id, record FROM agent_ls_memories
             WHERE (CASE WHEN $3 THEN owner = $4 ELSE scope = $1 END)
               AND sig_kind = $2 AND kind = 'episode' ORDER BY created_ms, id",
            &[&scope, &kind, &across, &owner],
        )
        .await?;
    let runs = rows
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect::<Vec<_>>();
    let Some((last, p)) = pattern_of(kind, runs) else {
        // Fewer than two runs fixed it now (one was rolled back): no pattern any more.
        tx.execute(
            "DELETE FROM agent_ls_memories WHERE key = $1",
            &[&pattern_key(scope, kind)],
        )
        .await?;
        return Ok(None);
    };
    let row = Row {
        key: pattern_key(scope, kind),
        episode: None,
        memory: p,
        embedding: None,
    };
    put(tx, vector, &row, scope, owner, &last).await?;
    Ok(Some(row.key))
}

fn record_of(r: &tokio_postgres::Row) -> Option<Record> {
    let json: String = r.try_get(3).ok()?;
    Some(Record {
        id: r.try_get(0).ok()?,
        run_id: r.try_get(1).ok()?,
        scope: r.try_get(2).ok()?,
        memory: serde_json::from_str(&json).ok()?,
    })
}

/// A row of a full-text search: its record and `ts_rank`.
fn text_hit_of(r: &tokio_postgres::Row) -> Option<Hit> {
    Some(Hit::text(record_of(r)?, r.try_get(4).ok()?))
}

/// A row of a vector search: its record and cosine similarity.
fn vector_hit_of(r: &tokio_postgres::Row) -> Option<Hit> {
    Some(Hit::vector(record_of(r)?, r.try_get(4).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tsquery_is_made_of_words_only() {
        let words = vec!["assertionerror".to_string(), "a|b".into(), "calc".into()];
        assert_eq!(ts_query(&words), "assertionerror | calc");
    }

    #[test]
    fn iterative_scans_are_asked_for_only_from_pgvector_0_8_on() {
        assert!(!has_iterative_scan("0.6.2"));
        assert!(!has_iterative_scan("0.7.4"));
        assert!(has_iterative_scan("0.8.0"));
        assert!(has_iterative_scan("0.10"));
        assert!(has_iterative_scan("1.0.0"));
        assert!(!has_iterative_scan("garbage"));
    }
}
