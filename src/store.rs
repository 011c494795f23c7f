//! The workspace's store, `.agent-ls/store.sqlite` (SQLite, bundled): the agent steps with
//! their inverse edits, so undo and redo survive a restart. Each write is one statement or one
//! transaction, in WAL mode, so a server killed at any moment reopens to a history where a
//! step is either recorded with its inverse or not at all. The schema is versioned; a store
//! that is corrupt or from a newer agent-ls is moved aside (never silently discarded) and a
//! fresh one started.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, params};

use crate::edit::history::Step;

const SCHEMA: i64 = 1;
pub const FILE: &str = ".agent-ls/store.sqlite";

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

impl Store {
    /// Opens (or creates) the store. The second value says what was moved aside, if anything.
    pub fn open(root: &Path) -> Result<(Store, Option<String>), StoreError> {
        let path = root.join(FILE);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Open(path.clone(), e.to_string()))?;
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
        let conn =
            Connection::open(&path).map_err(|e| StoreError::Open(path.clone(), e.to_string()))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let store = Store { conn };
        store.migrate()?;
        Ok((store, notice))
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version < 1 {
            self.conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS steps (
                     id INTEGER PRIMARY KEY,
                     run_id TEXT NOT NULL,
                     goal TEXT NOT NULL,
                     changes TEXT NOT NULL,
                     undone INTEGER NOT NULL DEFAULT 0,
                     created_ms INTEGER NOT NULL
                 );
                 PRAGMA user_version = 1;
                 COMMIT;",
            )?;
        }
        Ok(())
    }

    pub fn load_steps(&self) -> Result<Vec<(Step, bool)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, run_id, goal, changes, undone FROM steps ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (id, run_id, goal, changes, undone) = row?;
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
                    changes,
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM steps WHERE undone = 1", [])?;
        tx.execute(
            "INSERT INTO steps (id, run_id, goal, changes, undone, created_ms) VALUES (?1, ?2, ?3, ?4, 0, ?5)",
            params![step.id as i64, step.run_id, step.goal, changes, now],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn set_undone(&self, id: u64, undone: bool) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE steps SET undone = ?1 WHERE id = ?2",
            params![undone as i64, id as i64],
        )?;
        Ok(())
    }
}

/// Why an existing store cannot be used: "corrupt", or "newer" (from a later schema).
fn check(path: &Path) -> Option<&'static str> {
    let conn = match Connection::open(path) {
        Ok(c) => c,
        Err(_) => return Some("corrupt"),
    };
    let ok: Result<String, _> = conn.query_row("PRAGMA quick_check", [], |r| r.get(0));
    if !matches!(ok.as_deref(), Ok("ok")) {
        return Some("corrupt");
    }
    match conn.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0)) {
        Ok(v) if v > SCHEMA => Some("newer"),
        Ok(_) => None,
        Err(_) => Some("corrupt"),
    }
}
