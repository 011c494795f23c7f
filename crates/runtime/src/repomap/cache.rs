//! The repo map's tag cache, `.agent-ls/repomap.sqlite`: one row a file (path, mtime, size
//! and a hash of its language and text) and one row a distinct text's tags. A warm build reads
//! the rows and parses only the files whose mtime or size moved; a change writes only its own
//! rows, never the whole cache (the JSON file it replaces was rewritten whole, 47 MB on a
//! 19,000-file repository). Copies of one file (vendored trees, a monorepo's twins) share their
//! tags row, as git shares a blob. A file of its own rather than a table of the run store:
//! the map is written from a background thread while a run holds the store, and a cache
//! lost costs one cold build, nothing else.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::Path;

use rusqlite::{Connection, params};

use agent_ls_core::repomap::tags::Tags;
use agent_ls_core::syntax::Lang;

pub(super) const FILE: &str = "repomap.sqlite";
/// The cache before this one; removed when found (it could be tens of megabytes).
const OLD_FILE: &str = "repomap.json";
/// Bumped when the tags' shape, their encoding or the hash changes: an older cache is
/// dropped and rebuilt. 2: the tags in postcard (varint lengths, no field names), a third
/// of their JSON's size and read several times faster: a warm build of 20,000 files reads
/// every row.
const VERSION: i64 = 2;

/// What the cache knows of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    pub mtime_ns: i64,
    pub size: u64,
    pub hash: u64,
}

/// An open cache, or none when it cannot be opened (the map is then built without one).
pub(super) struct TagCache {
    conn: Option<Connection>,
}

/// The cache at `path`, its tables made (again, when its version is not ours).
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version != VERSION {
        conn.execute_batch(
            "DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS tags;
             CREATE TABLE files (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL,
               size INTEGER NOT NULL, hash INTEGER NOT NULL) WITHOUT ROWID;
             CREATE TABLE tags (hash INTEGER PRIMARY KEY, data BLOB NOT NULL);",
        )?;
        conn.pragma_update(None, "user_version", VERSION)?;
    }
    Ok(conn)
}

/// The hash a file's tags are kept under: its language and text.
pub(super) fn hash_of(lang: Lang, text: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    lang.hash(&mut h);
    text.hash(&mut h);
    h.finish()
}

impl TagCache {
    /// Opens (creating, when `create`) the cache in `state` (the workspace's `.agent-ls`).
    pub(super) fn open(state: &Path, create: bool) -> TagCache {
        let path = state.join(FILE);
        if !create && !path.exists() {
            return TagCache { conn: None };
        }
        let _ = std::fs::create_dir_all(state);
        crate::store::ignore_state(state);
        let _ = std::fs::remove_file(state.join(OLD_FILE));
        // A file that is not a cache of ours (torn, or from elsewhere) is replaced.
        let conn = connect(&path).or_else(|_| {
            std::fs::remove_file(&path).map_err(|_| rusqlite::Error::InvalidQuery)?;
            connect(&path)
        });
        match conn {
            Ok(c) => TagCache { conn: Some(c) },
            Err(e) => {
                tracing::debug!("the repo map's cache cannot be opened: {e}");
                TagCache { conn: None }
            }
        }
    }

    /// Every file the cache knows.
    pub(super) fn files(&self) -> HashMap<String, Known> {
        let Some(conn) = &self.conn else {
            return HashMap::new();
        };
        let read = || -> rusqlite::Result<HashMap<String, Known>> {
            let mut stmt = conn.prepare("SELECT path, mtime_ns, size, hash FROM files")?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Known {
                        mtime_ns: r.get(1)?,
                        size: r.get::<_, i64>(2)? as u64,
                        hash: r.get::<_, i64>(3)? as u64,
                    },
                ))
            })?;
            rows.collect()
        };
        read().unwrap_or_else(|e| {
            tracing::debug!("the repo map's cache cannot be read: {e}");
            HashMap::new()
        })
    }

    /// The tags kept under each of `hashes` that the cache holds. One scan of the table,
    /// which holds only the tags some file uses: a warm build wants nearly all of them, and
    /// a query a hash cost 20,000 round trips on 20,000 files.
    pub(super) fn tags(&self, hashes: impl Iterator<Item = u64>) -> HashMap<u64, Tags> {
        let Some(conn) = &self.conn else {
            return HashMap::new();
        };
        let wanted: std::collections::HashSet<u64> = hashes.collect();
        let read = || -> rusqlite::Result<Vec<(u64, Vec<u8>)>> {
            let mut stmt = conn.prepare("SELECT hash, data FROM tags")?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::with_capacity(wanted.len());
            while let Some(row) = rows.next()? {
                let hash = row.get::<_, i64>(0)? as u64;
                if wanted.contains(&hash) {
                    out.push((hash, row.get(1)?));
                }
            }
            Ok(out)
        };
        let rows = read().unwrap_or_else(|e| {
            tracing::debug!("the repo map's tags cannot be read: {e}");
            Vec::new()
        });
        decode_all(&rows)
    }

    /// Records `fresh` files (their tags kept once a hash) and forgets `gone` ones, in one
    /// transaction; tags no file uses any more go too. A failure is logged: the next build
    /// parses those files again.
    pub(super) fn write(&mut self, fresh: &[(String, Known, Tags)], gone: &[String]) {
        let Some(conn) = &mut self.conn else {
            return;
        };
        if fresh.is_empty() && gone.is_empty() {
            return;
        }
        let mut write = || -> rusqlite::Result<()> {
            let tx = conn.transaction()?;
            {
                let mut file = tx.prepare_cached(
                    "INSERT OR REPLACE INTO files (path, mtime_ns, size, hash) VALUES (?1, ?2, ?3, ?4)",
                )?;
                let mut tag =
                    tx.prepare_cached("INSERT OR IGNORE INTO tags (hash, data) VALUES (?1, ?2)")?;
                for (path, k, tags) in fresh {
                    let data = postcard::to_stdvec(tags).unwrap_or_default();
                    tag.execute(params![k.hash as i64, data])?;
                    file.execute(params![path, k.mtime_ns, k.size as i64, k.hash as i64])?;
                }
                let mut del = tx.prepare_cached("DELETE FROM files WHERE path = ?1")?;
                for path in gone {
                    del.execute([path])?;
                }
            }
            // A changed or deleted file may leave its old text's tags unused.
            tx.execute(
                "DELETE FROM tags WHERE hash NOT IN (SELECT hash FROM files)",
                [],
            )?;
            tx.commit()
        };
        if let Err(e) = write() {
            tracing::debug!("the repo map's cache was not written: {e}");
        }
    }
}

/// Each row's tags, decoded on every core: decoding allocates every name, and a warm build
/// of 20,000 files decodes millions. A row that does not decode is left out (its file is
/// parsed again).
fn decode_all(rows: &[(u64, Vec<u8>)]) -> HashMap<u64, Tags> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let chunk = rows.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = rows
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .filter_map(|(h, data)| {
                            Some((*h, postcard::from_bytes::<Tags>(data).ok()?))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_default())
            .collect()
    })
}
