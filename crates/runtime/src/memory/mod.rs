//! Memory across runs, the IO half (docs/memory.md): records kept in a store's `memories`
//! table with their words in an FTS5 index, searched with BM25; the workspace's scope (its git
//! remote, else its folder); the user's own store for `memory.scope = "user"`; and the
//! redaction every record goes through before it is written. What a record holds and what
//! enters a prompt are decided in `agent_ls_core::memory`.

use rusqlite::{OptionalExtension, params};

use crate::config::Config;
use crate::store::{Store, StoreError, vector_index};
use agent_ls_core::memory::{self, Hit, Memory, Record};

pub mod postgres;
mod shared;
mod stores;
use crate::clock::now_ms;
use shared::{
    MAX_WORD_RECORDS, fixed_kinds, kind_name, mark_rolled_back, pattern_key, pattern_of, sig_kind,
};
pub use shared::{
    MemoryError, ROLLED_BACK, USER_SCOPE, merge_hits, open_user_store, scope_of, user_store_path,
};
pub use stores::{Memories, View, note_rollback, owner};

/// Environment variables whose values are secrets by their names.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["API_KEY", "_TOKEN", "_SECRET", "PASSWORD", "ACCESS_KEY"]
        .iter()
        .any(|s| n.ends_with(s))
}

/// The secrets this process knows: the configured model keys and the values of the
/// environment variables named like keys (OPENAI_API_KEY, ANTHROPIC_API_KEY, GITHUB_TOKEN...)
/// or holding a value shaped like one under any name.
pub fn known_secrets(config: &Config) -> Vec<String> {
    let mut out: Vec<String> = std::env::vars()
        // By name, or by value whatever the name (`MY_SERVICE_CREDS`).
        .filter(|(k, v)| (secret_name(k) || crate::config::looks_like_secret(v)) && v.len() >= 4)
        .map(|(_, v)| v)
        .collect();
    // Every key the configuration holds, roles' and the embeddings' variable's included.
    out.extend(crate::config::configured_secrets(config));
    // The team store's password (`memory.url`), which a test's output may print.
    let db_password = config
        .memory
        .url
        .as_ref()
        .and_then(|u| u.expose().parse::<tokio_postgres::Config>().ok())
        .and_then(|c| {
            c.get_password()
                .map(|p| String::from_utf8_lossy(p).into_owned())
        });
    out.extend(db_password.filter(|p| p.len() >= 4));
    // The longest first, so a key that contains another is replaced whole.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.dedup();
    out
}

/// Text with the known secrets' values and key-shaped strings replaced by `<redacted>`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        out = out.replace(s.as_str(), "<redacted>");
    }
    memory::redact_key_shapes(&out)
}

/// Every string in a JSON value redacted, in place.
pub fn redact_value(v: &mut serde_json::Value, secrets: &[String]) {
    match v {
        serde_json::Value::String(s) => *s = redact(s, secrets),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|x| redact_value(x, secrets)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|x| redact_value(x, secrets)),
        _ => {}
    }
}

/// A record with every string in it redacted.
pub fn redact_memory(m: &Memory, secrets: &[String]) -> Memory {
    let Ok(mut v) = serde_json::to_value(m) else {
        return m.clone();
    };
    redact_value(&mut v, secrets);
    serde_json::from_value(v).unwrap_or_else(|_| m.clone())
}

fn row_record(key: String, run_id: String, scope: String, json: String) -> Option<Record> {
    let memory: Memory = serde_json::from_str(&json).ok()?;
    Some(Record {
        id: key,
        run_id,
        scope,
        memory,
    })
}

/// A vector as sqlite-vec reads a float32 vector from a blob: its f32s, little-endian.
fn vector_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The embedding model a record's vector came from, and the vector.
#[derive(Debug, Clone, Copy)]
pub struct Embedded<'a> {
    pub model: &'a str,
    pub vector: &'a [f32],
}

impl Store {
    /// Writes one record under `key` (replacing a record of that key), its words, and its
    /// embedding when it has one.
    fn put_memory(
        &self,
        key: &str,
        scope: &str,
        run_id: &str,
        m: &Memory,
        embedded: Option<Embedded<'_>>,
    ) -> Result<(), StoreError> {
        self.delete_memory(key)?;
        let conn = self.conn();
        let json = serde_json::to_string(m).unwrap_or_default();
        conn.execute(
            "INSERT INTO memories (key, scope, run_id, kind, sig_kind, record, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![key, scope, run_id, kind_name(m), sig_kind(m), json, now_ms()],
        )?;
        let id = conn.last_insert_rowid();
        conn.execute(
            "INSERT INTO memories_fts (rowid, body) VALUES (?1, ?2)",
            params![id, memory::search_text(m)],
        )?;
        if let Some(e) = embedded.filter(|e| !e.vector.is_empty()) {
            // Before the vector is kept: a new index is filled with the vectors kept so far.
            vector_index::ensure(conn, e.vector.len())?;
            conn.execute(
                "INSERT INTO memory_vectors (memory_id, model, dims, embedding) VALUES (?1, ?2, ?3, ?4)",
                params![id, e.model, e.vector.len() as i64, vector_blob(e.vector)],
            )?;
            vector_index::insert(conn, id, e.model, scope, e.vector)?;
        }
        Ok(())
    }

    /// Keeps a run's records, already redacted, in one transaction; their ids are
    /// `RUN_ID-N`, so recording a run again replaces its records (all of them) rather than adding copies.
    /// A kind of fix that has now worked in two runs or more becomes (or updates) a pattern:
    /// of the scope's runs, or in the user's store (`across: true`) of every workspace's.
    /// Returns the ids written.
    pub fn remember(
        &self,
        scope: &str,
        run_id: &str,
        episodes: &[Memory],
        across: bool,
    ) -> Result<Vec<String>, StoreError> {
        self.remember_embedded(scope, run_id, episodes, &[], "", across)
    }

    /// `remember`, with each episode's embedding (`vectors[n]` for `episodes[n]`, computed by
    /// the caller from its redacted `memory::search_text`; `None`, or a shorter list, for
    /// those without) by `model`. Patterns get none: they rank by text.
    pub fn remember_embedded(
        &self,
        scope: &str,
        run_id: &str,
        episodes: &[Memory],
        vectors: &[Option<Vec<f32>>],
        model: &str,
        across: bool,
    ) -> Result<Vec<String>, StoreError> {
        let tx = self.conn().unchecked_transaction()?;
        self.conn().execute(
            "DELETE FROM memories_fts WHERE rowid IN (SELECT id FROM memories WHERE run_id = ?1 AND kind = 'episode')",
            [run_id],
        )?;
        let embedded: Vec<i64> = self
            .conn()
            .prepare_cached(
                "SELECT memory_id FROM memory_vectors WHERE memory_id IN (SELECT id FROM memories WHERE run_id = ?1 AND kind = 'episode')",
            )?
            .query_map([run_id], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for id in embedded {
            vector_index::remove(self.conn(), id)?;
        }
        self.conn().execute(
            "DELETE FROM memory_vectors WHERE memory_id IN (SELECT id FROM memories WHERE run_id = ?1 AND kind = 'episode')",
            [run_id],
        )?;
        self.conn().execute(
            "DELETE FROM memories WHERE run_id = ?1 AND kind = 'episode'",
            [run_id],
        )?;
        let mut ids = Vec::new();
        for (n, m) in episodes.iter().enumerate() {
            let key = format!("{run_id}-{}", n + 1);
            let embedded = vectors
                .get(n)
                .and_then(Option::as_deref)
                .map(|vector| Embedded { model, vector });
            self.put_memory(&key, scope, run_id, m, embedded)?;
            ids.push(key);
        }
        for kind in fixed_kinds(episodes) {
            if let Some(id) = self.pattern(scope, &kind, across)? {
                ids.push(id);
            }
        }
        tx.commit()?;
        Ok(ids)
    }

    /// The pattern of `kind` in `scope` (every scope when `across`), written when two runs or
    /// more fixed that kind.
    fn pattern(&self, scope: &str, kind: &str, across: bool) -> Result<Option<String>, StoreError> {
        let mut stmt = self.conn().prepare(
            "SELECT run_id, record FROM memories WHERE (?3 OR scope = ?1) AND sig_kind = ?2 AND kind = 'episode' ORDER BY created_ms, id",
        )?;
        let scope = if across { USER_SCOPE } else { scope };
        let rows = stmt.query_map(params![scope, kind, across], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        let rows = rows.collect::<Result<Vec<_>, _>>()?;
        let key = pattern_key(scope, kind);
        let Some((last, m)) = pattern_of(kind, rows) else {
            // Fewer than two runs fixed it now (one was rolled back): no pattern any more.
            self.delete_memory(&key)?;
            return Ok(None);
        };
        self.put_memory(&key, scope, &last, &m, None)?;
        Ok(Some(key))
    }

    /// Deletes the record `key` with its words and vector, when there is one.
    fn delete_memory(&self, key: &str) -> Result<(), StoreError> {
        let conn = self.conn();
        let old: Option<i64> = conn
            .query_row("SELECT id FROM memories WHERE key = ?1", [key], |r| {
                r.get(0)
            })
            .optional()?;
        if let Some(id) = old {
            conn.execute("DELETE FROM memories_fts WHERE rowid = ?1", [id])?;
            vector_index::remove(conn, id)?;
            conn.execute("DELETE FROM memory_vectors WHERE memory_id = ?1", [id])?;
            conn.execute("DELETE FROM memories WHERE id = ?1", [id])?;
        }
        Ok(())
    }

    /// Remembers run `run_id` as rolled back: its episodes' outcome becomes `ROLLED_BACK`
    /// (their words and vectors stay, since the outcome is not searched), and the patterns of
    /// the kinds it fixed are counted again without it (`across`: the user store's, of every
    /// workspace). How many episodes changed; none when the run left no record or was marked
    /// already.
    pub fn remember_rolled_back(&self, run_id: &str, across: bool) -> Result<usize, StoreError> {
        let tx = self.conn().unchecked_transaction()?;
        let rows: Vec<(i64, String, String)> = self
            .conn()
            .prepare(
                "SELECT id, scope, record FROM memories WHERE run_id = ?1 AND kind = 'episode'",
            )?
            .query_map([run_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<Result<_, _>>()?;
        let mut changed = Vec::new();
        for (id, scope, json) in rows {
            let Ok(mut m) = serde_json::from_str::<Memory>(&json) else {
                continue;
            };
            if mark_rolled_back(&mut m) {
                let json = serde_json::to_string(&m).unwrap_or_default();
                self.conn().execute(
                    "UPDATE memories SET record = ?1 WHERE id = ?2",
                    params![json, id],
                )?;
                changed.push((scope, m));
            }
        }
        let mut kinds: Vec<(String, String)> = changed
            .iter()
            .filter(|(_, m)| matches!(m, Memory::Episode(e) if e.fix.is_some()))
            .map(|(scope, m)| (scope.clone(), sig_kind(m)))
            .collect();
        kinds.sort();
        kinds.dedup();
        for (scope, kind) in kinds {
            self.pattern(&scope, &kind, across)?;
        }
        tx.commit()?;
        Ok(changed.len())
    }

    /// The records that best match `query` (an FTS5 expression, `memory::query`), best
    /// first, with their BM25 scores (higher is better); only `scope`'s when one is given.
    pub fn recall(
        &self,
        scope: Option<&str>,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        if query.trim().is_empty() {
            return Ok(Vec::new());
        }
        // The ids and scores first, so sorting the matches moves two numbers a row rather
        // than each record's JSON; then the records of the best. Looking up each match's
        // scope would take most of a search's time, so it is done only when the store holds
        // records of other scopes (two index seeks tell), which a workspace's seldom does.
        let others = match scope {
            Some(s) => self
                .conn()
                .prepare_cached(
                    "SELECT EXISTS (SELECT 1 FROM memories WHERE scope < ?1)
                         OR EXISTS (SELECT 1 FROM memories WHERE scope > ?1)",
                )?
                .query_row([s], |r| r.get::<_, bool>(0))?,
            None => false,
        };
        let mut stmt = self.conn().prepare_cached(if others {
            "SELECT m.id, bm25(memories_fts) AS s
             FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid
             WHERE memories_fts MATCH ?1 AND m.scope = ?2
             ORDER BY s LIMIT ?3"
        } else {
            "SELECT rowid, bm25(memories_fts) AS s FROM memories_fts
             WHERE memories_fts MATCH ?1 ORDER BY s LIMIT ?3"
        })?;
        let best: Vec<(i64, f64)> = stmt
            .query_map(params![query, scope, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<Result<_, _>>()?;
        let mut get = self
            .conn()
            .prepare_cached("SELECT key, run_id, scope, record FROM memories WHERE id = ?1")?;
        let mut hits = Vec::new();
        for (id, s) in best {
            let (key, run, scope, json) =
                get.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            if let Some(record) = row_record(key, run, scope, json) {
                hits.push(Hit::text(record, -s));
            }
        }
        Ok(hits)
    }

    /// The records whose embeddings (by `model`) are closest to `query`, best first, with
    /// their cosine similarity, those under `min_similarity` left out; only `scope`'s when one
    /// is given. Records without an embedding of that model and length are not among them
    /// (they are still found by text). The bit index (`store::vector_index`) gives the
    /// candidates, which are ranked by exact cosine similarity.
    pub fn recall_vector(
        &self,
        scope: Option<&str>,
        model: &str,
        query: &[f32],
        min_similarity: f64,
        limit: usize,
    ) -> Result<Vec<Hit>, StoreError> {
        let best = vector_index::nearest(self.conn(), scope, model, query, min_similarity, limit)?;
        let mut get = self
            .conn()
            .prepare_cached("SELECT key, run_id, scope, record FROM memories WHERE id = ?1")?;
        let mut hits = Vec::new();
        for (id, s) in best.into_iter().filter(|(_, s)| *s >= min_similarity) {
            let (key, run, scope, json) =
                get.query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?;
            if let Some(record) = row_record(key, run, scope, json) {
                hits.push(Hit::vector(record, s));
            }
        }
        Ok(hits)
    }

    /// The records that best match `words` (`memory::query_words`), best first, and the
    /// query they were searched with. Words in more than a quarter of the records (and
    /// over 50), or in more than `MAX_WORD_RECORDS`, are left out, as stop words are: their
    /// inverse document frequency is small, so they barely change BM25's ranking, yet every
    /// record they match must be scored (about a microsecond each), which at 100,000
    /// records would be most of a search's time. At most the 12 rarest words are kept; when
    /// every word is that common, the 3 rarest.
    pub fn recall_words(
        &self,
        scope: Option<&str>,
        words: &[String],
        limit: usize,
    ) -> Result<(String, Vec<Hit>), StoreError> {
        let total: i64 = self
            .conn()
            .query_row("SELECT count(*) FROM memories", [], |r| r.get(0))?;
        let cap = (total / 4).clamp(50, MAX_WORD_RECORDS);
        // How many records a word is in, counted no further than past the cap: the
        // index's own count (`memories_vocab`) reads the whole list of a word's records,
        // which for the words in every record is most of a search's time.
        let mut stmt = self.conn().prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH ?1 LIMIT ?2)",
        )?;
        let mut counted: Vec<(i64, &String)> = Vec::new();
        for w in words {
            let df: i64 = stmt.query_row(
                params![memory::fts_query(std::slice::from_ref(w)), cap + 1],
                |r| r.get(0),
            )?;
            if df > 0 {
                counted.push((df, w));
            }
        }
        counted.sort();
        let rare: Vec<String> = counted
            .iter()
            .filter(|(df, _)| *df <= cap)
            .take(12)
            .map(|(_, w)| (*w).clone())
            .collect();
        let kept = if rare.is_empty() {
            self.rarest(&counted, 3)?
        } else {
            rare
        };
        let query = memory::fts_query(&kept);
        let hits = self.recall(scope, &query, limit)?;
        Ok((query, hits))
    }

    /// The `n` rarest of `counted` (words all past the cap), by the index's exact count.
    fn rarest(&self, counted: &[(i64, &String)], n: usize) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT doc FROM memories_vocab WHERE term = ?1")?;
        let mut exact: Vec<(i64, &String)> = Vec::new();
        for (_, w) in counted {
            let df: Option<i64> = stmt.query_row([w], |r| r.get(0)).optional()?;
            exact.push((df.unwrap_or(0), w));
        }
        exact.sort();
        Ok(exact.iter().take(n).map(|(_, w)| (*w).clone()).collect())
    }

    /// The newest records first, at most `limit`.
    pub fn memories(&self, limit: usize) -> Result<Vec<Record>, StoreError> {
        let mut stmt = self.conn().prepare(
            "SELECT key, run_id, scope, record FROM memories ORDER BY created_ms DESC, id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (k, run, scope, json) = row?;
            out.extend(row_record(k, run, scope, json));
        }
        Ok(out)
    }

    pub fn memory(&self, id: &str) -> Result<Option<Record>, StoreError> {
        let row = self
            .conn()
            .query_row(
                "SELECT key, run_id, scope, record FROM memories WHERE key = ?1",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()?;
        Ok(row.and_then(|(k, run, scope, json)| row_record(k, run, scope, json)))
    }

    /// Deletes a record and its words, overwriting the freed pages (`secure_delete`), merging
    /// the index, and checkpointing the WAL so its text is gone from the files too. Whether
    /// it existed. The merge makes a forget cost in proportion to the index (a rare act).
    pub fn forget(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.conn();
        let row: Option<i64> = conn
            .query_row("SELECT id FROM memories WHERE key = ?1", [id], |r| r.get(0))
            .optional()?;
        let Some(row) = row else {
            return Ok(false);
        };
        conn.pragma_update(None, "secure_delete", "ON")?;
        let tx = conn.unchecked_transaction()?;
        conn.execute("DELETE FROM memories_fts WHERE rowid = ?1", [row])?;
        vector_index::remove(conn, row)?;
        conn.execute("DELETE FROM memory_vectors WHERE memory_id = ?1", [row])?;
        conn.execute("DELETE FROM memories WHERE id = ?1", [row])?;
        // FTS5's secure-delete takes the record's entries out of the index, but a term can
        // stay on its leaf page; merging the index into one new segment rewrites every
        // page, and the old ones are zeroed as they are freed.
        conn.execute(
            "INSERT INTO memories_fts (memories_fts) VALUES ('optimize')",
            [],
        )?;
        tx.commit()?;
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_key_shapes_are_redacted() {
        let secrets = vec!["hunter2-very-secret".to_string()];
        let t = redact(
            "pw hunter2-very-secret and sk-abcdefghijklmnop12 stay out",
            &secrets,
        );
        assert_eq!(t, "pw <redacted> and <redacted> stay out");
    }

    fn episode(test: &str, message: &str, fix: Option<&str>) -> Memory {
        let f = agent_ls_core::test_output::Failure {
            test_id: test.into(),
            location: Some(agent_ls_core::test_output::Location {
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

    #[test]
    fn records_are_found_by_their_words_become_patterns_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let a = episode(
            "t.test_add",
            "AssertionError: -1 != 5",
            Some("-a - b\n+a + b\n"),
        );
        let b = episode(
            "t.test_sub",
            "AssertionError: 9 != 1",
            Some("-a + b\n+a - b\n"),
        );
        let other = episode("t.test_io", "OSError: disk full", None);
        assert_eq!(
            store
                .remember("/w", "run_1", &[a.clone(), other], false)
                .unwrap(),
            ["run_1-1", "run_1-2"]
        );
        let ids = store.remember("/w", "run_2", &[b], false).unwrap();
        assert_eq!(ids.len(), 2, "{ids:?}");
        let pattern = store.memory(&ids[1]).unwrap().unwrap();
        assert!(
            matches!(&pattern.memory, Memory::Pattern(p) if p.count == 2 && p.runs == ["run_1", "run_2"])
        );
        // Recording run 1 again replaces its records.
        store.remember("/w", "run_1", &[a], false).unwrap();
        let hits = store
            .recall(Some("/w"), "\"oserror\" OR \"disk\"", 10)
            .unwrap();
        assert!(hits.is_empty(), "{hits:?}");
        let hits = store
            .recall(Some("/w"), "\"test_sub\" OR \"assertionerror\"", 10)
            .unwrap();
        assert_eq!(hits[0].record.id, "run_2-1");
        assert!(hits[0].score > 0.0);
        assert!(
            store
                .recall(Some("/elsewhere"), "\"test_sub\"", 10)
                .unwrap()
                .is_empty()
        );
        assert!(store.forget("run_2-1").unwrap());
        assert!(!store.forget("run_2-1").unwrap());
        assert!(store.recall(None, "\"test_sub\"", 10).unwrap().is_empty());
    }

    /// A store whose vectors were kept before their index existed (schema version 11) gets
    /// the index when it is opened, and forgetting a record takes its bits out of it.
    #[test]
    fn vectors_kept_before_the_index_are_indexed_by_the_migration() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let a = episode("t.test_add", "AssertionError: -1 != 5", None);
        let b = episode("t.test_io", "OSError: disk full", None);
        let vectors = vec![Some(vec![0.1f32; 16]), Some(vec![-0.1f32; 16])];
        store
            .remember_embedded("/w", "run_1", &[a, b], &vectors, "m1", false)
            .unwrap();
        store
            .conn()
            .execute_batch("DROP TABLE memory_vec_16; PRAGMA user_version = 11;")
            .unwrap();
        drop(store);
        let (store, _) = Store::open(dir.path()).unwrap();
        let indexed = |s: &Store| -> i64 {
            s.conn()
                .query_row("SELECT count(*) FROM memory_vec_16", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(indexed(&store), 2);
        let hits = store
            .recall_vector(Some("/w"), "m1", &[0.2f32; 16], -1.0, 10)
            .unwrap();
        let ids: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
        assert_eq!(ids, ["run_1-1", "run_1-2"]);
        assert!(store.forget("run_1-1").unwrap());
        assert_eq!(indexed(&store), 1);
        let hits = store
            .recall_vector(Some("/w"), "m1", &[0.2f32; 16], 0.5, 10)
            .unwrap();
        assert!(hits.is_empty(), "{hits:?}");
    }

    #[test]
    fn embeddings_are_kept_per_model_found_by_similarity_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let a = episode("t.test_add", "AssertionError: -1 != 5", Some("+a + b\n"));
        let b = episode("t.test_io", "OSError: disk full", None);
        let c = episode("t.test_old", "KeyError: 'x'", None);
        let vectors = vec![Some(vec![1.0, 0.0, 0.0]), Some(vec![0.0, 1.0, 0.0])];
        store
            .remember_embedded("/w", "run_1", &[a, b], &vectors, "m1", false)
            .unwrap();
        // Remembered before embeddings were configured: no vector.
        store.remember("/w", "run_0", &[c], false).unwrap();
        let near = [0.9f32, 0.1, 0.0];
        let hits = store
            .recall_vector(Some("/w"), "m1", &near, 0.0, 10)
            .unwrap();
        let ids: Vec<&str> = hits.iter().map(|h| h.record.id.as_str()).collect();
        assert_eq!(ids, ["run_1-1", "run_1-2"]);
        assert!(hits[0].vector.unwrap() > 0.99 && hits[0].text.is_none());
        // The floor, another model, another length, another scope: nothing.
        assert_eq!(
            store
                .recall_vector(None, "m1", &near, 0.5, 10)
                .unwrap()
                .len(),
            1
        );
        assert!(
            store
                .recall_vector(None, "m2", &near, 0.0, 10)
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .recall_vector(None, "m1", &[1.0, 0.0], 0.0, 10)
                .unwrap()
                .is_empty()
        );
        assert!(
            store
                .recall_vector(Some("/x"), "m1", &near, 0.0, 10)
                .unwrap()
                .is_empty()
        );
        // Recording the run again without vectors, and forgetting, take the vectors away.
        assert!(store.forget("run_1-2").unwrap());
        let left: i64 = store
            .conn()
            .query_row("SELECT count(*) FROM memory_vectors", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 1);
        let a = episode("t.test_add", "AssertionError: -1 != 5", Some("+a + b\n"));
        store.remember("/w", "run_1", &[a], false).unwrap();
        assert!(
            store
                .recall_vector(None, "m1", &near, 0.0, 10)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn the_memory_servers_password_is_a_known_secret() {
        let mut config = Config::default();
        config.memory.url = Some(crate::config::DatabaseUrl::new(
            "postgres://team:pg-pass-7731@127.0.0.1:5432/mem",
        ));
        let secrets = known_secrets(&config);
        assert_eq!(
            redact("connect to pg-pass-7731 failed", &secrets),
            "connect to <redacted> failed"
        );
    }

    #[test]
    fn names_that_hold_secrets() {
        for n in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET",
            "DB_PASSWORD",
        ] {
            assert!(secret_name(n), "{n}");
        }
        assert!(!secret_name("HOME"));
    }
}
