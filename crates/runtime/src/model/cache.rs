//! The response cache, the IO half (docs/cache.md): answers kept in the workspace store's
//! `cache` table under the sha256 of their request, found again by an exact hit or, for the
//! read-only calls, by a near duplicate in the same scope; never a request or an answer that
//! holds a secret; at most `cache.max_entries`, the least recently used evicted first; and the
//! counters behind `agent-ls cache stats`. Which calls it answers, and how, is decided in
//! `agent_ls_core::cache`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

pub use super::types::Cached;
use super::{Kind, Request, Response, Role, Target, ToolCall, Usage};
use crate::clock::now_ms;
use crate::config::Config;
use crate::store::{Store, StoreError};
use agent_ls_core::cache::{self as rules, HitKind, Mode, Reuse};

/// The cache of one workspace's models.
pub struct Cache {
    root: PathBuf,
    mode: Mode,
    max_entries: usize,
    /// The values of the secrets this process knows (`memory::known_secrets`).
    secrets: Vec<String>,
    /// The user's own random salt, mixed into every key (`user_salt`).
    salt: String,
    /// The store, opened at the first lookup.
    store: Mutex<Option<Store>>,
}

/// A call the cache may answer, with its keys.
pub struct Ask {
    reuse: Reuse,
    label: &'static str,
    key: String,
    /// The near-duplicate scope, for a call that takes near duplicates and has a question.
    scope: Option<String>,
    words: BTreeSet<String>,
    provider: String,
    model: String,
}

/// What an entry holds besides its keys.
#[derive(Serialize, Deserialize)]
struct Answer {
    text: String,
    tool_calls: Vec<ToolCall>,
    provider: String,
    model: String,
}

/// `agent-ls cache stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheStats {
    pub entries: u64,
    pub exact_hits: u64,
    pub near_hits: u64,
    pub misses: u64,
    /// The tokens of the original calls the hits answered for.
    pub saved_input_tokens: u64,
    pub saved_output_tokens: u64,
    /// The time those calls took.
    pub saved_ms: u64,
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn words_text(words: &BTreeSet<String>) -> String {
    words
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The salt file beside the user's memory store: `$XDG_DATA_HOME/agent-ls/cache.salt`.
fn salt_path() -> Option<PathBuf> {
    Some(
        crate::memory::user_store_path()?
            .parent()?
            .join("cache.salt"),
    )
}

/// The user's secret salt for the cache's keys, made at first use: 32 bytes from the system's
/// random source, written once (mode 0600). A workspace's store can travel with its repository
/// (a committed `.agent-ls/`), and keys an author could compute from the files and our prompts
/// would let a crafted entry answer a plan or an explanation; with a salt only this user has,
/// no entry written elsewhere ever matches.
fn user_salt(path: &Path) -> std::io::Result<String> {
    use std::io::{Read, Write};
    if let Ok(salt) = std::fs::read_to_string(path)
        && salt.trim().len() >= 32
    {
        return Ok(salt.trim().to_string());
    }
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let salt: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(mut f) => {
            f.write_all(salt.as_bytes())?;
            Ok(salt)
        }
        // Another process made it first: its salt is the one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let theirs = std::fs::read_to_string(path)?;
            if theirs.trim().len() >= 32 {
                Ok(theirs.trim().to_string())
            } else {
                Err(std::io::Error::other(format!(
                    "{} is too short to be a salt; remove it",
                    path.display()
                )))
            }
        }
        Err(e) => Err(e),
    }
}

impl Cache {
    /// The cache of the workspace at `root`; `None` when `cache.enabled` is off, or when the
    /// user's salt cannot be had (no home folder to keep it in): unsalted keys are not safe.
    pub fn new(config: &Config, root: &Path) -> Option<Arc<Cache>> {
        if config.cache.enabled == Mode::Off {
            return None;
        }
        let salt = match salt_path().map(|p| (user_salt(&p), p)) {
            Some((Ok(salt), _)) => salt,
            Some((Err(e), p)) => {
                warn!(
                    "the response cache is off: its key salt {}: {e}",
                    p.display()
                );
                return None;
            }
            None => {
                warn!("the response cache is off: neither XDG_DATA_HOME nor HOME is set");
                return None;
            }
        };
        Some(Arc::new(Cache {
            root: root.to_path_buf(),
            mode: config.cache.enabled,
            max_entries: config.cache.max_entries,
            secrets: crate::memory::known_secrets(config),
            salt,
            store: Mutex::new(None),
        }))
    }

    /// A key: the sha256 of the user's salt and the material.
    fn key(&self, material: &str) -> String {
        sha256(&format!("{}\n{material}", self.salt))
    }

    /// Whether `text` holds a secret: a known secret's value, or a string shaped like a key.
    fn holds_secret(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
            || agent_ls_core::memory::has_key_shape(text)
    }

    /// The call's keys, when the cache may answer it: its role under `cache.enabled`, a model
    /// rather than a replay script (whose every answer is played, in order), and no secret in
    /// the request.
    pub(super) fn ask(&self, role: Role, request: &Request, target: &Target) -> Option<Ask> {
        let reuse = rules::reuse(self.mode, role, request.reading_only);
        if reuse == Reuse::Never || target.kind == Kind::Replay || self.max_entries == 0 {
            return None;
        }
        let secret = request.messages.iter().any(|m| {
            self.holds_secret(&m.content)
                || m.tool_calls
                    .iter()
                    .any(|c| self.holds_secret(&c.arguments.to_string()))
        });
        if secret {
            return None;
        }
        let label = rules::label(role, request.reading_only);
        let call = rules::Call {
            provider: &target.provider,
            model: &target.model,
            label,
            messages: &request.messages,
            tools: &request.tools,
            tool_choice: request.tool_choice.as_deref(),
            json_schema: request.json_schema.as_ref(),
            max_tokens: request.max_tokens,
            question: request.question.as_deref(),
        };
        let scope = match reuse {
            Reuse::ExactOrNear => call.near_material().map(|m| self.key(&m)),
            _ => None,
        };
        Some(Ask {
            reuse,
            label,
            key: self.key(&call.exact_material()),
            words: if scope.is_some() {
                call.question_words()
            } else {
                BTreeSet::new()
            },
            scope,
            provider: target.provider.clone(),
            model: target.model.clone(),
        })
    }

    /// Runs `f` on the store, opened at the first use; a store that cannot be used is warned
    /// about and taken as an empty cache.
    fn with_store<T>(&self, f: impl FnOnce(&Store) -> Result<T, StoreError>) -> Option<T> {
        let mut guard = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            match Store::open(&self.root) {
                Ok((store, _)) => *guard = Some(store),
                Err(e) => {
                    warn!("the response cache is not used: {e}");
                    return None;
                }
            }
        }
        let store = guard.as_ref()?;
        f(store)
            .map_err(|e| warn!("the response cache failed: {e}"))
            .ok()
    }

    /// The cached answer to `ask`, counted as a hit, or `None`, counted as a miss.
    fn lookup(&self, ask: &Ask) -> Option<Response> {
        let started = Instant::now();
        let found = self
            .with_store(|s| {
                let found = s.cache_find(ask)?;
                match &found {
                    Some((key, hit, entry)) => s.cache_hit(key, *hit, entry)?,
                    None => s.cache_miss()?,
                }
                Ok(found)
            })
            .flatten()?;
        let (_, hit, entry) = found;
        let answer: Answer = serde_json::from_str(&entry.answer).ok()?;
        info!(
            role = ask.label,
            hit = hit.as_str(),
            saved_tokens = entry.input_tokens + entry.output_tokens,
            "model call answered from the response cache"
        );
        Some(Response {
            text: answer.text,
            tool_calls: answer.tool_calls,
            usage: Usage::default(),
            provider: answer.provider,
            model: answer.model,
            duration_ms: started.elapsed().as_millis() as u64,
            attempts: 0,
            cost_usd: None,
            cut_off: false,
            bad_bytes: Vec::new(),
            cached: Some(Cached {
                hit,
                saved: Usage {
                    input_tokens: entry.input_tokens,
                    output_tokens: entry.output_tokens,
                    ..Usage::default()
                },
                saved_ms: entry.duration_ms,
            }),
        })
    }

    /// `lookup` on a blocking thread, so the store's lock waits do not hold up the runtime.
    pub(super) async fn lookup_async(self: Arc<Self>, ask: Arc<Ask>) -> Option<Response> {
        tokio::task::spawn_blocking(move || self.lookup(&ask))
            .await
            .ok()
            .flatten()
    }

    /// Keeps `response` as the answer to `ask`, unless it holds a secret or came from another
    /// model than the one asked (a fallback's), then evicts the least recently used entries
    /// beyond `cache.max_entries`.
    pub(super) async fn keep_async(
        self: Arc<Self>,
        ask: Arc<Ask>,
        request: &Request,
        r: &Response,
    ) {
        let secret = self.holds_secret(&r.text)
            || r.tool_calls
                .iter()
                .any(|c| self.holds_secret(&c.arguments.to_string()))
            || request
                .question
                .as_deref()
                .is_some_and(|q| self.holds_secret(q));
        let empty = r.text.trim().is_empty() && r.tool_calls.is_empty();
        if secret || empty || r.provider != ask.provider || r.model != ask.model {
            return;
        }
        let answer = Answer {
            text: r.text.clone(),
            tool_calls: r.tool_calls.clone(),
            provider: r.provider.clone(),
            model: r.model.clone(),
        };
        let Ok(answer) = serde_json::to_string(&answer) else {
            return;
        };
        let entry = Entry {
            answer,
            tool_calls: !r.tool_calls.is_empty(),
            input_tokens: r.usage.input_tokens,
            output_tokens: r.usage.output_tokens,
            duration_ms: r.duration_ms,
        };
        let cache = self.clone();
        let _ = tokio::task::spawn_blocking(move || {
            cache.with_store(|s| s.cache_put(&ask, &entry, cache.max_entries))
        })
        .await;
    }
}

/// A cached answer and what its call took.
struct Entry {
    answer: String,
    tool_calls: bool,
    input_tokens: u64,
    output_tokens: u64,
    duration_ms: u64,
}

impl Store {
    /// The entry answering `ask`: its own, or the nearest duplicate in its scope with an
    /// overlap of at least `NEAR_OVERLAP` that calls no tools (a tool call is reused only for
    /// the very request it was made for).
    fn cache_find(&self, ask: &Ask) -> Result<Option<(String, HitKind, Entry)>, StoreError> {
        let conn = self.conn();
        let read = |r: &rusqlite::Row<'_>| -> rusqlite::Result<Entry> {
            Ok(Entry {
                answer: r.get(0)?,
                tool_calls: r.get::<_, i64>(1)? != 0,
                input_tokens: r.get::<_, i64>(2)? as u64,
                output_tokens: r.get::<_, i64>(3)? as u64,
                duration_ms: r.get::<_, i64>(4)? as u64,
            })
        };
        const COLUMNS: &str = "answer, tool_calls, input_tokens, output_tokens, duration_ms";
        let exact = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM cache WHERE key = ?1 AND label = ?2"),
                params![ask.key, ask.label],
                read,
            )
            .optional()?;
        if let Some(e) = exact {
            return Ok(Some((ask.key.clone(), HitKind::Exact, e)));
        }
        let Some(scope) = ask
            .scope
            .as_deref()
            .filter(|_| ask.reuse == Reuse::ExactOrNear)
        else {
            return Ok(None);
        };
        let mut stmt = conn.prepare(&format!(
            "SELECT key, words, {COLUMNS} FROM cache
             WHERE scope = ?1 AND label = ?2 AND tool_calls = 0"
        ))?;
        let rows = stmt.query_map(params![scope, ask.label], |r| {
            let key: String = r.get(0)?;
            let words: String = r.get(1)?;
            let entry = Entry {
                answer: r.get(2)?,
                tool_calls: r.get::<_, i64>(3)? != 0,
                input_tokens: r.get::<_, i64>(4)? as u64,
                output_tokens: r.get::<_, i64>(5)? as u64,
                duration_ms: r.get::<_, i64>(6)? as u64,
            };
            Ok((key, words, entry))
        })?;
        let mut best: Option<(f64, String, Entry)> = None;
        for row in rows {
            let (key, words, entry) = row?;
            let theirs: BTreeSet<String> = words.split(' ').map(str::to_string).collect();
            let score = rules::overlap(&ask.words, &theirs);
            if score >= rules::NEAR_OVERLAP && best.as_ref().is_none_or(|(b, ..)| score > *b) {
                best = Some((score, key, entry));
            }
        }
        Ok(best.map(|(_, key, e)| (key, HitKind::Near, e)))
    }

    /// The next value of the LRU counter.
    fn cache_tick(&self) -> Result<i64, StoreError> {
        Ok(self
            .conn()
            .query_row("SELECT COALESCE(MAX(used), 0) + 1 FROM cache", [], |r| {
                r.get(0)
            })?)
    }

    /// A hit: the entry becomes the most recently used, and what it saved is counted.
    fn cache_hit(&self, key: &str, hit: HitKind, e: &Entry) -> Result<(), StoreError> {
        let tick = self.cache_tick()?;
        let conn = self.conn();
        conn.execute(
            "UPDATE cache SET used = ?2 WHERE key = ?1",
            params![key, tick],
        )?;
        let (exact, near) = match hit {
            HitKind::Exact => (1, 0),
            HitKind::Near => (0, 1),
        };
        conn.execute(
            "UPDATE cache_stats SET exact_hits = exact_hits + ?1, near_hits = near_hits + ?2,
                saved_input_tokens = saved_input_tokens + ?3,
                saved_output_tokens = saved_output_tokens + ?4, saved_ms = saved_ms + ?5
             WHERE id = 1",
            params![
                exact,
                near,
                e.input_tokens as i64,
                e.output_tokens as i64,
                e.duration_ms as i64
            ],
        )?;
        Ok(())
    }

    fn cache_miss(&self) -> Result<(), StoreError> {
        self.conn().execute(
            "UPDATE cache_stats SET misses = misses + 1 WHERE id = 1",
            [],
        )?;
        Ok(())
    }

    /// Keeps an answer, then evicts the least recently used beyond `max` entries.
    fn cache_put(&self, ask: &Ask, e: &Entry, max: usize) -> Result<(), StoreError> {
        let tick = self.cache_tick()?;
        let conn = self.conn();
        conn.execute(
            "INSERT OR REPLACE INTO cache (key, scope, label, words, answer, tool_calls,
                input_tokens, output_tokens, duration_ms, created_ms, used)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                ask.key,
                ask.scope,
                ask.label,
                words_text(&ask.words),
                e.answer,
                e.tool_calls as i64,
                e.input_tokens as i64,
                e.output_tokens as i64,
                e.duration_ms as i64,
                now_ms(),
                tick
            ],
        )?;
        conn.execute(
            "DELETE FROM cache WHERE key NOT IN (SELECT key FROM cache ORDER BY used DESC LIMIT ?1)",
            [max as i64],
        )?;
        Ok(())
    }

    /// The cache's entries and counters.
    pub fn cache_stats(&self) -> Result<CacheStats, StoreError> {
        let conn = self.conn();
        let entries: i64 = conn.query_row("SELECT COUNT(*) FROM cache", [], |r| r.get(0))?;
        let counters = conn
            .query_row(
                "SELECT exact_hits, near_hits, misses, saved_input_tokens, saved_output_tokens,
                    saved_ms FROM cache_stats WHERE id = 1",
                [],
                |r| {
                    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
                    Ok(CacheStats {
                        entries: entries as u64,
                        exact_hits: n(0)?,
                        near_hits: n(1)?,
                        misses: n(2)?,
                        saved_input_tokens: n(3)?,
                        saved_output_tokens: n(4)?,
                        saved_ms: n(5)?,
                    })
                },
            )
            .optional()?;
        Ok(counters.unwrap_or(CacheStats {
            entries: entries as u64,
            ..CacheStats::default()
        }))
    }

    /// Empties the cache: its entries and its counters. Returns the entries removed.
    pub fn cache_clear(&self) -> Result<u64, StoreError> {
        let conn = self.conn();
        let removed = conn.execute("DELETE FROM cache", [])?;
        conn.execute(
            "UPDATE cache_stats SET exact_hits = 0, near_hits = 0, misses = 0,
                saved_input_tokens = 0, saved_output_tokens = 0, saved_ms = 0 WHERE id = 1",
            [],
        )?;
        Ok(removed as u64)
    }
}
