//! The workspace's store, `.agent-ls/store.sqlite` (SQLite, bundled): the agent steps with
//! their inverse edits, so undo and redo survive a restart, and the runs with their
//! iterations, approvals, evaluations and checkpoints, for resume and `agent-ls stats`. Each
//! write is one statement or one
//! transaction, in WAL mode, so a server killed at any moment reopens to a history where a
//! step is either recorded with its inverse or not at all. The schema is versioned; a store
//! that is corrupt or from a newer agent-ls is moved aside (never silently discarded) and a
//! fresh one started.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use agent_ls_core::agent::RunStatus;
use agent_ls_core::edit::history::Step;

use crate::clock::now_ms;

pub(crate) mod vector_index;

/// The schema this agent-ls writes; a store with a higher `user_version` is from a newer one.
const SCHEMA: i64 = MIGRATIONS.len() as i64;
pub const FILE: &str = ".agent-ls/store.sqlite";

/// The `.gitignore` agent-ls keeps in a workspace's `.agent-ls/`: its own state (the store and
/// its `-wal`/`-shm`, the lock, journals, worktrees, caches) is never staged by `git add -A`,
/// never in a run's checkpoint and never in `git status`. The prompt files a team may share
/// (`.agent-ls/prompts/`) stay visible. It ignores itself too, so it never shows either.
pub const STATE_GITIGNORE: &str = "# agent-ls's own state: never committed, never in a checkpoint (docs/git.md).\n*\n!prompts/\n!prompts/**\n";

/// Writes `STATE_GITIGNORE` into `dir` when it is a workspace's `.agent-ls/` without one. A
/// file the user wrote there is theirs and is kept; a failure costs only the ignoring.
pub fn ignore_state(dir: &Path) {
    if dir.file_name() != Some(std::ffi::OsStr::new(".agent-ls")) {
        return;
    }
    let file = dir.join(".gitignore");
    if file.exists() {
        return;
    }
    if let Err(e) = std::fs::write(&file, STATE_GITIGNORE) {
        tracing::debug!("cannot write {}: {e}", file.display());
    }
}

pub struct Store {
    conn: Connection,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the store {0}: {1}")]
    Open(PathBuf, String),
    #[error("the store failed: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// The store's schema, one migration per version: `MIGRATIONS[n]` takes a store from
/// `user_version` n to n + 1, in one transaction.
const MIGRATIONS: [&str; 13] = [
    "CREATE TABLE IF NOT EXISTS steps (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        goal TEXT NOT NULL,
        changes TEXT NOT NULL,
        undone INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL
     );",
    "CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY,
        goal TEXT NOT NULL,
        intent TEXT,
        status TEXT NOT NULL,
        pid INTEGER NOT NULL,
        started_ms INTEGER NOT NULL,
        finished_ms INTEGER,
        iterations INTEGER NOT NULL DEFAULT 0,
        checkpoint TEXT,
        tests_passed INTEGER,
        tests_failed INTEGER,
        answer TEXT
     );
     CREATE TABLE IF NOT EXISTS iterations (
        run_id TEXT NOT NULL,
        n INTEGER NOT NULL,
        phase TEXT NOT NULL,
        model TEXT,
        tokens INTEGER NOT NULL DEFAULT 0,
        model_ms INTEGER NOT NULL DEFAULT 0,
        test_ms INTEGER NOT NULL DEFAULT 0,
        tests_passed INTEGER,
        tests_failed INTEGER,
        fingerprint TEXT,
        reflection TEXT,
        PRIMARY KEY (run_id, n)
     );
     CREATE TABLE IF NOT EXISTS approvals (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        iteration INTEGER NOT NULL,
        accepted INTEGER NOT NULL,
        files TEXT NOT NULL,
        created_ms INTEGER NOT NULL
     );
     CREATE TABLE IF NOT EXISTS evaluations (
        run_id TEXT NOT NULL,
        score INTEGER NOT NULL,
        reason TEXT NOT NULL,
        created_ms INTEGER NOT NULL
     );",
    "ALTER TABLE steps ADD COLUMN task TEXT NOT NULL DEFAULT '';
     ALTER TABLE steps ADD COLUMN files TEXT NOT NULL DEFAULT '[]';",
    "ALTER TABLE runs ADD COLUMN proc_start INTEGER;",
    // The prompt tokens the provider's prompt cache served.
    "ALTER TABLE iterations ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;",
    // The run's git checkpoint (a commit id) and what it left in each file it changed
    // (JSON: path to blob id, or null for a deleted file), for `agent-ls diff` and `rollback`.
    "ALTER TABLE runs ADD COLUMN git_checkpoint TEXT;
     ALTER TABLE runs ADD COLUMN git_files TEXT;",
    // The commit made of the run's files (`agent-ls commit`), which `agent-ls pr` pushes.
    "ALTER TABLE runs ADD COLUMN git_commit TEXT;",
    // Each review of a run's diff: reviewed or unavailable, its verdict, whether it blocked,
    // and its findings counted by priority, for `agent-ls stats`.
    "CREATE TABLE IF NOT EXISTS reviews (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        status TEXT NOT NULL,
        verdict TEXT,
        blocking INTEGER NOT NULL DEFAULT 0,
        p0 INTEGER NOT NULL DEFAULT 0,
        p1 INTEGER NOT NULL DEFAULT 0,
        p2 INTEGER NOT NULL DEFAULT 0,
        p3 INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL
     );",
    // Memory across runs (docs/memory.md): one row per record (`memory::Record` as JSON, its
    // secrets already redacted), and its words in a contentless FTS5 index whose rowid is the
    // row's id; `secure-delete` makes a forgotten record's words leave the index's pages too.
    "CREATE TABLE IF NOT EXISTS memories (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        sig_kind TEXT NOT NULL,
        record TEXT NOT NULL,
        created_ms INTEGER NOT NULL
     );
     CREATE INDEX IF NOT EXISTS memories_scope ON memories (scope, sig_kind);
     CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5 (
        body, content = '', contentless_delete = 1
     );
     INSERT INTO memories_fts (memories_fts, rank) VALUES ('secure-delete', 1);
     CREATE VIRTUAL TABLE IF NOT EXISTS memories_vocab USING fts5vocab (memories_fts, row);",
    // The response cache (docs/cache.md): one row per answer, under the hash of its request
    // (`key`) and of its near-duplicate scope (`scope`, NULL when it takes none), with its
    // question's words, what the original call took, and `used`, a counter for LRU eviction;
    // and one row of counters for `agent-ls cache stats`.
    "CREATE TABLE IF NOT EXISTS cache (
        key TEXT PRIMARY KEY,
        scope TEXT,
        label TEXT NOT NULL,
        words TEXT NOT NULL DEFAULT '',
        answer TEXT NOT NULL,
        tool_calls INTEGER NOT NULL DEFAULT 0,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        duration_ms INTEGER NOT NULL DEFAULT 0,
        created_ms INTEGER NOT NULL,
        used INTEGER NOT NULL
     );
     CREATE INDEX IF NOT EXISTS cache_scope ON cache (scope);
     CREATE INDEX IF NOT EXISTS cache_used ON cache (used);
     CREATE TABLE IF NOT EXISTS cache_stats (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        exact_hits INTEGER NOT NULL DEFAULT 0,
        near_hits INTEGER NOT NULL DEFAULT 0,
        misses INTEGER NOT NULL DEFAULT 0,
        saved_input_tokens INTEGER NOT NULL DEFAULT 0,
        saved_output_tokens INTEGER NOT NULL DEFAULT 0,
        saved_ms INTEGER NOT NULL DEFAULT 0
     );
     INSERT OR IGNORE INTO cache_stats (id) VALUES (1);",
    // Memory records'
    // embeddings (docs/memory.md), when `[memory] embeddings` is configured. One row per
    // record (`memories.id`), with the model that computed it and its length, since a store
    // outlives a change of model; the vector in sqlite-vec's float32 form (little-endian
    // f32s), ranked with its `vec_distance_cosine`. A plain table rather than a `vec0` one:
    // vec0 fixes the length when the table is made, and it is learned from the model's first
    // answer.
    "CREATE TABLE IF NOT EXISTS memory_vectors (
        memory_id INTEGER PRIMARY KEY,
        model TEXT NOT NULL,
        dims INTEGER NOT NULL,
        embedding BLOB NOT NULL
     );",
    // The memory vectors' index (`vector_index`): its tables are made per dimension, so
    // this migration's work is `vector_index::ensure_all`, for the vectors already kept.
    "",
    // Each rollback (a run's id, or an MCP checkpoint's), so a second rollback of the same
    // target knows the files it finds changed are the user's, not the run's (`runs::rollback`).
    "CREATE TABLE IF NOT EXISTS rollbacks (
        target TEXT NOT NULL,
        created_ms INTEGER NOT NULL
     );
     CREATE INDEX IF NOT EXISTS rollbacks_target ON rollbacks (target);",
];

/// The version whose migration makes the memory vectors' index (`vector_index`).
const VECTOR_INDEX_VERSION: usize = 12;

/// Registers sqlite-vec (compiled into this binary by the `sqlite-vec` crate) as an
/// extension every SQLite connection of this process loads when it opens, once: memory's
/// vector search uses its `vec_distance_cosine`.
fn load_sqlite_vec() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        type Entry = unsafe extern "C" fn(
            *mut rusqlite::ffi::sqlite3,
            *mut *mut std::os::raw::c_char,
            *const rusqlite::ffi::sqlite3_api_routines,
        ) -> std::os::raw::c_int;
        // SAFETY: the crate declares `sqlite3_vec_init` without arguments, but the C function
        // is an extension's entry point of the three-argument form `Entry`; compiled with
        // SQLITE_CORE it calls SQLite directly and ignores the routines pointer. Registering a
        // static entry point is what sqlite3_auto_extension is for.
        let rc = unsafe {
            let entry =
                std::mem::transmute::<unsafe extern "C" fn(), Entry>(sqlite_vec::sqlite3_vec_init);
            rusqlite::ffi::sqlite3_auto_extension(Some(entry))
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            tracing::warn!(
                "sqlite-vec could not be registered (code {rc}): memory ranks by text only"
            );
        }
    });
}

impl Store {
    /// Opens (or creates) the store. The second value says what was moved aside, if anything.
    pub fn open(root: &Path) -> Result<(Store, Option<String>), StoreError> {
        Store::open_file(&root.join(FILE))
    }

    /// Opens (or creates) a store at `path`: the workspace's, or the user's memory store.
    pub fn open_file(path: &Path) -> Result<(Store, Option<String>), StoreError> {
        let path = path.to_path_buf();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Open(path.clone(), e.to_string()))?;
            ignore_state(dir);
        }
        let mut notice = None;
        if path.exists()
            && let Some(problem) = check(&path)
        {
            let aside = path.with_extension(format!("sqlite.{problem}-{}", std::process::id()));
            std::fs::rename(&path, &aside)
                .map_err(|e| StoreError::Open(path.clone(), e.to_string()))?;
            for suffix in ["-wal", "-shm"] {
                let side = PathBuf::from(format!("{}{suffix}", path.display()));
                let _ =
                    std::fs::rename(&side, PathBuf::from(format!("{}{suffix}", aside.display())));
            }
            notice = Some(format!(
                "the store {} was {problem}; it was moved to {} and a new one started",
                path.display(),
                aside.display()
            ));
        }
        Ok((Store::connect(&path)?, notice))
    }

    /// Opens the workspace's store once more, for a second connection in a process that has
    /// opened (and so checked) it already: without the integrity check, which reads the whole
    /// file, and which must never move aside a store another connection of ours holds.
    pub fn reopen(root: &Path) -> Result<Store, StoreError> {
        Store::connect(&root.join(FILE))
    }

    fn connect(path: &Path) -> Result<Store, StoreError> {
        let path = path.to_path_buf();
        load_sqlite_vec();
        let conn =
            Connection::open(&path).map_err(|e| StoreError::Open(path.clone(), e.to_string()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // The server and `agent-ls run` may write at the same time; wait for the other's
        // transaction rather than failing.
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let store = Store { conn };
        store.migrate()?;
        Ok(store)
    }

    /// The connection, for the modules that keep their own tables in the store (`memory`).
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        let done = usize::try_from(version).unwrap_or(0);
        for (from, sql) in MIGRATIONS.iter().enumerate().skip(done) {
            // Immediate, so a second process migrating at the same time waits for this one
            // and then finds the version done, rather than failing on a stale snapshot.
            let tx = rusqlite::Transaction::new_unchecked(
                &self.conn,
                rusqlite::TransactionBehavior::Immediate,
            )?;
            let now: i64 = self
                .conn
                .pragma_query_value(None, "user_version", |r| r.get(0))?;
            if usize::try_from(now).unwrap_or(0) > from {
                continue;
            }
            self.conn.execute_batch(sql)?;
            if from + 1 == VECTOR_INDEX_VERSION {
                vector_index::ensure_all(&self.conn)?;
            }
            self.conn
                .pragma_update(None, "user_version", from as i64 + 1)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// A run started (or was resumed by this process).
    /// Marks a run that was a review alone (`agent-ls review`, the editor's on-demand review):
    /// `stats` counts it with the reviews, not among the runs.
    pub fn mark_review_only(&self, run_id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET intent = 'review_only' WHERE run_id = ?1",
            params![run_id],
        )?;
        Ok(())
    }

    pub fn run_started(
        &self,
        run_id: &str,
        goal: &str,
        intent: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO runs (run_id, goal, intent, status, pid, started_ms, proc_start) VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6)
             ON CONFLICT(run_id) DO UPDATE SET status = 'running', pid = ?4, proc_start = ?6, finished_ms = NULL",
            params![
                run_id,
                goal,
                intent,
                std::process::id() as i64,
                now_ms(),
                process_start(std::process::id() as i64)
            ],
        )?;
        Ok(())
    }

    /// The loop's state at the start of an iteration, for `agent-ls.resume`.
    pub fn checkpoint(&self, run_id: &str, iterations: u32, state: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET checkpoint = ?2, iterations = ?3 WHERE run_id = ?1",
            params![run_id, state, iterations as i64],
        )?;
        Ok(())
    }

    /// Writes one iteration's figures (again, as they grow).
    pub fn iteration(&self, run_id: &str, it: &Iteration) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO iterations (run_id, n, phase, model, tokens, model_ms, test_ms, tests_passed, tests_failed, fingerprint, reflection, cached_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                run_id,
                it.n as i64,
                it.phase.map_or("", |p| p.as_str()),
                it.model,
                it.tokens as i64,
                it.model_ms as i64,
                it.test_ms as i64,
                it.tests_passed.map(i64::from),
                it.tests_failed.map(i64::from),
                it.fingerprint,
                it.reflection,
                it.cached_tokens as i64
            ],
        )?;
        Ok(())
    }

    pub fn approval(
        &self,
        run_id: &str,
        iteration: u32,
        accepted: bool,
        files: &[String],
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO approvals (run_id, iteration, accepted, files, created_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![run_id, iteration as i64, accepted as i64, files.join("\n"), now_ms()],
        )?;
        Ok(())
    }

    pub fn evaluation(&self, run_id: &str, score: u8, reason: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO evaluations (run_id, score, reason, created_ms) VALUES (?1, ?2, ?3, ?4)",
            params![run_id, score as i64, reason, now_ms()],
        )?;
        Ok(())
    }

    /// A review of a run's diff, with its findings counted by priority.
    pub fn review(
        &self,
        run_id: &str,
        result: &agent_ls_core::agent::review::ReviewResult,
    ) -> Result<(), StoreError> {
        use agent_ls_core::agent::review::{ReviewResult, Verdict};
        let (status, verdict, blocking, by) = match result {
            ReviewResult::Unavailable { .. } => ("unavailable", None, false, [0i64; 4]),
            ReviewResult::Reviewed { review, blocking } => {
                let mut by = [0i64; 4];
                for f in &review.findings {
                    by[usize::from(f.priority.min(3))] += 1;
                }
                let verdict = match review.verdict {
                    Verdict::Correct => "correct",
                    Verdict::Incorrect => "incorrect",
                };
                ("reviewed", Some(verdict), *blocking, by)
            }
        };
        self.conn.execute(
            "INSERT INTO reviews (run_id, status, verdict, blocking, p0, p1, p2, p3, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                run_id,
                status,
                verdict,
                blocking as i64,
                by[0],
                by[1],
                by[2],
                by[3],
                now_ms()
            ],
        )?;
        Ok(())
    }

    /// Reviews over all runs: how many, how many rejected the change (verdict incorrect) or
    /// were unavailable, and their findings by priority.
    fn review_totals(&self) -> Result<ReviewTotals, StoreError> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(verdict = 'incorrect'), 0),
                    COALESCE(SUM(status = 'unavailable'), 0), COALESCE(SUM(blocking), 0),
                    COALESCE(SUM(p0), 0), COALESCE(SUM(p1), 0), COALESCE(SUM(p2), 0),
                    COALESCE(SUM(p3), 0)
             FROM reviews",
            [],
            |r| {
                let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u32);
                Ok(ReviewTotals {
                    reviews: n(0)?,
                    rejections: n(1)?,
                    unavailable: n(2)?,
                    blocking: n(3)?,
                    findings_by_priority: [n(4)?, n(5)?, n(6)?, n(7)?],
                })
            },
        )?)
    }

    /// The run ended: its status, tests and answer. The checkpoint goes, since a finished run
    /// is not resumed.
    pub fn run_finished(
        &self,
        run_id: &str,
        status: RunStatus,
        iterations: u32,
        tests: Option<(u32, u32)>,
        answer: &str,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET status = ?2, finished_ms = ?3, iterations = ?4, tests_passed = ?5, tests_failed = ?6, answer = ?7, checkpoint = NULL
             WHERE run_id = ?1",
            params![
                run_id,
                status.as_str(),
                now_ms(),
                iterations as i64,
                tests.map(|t| t.0 as i64),
                tests.map(|t| t.1 as i64),
                answer
            ],
        )?;
        Ok(())
    }

    /// Runs recorded as running whose process is gone (or is `this` process but not running
    /// them any more, `active` being the one it runs): a crash or a restart interrupted them.
    pub fn interrupted_runs(&self, active: Option<&str>) -> Result<Vec<Interrupted>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, goal, pid, iterations, started_ms, checkpoint IS NOT NULL, proc_start FROM runs
             WHERE status = 'running' ORDER BY started_ms DESC",
        )?;
        type Running = (String, String, i64, i64, i64, bool, Option<i64>);
        let rows = stmt.query_map([], |r| Running::try_from(r))?;
        let me = std::process::id() as i64;
        let mut out = Vec::new();
        for row in rows {
            let (run_id, goal, pid, iterations, started_ms, has_checkpoint, proc_start) = row?;
            let alive = if pid == me && proc_start == process_start(me) {
                active == Some(run_id.as_str())
            } else {
                // A live process with this pid is the run's only if it started when the run's
                // did: pids are reused, after a reboot especially.
                process_alive(pid) && (proc_start.is_none() || proc_start == process_start(pid))
            };
            if !alive {
                out.push(Interrupted {
                    run_id,
                    goal,
                    iterations: iterations as u32,
                    started_ms,
                    has_checkpoint,
                });
            }
        }
        Ok(out)
    }

    /// The run's git checkpoint, taken before it wrote anything.
    pub fn git_checkpoint(&self, run_id: &str, commit: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET git_checkpoint = ?2 WHERE run_id = ?1",
            params![run_id, commit],
        )?;
        Ok(())
    }

    /// What the run left in each file it changed (JSON), at its end.
    pub fn git_files(&self, run_id: &str, files: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET git_files = ?2 WHERE run_id = ?1",
            params![run_id, files],
        )?;
        Ok(())
    }

    /// The commit made of the run's files.
    pub fn git_commit(&self, run_id: &str, commit: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE runs SET git_commit = ?2 WHERE run_id = ?1",
            params![run_id, commit],
        )?;
        Ok(())
    }

    /// The commit made of the run's files, if one was.
    pub fn git_commit_of(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT git_commit FROM runs WHERE run_id = ?1")?;
        let mut rows = stmt.query(params![run_id])?;
        match rows.next()? {
            Some(r) => Ok(r.get(0)?),
            None => Ok(None),
        }
    }

    /// A run with a git checkpoint (`run_id`, or the latest one): its id, checkpoint and
    /// the JSON of what it left in the files it changed (None when it never finished).
    pub fn git_run(
        &self,
        run_id: Option<&str>,
    ) -> Result<Option<(String, String, Option<String>)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, git_checkpoint, git_files FROM runs
             WHERE git_checkpoint IS NOT NULL AND (?1 IS NULL OR run_id = ?1)
             ORDER BY started_ms DESC, rowid DESC LIMIT 1",
        )?;
        let mut rows = stmt.query(params![run_id])?;
        match rows.next()? {
            Some(r) => Ok(Some((r.get(0)?, r.get(1)?, r.get(2)?))),
            None => Ok(None),
        }
    }

    /// When the run with a git checkpoint (`run_id`, or the latest one) started, in ms since
    /// the epoch: how `diff`, `rollback` and `commit` pick the latest run among a workspace's
    /// and its isolated runs' stores.
    pub fn git_run_started(&self, run_id: Option<&str>) -> Result<Option<i64>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT started_ms FROM runs
             WHERE git_checkpoint IS NOT NULL AND (?1 IS NULL OR run_id = ?1)
             ORDER BY started_ms DESC, rowid DESC LIMIT 1",
        )?;
        let mut rows = stmt.query(params![run_id])?;
        match rows.next()? {
            Some(r) => Ok(Some(r.get(0)?)),
            None => Ok(None),
        }
    }

    /// The goal, last checkpoint (the loop's state as JSON) and status of a run.
    pub fn resume_point(
        &self,
        run_id: &str,
    ) -> Result<Option<(String, Option<String>, RunStatus)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT goal, checkpoint, status FROM runs WHERE run_id = ?1")?;
        let mut rows = stmt.query(params![run_id])?;
        match rows.next()? {
            Some(r) => {
                let status: String = r.get(2)?;
                Ok(Some((
                    r.get(0)?,
                    r.get(1)?,
                    RunStatus::parse(&status).unwrap_or(RunStatus::Failed),
                )))
            }
            None => Ok(None),
        }
    }

    /// Figures per run (newest first, at most `limit`) and over all runs.
    pub fn stats(&self, limit: usize) -> Result<Stats, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT r.run_id, r.goal, r.status, r.started_ms, r.finished_ms, r.iterations, r.tests_passed, r.tests_failed,
                    COALESCE(SUM(i.tokens), 0), COALESCE(SUM(i.model_ms), 0), COALESCE(SUM(i.test_ms), 0),
                    (SELECT COUNT(*) FROM approvals a WHERE a.run_id = r.run_id),
                    (SELECT COUNT(*) FROM approvals a WHERE a.run_id = r.run_id AND a.accepted = 1),
                    (SELECT MAX(score) FROM evaluations e WHERE e.run_id = r.run_id),
                    COALESCE(SUM(i.cached_tokens), 0)
             FROM runs r LEFT JOIN iterations i ON i.run_id = r.run_id
             WHERE r.intent IS NOT 'review_only'
             GROUP BY r.run_id ORDER BY r.started_ms DESC",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(RunStats {
                run_id: r.get(0)?,
                goal: r.get(1)?,
                status: RunStatus::parse(&r.get::<_, String>(2)?).unwrap_or(RunStatus::Failed),
                started_ms: r.get(3)?,
                duration_ms: r
                    .get::<_, Option<i64>>(4)?
                    .map(|f| f - r.get::<_, i64>(3).unwrap_or(f)),
                iterations: r.get::<_, i64>(5)? as u32,
                tests_passed: r.get::<_, Option<i64>>(6)?.map(|v| v as u32),
                tests_failed: r.get::<_, Option<i64>>(7)?.map(|v| v as u32),
                tokens: r.get::<_, i64>(8)? as u64,
                model_ms: r.get::<_, i64>(9)? as u64,
                test_ms: r.get::<_, i64>(10)? as u64,
                proposals: r.get::<_, i64>(11)? as u32,
                accepted: r.get::<_, i64>(12)? as u32,
                evaluation: r.get::<_, Option<i64>>(13)?.map(|v| v as u8),
                cached_tokens: r.get::<_, i64>(14)? as u64,
            })
        })?;
        let runs: Vec<RunStats> = rows.collect::<Result<_, _>>()?;
        let finished: Vec<&RunStats> = runs
            .iter()
            .filter(|r| matches!(r.status, RunStatus::Done | RunStatus::Failed))
            .collect();
        let proposals: u32 = runs.iter().map(|r| r.proposals).sum();
        let accepted: u32 = runs.iter().map(|r| r.accepted).sum();
        let total = Totals {
            runs: runs.len() as u32,
            done: runs.iter().filter(|r| r.status == RunStatus::Done).count() as u32,
            failed: runs
                .iter()
                .filter(|r| r.status == RunStatus::Failed)
                .count() as u32,
            cancelled: runs
                .iter()
                .filter(|r| r.status == RunStatus::Cancelled)
                .count() as u32,
            tokens: runs.iter().map(|r| r.tokens).sum(),
            cached_tokens: runs.iter().map(|r| r.cached_tokens).sum(),
            model_ms: runs.iter().map(|r| r.model_ms).sum(),
            test_ms: runs.iter().map(|r| r.test_ms).sum(),
            iterations: runs.iter().map(|r| r.iterations).sum(),
            pass_rate: (!finished.is_empty()).then(|| {
                finished
                    .iter()
                    .filter(|r| r.status == RunStatus::Done)
                    .count() as f64
                    / finished.len() as f64
            }),
            proposals,
            accepted,
            acceptance_rate: (proposals > 0).then(|| accepted as f64 / proposals as f64),
            review: self.review_totals()?,
        };
        Ok(Stats {
            total,
            runs: runs.into_iter().take(limit).collect(),
        })
    }

    pub fn load_steps(&self) -> Result<Vec<(Step, bool)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, run_id, goal, changes, undone, task, files FROM steps ORDER BY id",
        )?;
        type StepRow = (i64, String, String, String, i64, String, String);
        let rows = stmt.query_map([], |r| StepRow::try_from(r))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, run_id, goal, changes, undone, task, files) = row?;
            // A row whose changes cannot be read is skipped rather than failing the history.
            let Ok(changes) = serde_json::from_str(&changes) else {
                tracing::warn!(id, "a stored step could not be read; skipped");
                continue;
            };
            out.push((
                Step {
                    id: id as u64,
                    run_id,
                    goal,
                    task,
                    changes,
                    // The files' record is informative; one that does not read is left empty.
                    files: serde_json::from_str(&files).unwrap_or_default(),
                },
                undone != 0,
            ));
        }
        Ok(out)
    }

    /// Records a step; in the same transaction, drops the steps that could have been redone.
    pub fn record_step(&mut self, step: &Step) -> Result<(), StoreError> {
        let changes = serde_json::to_string(&step.changes)
            .map_err(|e| StoreError::Open(PathBuf::from(FILE), e.to_string()))?;
        let files = serde_json::to_string(&step.files)
            .map_err(|e| StoreError::Open(PathBuf::from(FILE), e.to_string()))?;
        let now = now_ms();
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM steps WHERE undone = 1", [])?;
        // The run writes again (resumed after its rollback): a later rollback is a first one.
        tx.execute(
            "DELETE FROM rollbacks WHERE target = ?1",
            params![step.run_id],
        )?;
        tx.execute(
            "INSERT INTO steps (id, run_id, goal, changes, undone, created_ms, task, files) VALUES (?1, ?2, ?3, ?4, 0, ?5, ?6, ?7)",
            params![step.id as i64, step.run_id, step.goal, changes, now, step.task, files],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Records that `target` (a run, or an MCP checkpoint) was rolled back.
    pub fn record_rollback(&self, target: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO rollbacks (target, created_ms) VALUES (?1, ?2)",
            params![target, now_ms()],
        )?;
        Ok(())
    }

    /// Whether `target` was rolled back and not redone since.
    pub fn rolled_back(&self, target: &str) -> Result<bool, StoreError> {
        let n: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM rollbacks WHERE target = ?1",
            params![target],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    }

    /// Forgets `target`'s rollbacks: one of its steps was redone, so it is applied again.
    pub fn forget_rollback(&self, target: &str) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM rollbacks WHERE target = ?1", params![target])?;
        Ok(())
    }

    /// Marks undone the applied steps a rollback took back: run `run_id`'s, or (`since_ms`)
    /// every step recorded since a checkpoint was taken, each only when `restored` holds
    /// every file it changed (a file the rollback left alone keeps its step). Their ids.
    pub fn undo_steps(
        &self,
        run_id: &str,
        since_ms: Option<i64>,
        restored: &dyn Fn(&str) -> bool,
    ) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, changes FROM steps
             WHERE undone = 0 AND (run_id = ?1 OR created_ms >= ?2) ORDER BY id",
        )?;
        let rows = stmt.query_map(params![run_id, since_ms.unwrap_or(i64::MAX)], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut ids = Vec::new();
        for row in rows {
            let (id, changes) = row?;
            // A step whose changes do not read is one nobody can undo either: left as it is.
            let Ok(changes) =
                serde_json::from_str::<Vec<agent_ls_core::edit::FileChange>>(&changes)
            else {
                continue;
            };
            if changes.iter().all(|c| restored(&c.path)) {
                ids.push(id as u64);
            }
        }
        for id in &ids {
            self.set_undone(*id, true)?;
        }
        Ok(ids)
    }

    /// The run a step belongs to (`None`: no such step).
    pub fn step_run(&self, id: u64) -> Result<Option<String>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT run_id FROM steps WHERE id = ?1")?;
        let mut rows = stmt.query(params![id as i64])?;
        match rows.next()? {
            Some(r) => Ok(Some(r.get(0)?)),
            None => Ok(None),
        }
    }

    /// When a step was recorded (ms since the epoch; `None`: no such step): a rewind finds
    /// by it where the step stands in its run's journal.
    pub fn step_recorded_ms(&self, id: u64) -> Result<Option<i64>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT created_ms FROM steps WHERE id = ?1")?;
        let mut rows = stmt.query(params![id as i64])?;
        match rows.next()? {
            Some(r) => Ok(Some(r.get(0)?)),
            None => Ok(None),
        }
    }

    pub fn set_undone(&self, id: u64, undone: bool) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE steps SET undone = ?1 WHERE id = ?2",
            params![undone as i64, id as i64],
        )?;
        Ok(())
    }
}

/// One iteration's figures: the coder's attempt, its tests and the reflection on them.
/// Iteration 0 holds what came before the first attempt (intent, plan, baseline tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Iteration {
    pub n: u32,
    /// Where the iteration stands; none before its first step is seen.
    pub phase: Option<agent_ls_core::agent::Phase>,
    pub model: Option<String>,
    pub tokens: u64,
    /// Of `tokens`, the prompt tokens the provider's prompt cache served.
    pub cached_tokens: u64,
    pub model_ms: u64,
    pub test_ms: u64,
    pub tests_passed: Option<u32>,
    pub tests_failed: Option<u32>,
    pub fingerprint: Option<String>,
    pub reflection: Option<String>,
}

/// A run a crash or restart interrupted.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Interrupted {
    pub run_id: String,
    pub goal: String,
    pub iterations: u32,
    pub started_ms: i64,
    pub has_checkpoint: bool,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RunStats {
    pub run_id: String,
    pub goal: String,
    pub status: RunStatus,
    pub started_ms: i64,
    pub duration_ms: Option<i64>,
    pub iterations: u32,
    pub tests_passed: Option<u32>,
    pub tests_failed: Option<u32>,
    pub tokens: u64,
    /// Of `tokens`, the prompt tokens the provider's prompt cache served.
    pub cached_tokens: u64,
    pub model_ms: u64,
    pub test_ms: u64,
    /// Changes proposed for approval, and how many the user accepted.
    pub proposals: u32,
    pub accepted: u32,
    pub evaluation: Option<u8>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Totals {
    pub runs: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub tokens: u64,
    pub cached_tokens: u64,
    pub model_ms: u64,
    pub test_ms: u64,
    pub iterations: u32,
    /// Done runs over finished (done or failed) runs; cancelled runs do not count.
    pub pass_rate: Option<f64>,
    pub proposals: u32,
    pub accepted: u32,
    pub acceptance_rate: Option<f64>,
    pub review: ReviewTotals,
}

/// The reviews of all runs' diffs (`agent.review`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReviewTotals {
    pub reviews: u32,
    /// Reviews whose verdict was `incorrect`.
    pub rejections: u32,
    /// Reviews that could not be had (the reviewer failed or its answer did not parse).
    pub unavailable: u32,
    /// Reviews whose findings would block (in gate mode they sent the change back).
    pub blocking: u32,
    /// Findings of P0, P1, P2 and P3.
    pub findings_by_priority: [u32; 4],
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Stats {
    pub total: Totals,
    pub runs: Vec<RunStats>,
}

/// When a process started, in clock ticks since boot (field 22 of /proc/PID/stat); `None`
/// where /proc is not there. With the pid it names one process across pid reuse.
fn process_start(pid: i64) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn process_alive(pid: i64) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0 checks existence; EPERM means it exists under another user.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    }
}

/// Why an existing store cannot be used: "corrupt", or "newer" (from a later schema).
fn check(path: &Path) -> Option<&'static str> {
    let conn = match Connection::open(path) {
        Ok(c) => c,
        Err(_) => return Some("corrupt"),
    };
    // A lock answers at once here (rusqlite's default would wait 5 s): the open that follows
    // waits for it anyway.
    let _ = conn.busy_timeout(std::time::Duration::ZERO);
    let ok: Result<String, _> = conn.query_row("PRAGMA quick_check", [], |r| r.get(0));
    match ok.as_deref() {
        Ok("ok") => {}
        // Another process holds the lock: that says nothing of the file, which must not be
        // moved aside for it. Opening it then waits for the lock like any other use.
        Err(e) if busy(e) => return None,
        _ => return Some("corrupt"),
    }
    match conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)) {
        Ok(v) if v > SCHEMA => Some("newer"),
        Ok(_) => None,
        Err(e) if busy(&e) => None,
        Err(_) => Some("corrupt"),
    }
}

/// SQLite's "the database is locked" (by another connection or process).
fn busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// The store on a thread of its own. rusqlite is synchronous and SQLite may wait up to its
/// busy timeout for another process's transaction, so no async task (and never the
/// session's) calls it directly: work is sent here as closures and runs in the order sent.
#[derive(Clone)]
pub struct StoreThread {
    tx: std::sync::mpsc::Sender<Job>,
}

type Job = Box<dyn FnOnce(Option<&mut Store>) + Send>;

impl StoreThread {
    /// Starts the thread, which opens the workspace's store. `opened` hears how that went:
    /// what was moved aside, or why there is no store (every call then gets `None`).
    pub fn open(
        root: PathBuf,
        opened: impl FnOnce(Result<Option<String>, StoreError>) + Send + 'static,
    ) -> StoreThread {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let spawned = std::thread::Builder::new()
            .name("agent-ls store".into())
            .spawn(move || {
                let mut store = match Store::open(&root) {
                    Ok((store, notice)) => {
                        opened(Ok(notice));
                        Some(store)
                    }
                    Err(e) => {
                        opened(Err(e));
                        None
                    }
                };
                while let Ok(job) = rx.recv() {
                    // A panicking job must not end the thread, or every later call would
                    // find no store; its caller hears nothing (its reply is dropped).
                    let run = std::panic::AssertUnwindSafe(|| job(store.as_mut()));
                    if std::panic::catch_unwind(run).is_err() {
                        tracing::error!("a store job panicked; the store goes on");
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the store's thread: {e}");
        }
        StoreThread { tx }
    }

    /// Runs `f` on the store, without waiting; a failure is logged (a store that cannot be
    /// written costs figures or history, never the run).
    pub fn send(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut Store) -> Result<(), StoreError> + Send + 'static,
    ) {
        let job: Job = Box::new(move |store| {
            if let Some(store) = store
                && let Err(e) = f(store)
            {
                tracing::warn!("the store could not record {what}: {e}");
            }
        });
        let _ = self.tx.send(job);
    }

    /// Runs `f` on the store and returns its answer; `None` when there is no store.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> Option<T> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |store| {
            let _ = reply.send(store.map(f));
        });
        self.tx.send(job).ok()?;
        answer.await.ok().flatten()
    }

    /// Waits until everything sent before has been written (for a process about to exit).
    pub fn flush_blocking(&self) {
        let (reply, answer) = std::sync::mpsc::channel();
        let job: Job = Box::new(move |_| {
            let _ = reply.send(());
        });
        if self.tx.send(job).is_ok() {
            let _ = answer.recv_timeout(std::time::Duration::from_secs(10));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_another_connection_holds_locked_is_not_moved_aside_as_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A store in rollback-journal mode (another tool made it), locked for writing.
        let holder = Connection::open(&path).unwrap();
        holder
            .execute_batch("CREATE TABLE t (x); BEGIN EXCLUSIVE; INSERT INTO t VALUES (1);")
            .unwrap();
        assert_eq!(check(&path), None);
        holder.execute_batch("COMMIT").unwrap();
        drop(holder);
        let (_store, notice) = Store::open(dir.path()).unwrap();
        assert_eq!(notice, None, "nothing was moved aside");
        let aside = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("corrupt"))
            .count();
        assert_eq!(aside, 0);
    }

    #[test]
    fn a_version_1_store_migrates_and_keeps_its_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, goal TEXT NOT NULL,
                     changes TEXT NOT NULL, undone INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);
                 INSERT INTO steps VALUES (1, 'run_1', 'g', '[]', 0, 0);
                 PRAGMA user_version = 1;",
            )
            .unwrap();
        }
        let (store, notice) = Store::open(dir.path()).unwrap();
        assert!(notice.is_none());
        assert_eq!(store.load_steps().unwrap().len(), 1);
        let version: i64 = store
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA);
        store.run_started("run_2", "fix", Some("fix")).unwrap();
        assert_eq!(store.stats(10).unwrap().total.runs, 1);
    }

    #[test]
    fn reviews_are_counted_with_their_rejections_and_findings_by_priority() {
        use agent_ls_core::agent::review::{Finding, Review, ReviewResult, Verdict};
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        let finding = |priority| Finding {
            title: "t".into(),
            body: String::new(),
            priority,
            confidence: 0.9,
            path: "a.py".into(),
            start_line: 1,
            end_line: 1,
            outside_change: false,
        };
        let reviewed = |verdict, findings, blocking| ReviewResult::Reviewed {
            review: Review {
                findings,
                verdict,
                explanation: String::new(),
                confidence: 0.9,
            },
            blocking,
        };
        store
            .review(
                "r1",
                &reviewed(Verdict::Incorrect, vec![finding(1), finding(3)], true),
            )
            .unwrap();
        store
            .review("r1", &reviewed(Verdict::Correct, vec![finding(3)], false))
            .unwrap();
        let unavailable = ReviewResult::Unavailable { reason: "x".into() };
        store.review("r2", &unavailable).unwrap();
        let r = store.stats(10).unwrap().total.review;
        assert_eq!(
            (r.reviews, r.rejections, r.unavailable, r.blocking),
            (3, 1, 1, 1)
        );
        assert_eq!(r.findings_by_priority, [0, 1, 0, 2]);
    }

    #[test]
    fn runs_of_dead_processes_are_interrupted_and_figures_add_up() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open(dir.path()).unwrap();
        store.run_started("run_a", "fix it", Some("fix")).unwrap();
        store.checkpoint("run_a", 1, "{}").unwrap();
        // This process runs run_a: not interrupted while it is the active run.
        assert!(store.interrupted_runs(Some("run_a")).unwrap().is_empty());
        let gone = store.interrupted_runs(None).unwrap();
        assert_eq!(gone.len(), 1);
        assert!(gone[0].has_checkpoint);
        // A run recorded by a process that no longer exists.
        store
            .conn
            .execute(
                "INSERT INTO runs (run_id, goal, status, pid, started_ms) VALUES ('run_b', 'g', 'running', 2147483646, 1)",
                [],
            )
            .unwrap();
        assert_eq!(store.interrupted_runs(Some("run_a")).unwrap().len(), 1);
        // A live pid that is another process now (it started at another time) is not the run.
        store
            .conn
            .execute(
                "INSERT INTO runs (run_id, goal, status, pid, started_ms, proc_start) VALUES ('run_c', 'g', 'running', 1, 1, -5)",
                [],
            )
            .unwrap();
        let ids: Vec<String> = store
            .interrupted_runs(Some("run_a"))
            .unwrap()
            .into_iter()
            .map(|r| r.run_id)
            .collect();
        assert!(ids.contains(&"run_c".to_string()), "{ids:?}");
        assert!(process_start(std::process::id() as i64).is_some());

        let it = Iteration {
            n: 1,
            phase: Some(agent_ls_core::agent::Phase::Testing),
            tokens: 100,
            model_ms: 40,
            test_ms: 300,
            ..Iteration::default()
        };
        store.iteration("run_a", &it).unwrap();
        store
            .iteration(
                "run_a",
                &Iteration {
                    tokens: 150,
                    cached_tokens: 90,
                    ..it
                },
            )
            .unwrap();
        store.approval("run_a", 1, true, &["a.py".into()]).unwrap();
        store.approval("run_a", 2, false, &["a.py".into()]).unwrap();
        store.evaluation("run_a", 4, "ok").unwrap();
        store
            .run_finished("run_a", RunStatus::Done, 2, Some((3, 0)), "done")
            .unwrap();
        let stats = store.stats(10).unwrap();
        let a = stats.runs.iter().find(|r| r.run_id == "run_a").unwrap();
        assert_eq!(
            (a.tokens, a.cached_tokens, a.model_ms, a.test_ms),
            (150, 90, 40, 300),
            "rewritten, not added twice"
        );
        assert_eq!(stats.total.cached_tokens, 90);
        assert_eq!((a.proposals, a.accepted, a.evaluation), (2, 1, Some(4)));
        assert_eq!(stats.total.acceptance_rate, Some(0.5));
        // run_b is still "running": pass rate counts finished runs only.
        assert_eq!(stats.total.pass_rate, Some(1.0));
        assert!(
            store.resume_point("run_a").unwrap().unwrap().1.is_none(),
            "the checkpoint goes"
        );
    }
}
