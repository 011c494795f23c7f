//! The repo map's tag cache, `.agent-ls/repomap.sqlite`: one row a file (path, mtime, size and
//! its tags, packed) and one row a name. A warm build reads the rows and parses only the files
//! whose mtime or size moved; a change writes only its own rows, never the whole cache (the
//! JSON file it replaces was rewritten whole, 47 MB on a 19,000-file repository). A file of its
//! own rather than a table of the run store: the map is written from a background thread while
//! a run holds the store, and a cache lost costs one cold build, nothing else.
//!
//! Small because a big repository's cache is read whole by every warm build. A file's row
//! names its definitions and uses by id into the names table (a repository's files share most
//! of their names), its uses sorted and delta-coded with their counts packed beside them, and
//! it keeps no signature: a definition's signature is its line, read from the file when the
//! map is rendered (`tags::signature_at`). About 0.25 KB a file where the tags in full took 1.8.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use agent_ls_core::repomap::tags::{Def, Tags};

pub(super) const FILE: &str = "repomap.sqlite";
/// The cache before this one; removed when found (it could be tens of megabytes).
const OLD_FILE: &str = "repomap.json";
/// Bumped when the rows' shape or encoding changes: an older cache is dropped and rebuilt.
/// 2: the tags in postcard. 3: names by id, uses delta-coded, no signatures.
const VERSION: i64 = 3;

/// What the cache knows of a file: the mtime and size its row was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Known {
    pub mtime_ns: i64,
    pub size: u64,
}

/// An open cache, or none when it cannot be opened (the map is then built without one).
pub(super) struct TagCache {
    conn: Option<Connection>,
    /// The ids of the names this process has read or written. Ids are never reused (names are
    /// only ever added), so they stay true while the table is the same one.
    ids: HashMap<String, u32>,
}

/// The cache read whole: each file's stamp and packed tags, and the names they use.
pub(super) struct Loaded {
    pub files: HashMap<String, (Known, Vec<u8>)>,
    names: Names,
}

/// The names table: each id's name, and its place in name order (a file's uses are decoded
/// into name order, as `tags::extract` gives them, so a cached file ranks as a parsed one).
#[derive(Default)]
struct Names {
    name: Vec<Option<String>>,
    order: Vec<u32>,
}

/// A file's tags as its row keeps them (postcard: every integer a varint).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
struct Packed {
    /// Each definition's name id and its line less the previous definition's.
    defs: Vec<(u32, i32)>,
    /// Each use, in id order: the id less the previous one, shifted left two bits, with the
    /// count less one in those bits (3 when it is more, the rest then in `counts`).
    uses: Vec<u64>,
    counts: Vec<u32>,
}

/// How many files the cache at `path` holds, and how many source files the last build that
/// wrote it found (`None` before any build recorded it), read without writing; `None` when
/// there is no cache of this version there. Fewer rows than files: a build was cut short (a
/// CLI run that ended before its map was whole), and the next build parses the rest.
pub(super) fn count(path: &Path) -> Option<(usize, Option<usize>)> {
    use rusqlite::OpenFlags;
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    // A writer's commit locks the file for a moment: waited out, or the run would take its
    // warm cache for none and wait the cold budget.
    conn.busy_timeout(std::time::Duration::from_millis(500))
        .ok()?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .ok()?;
    let rows = (version == VERSION)
        .then(|| conn.query_row("SELECT count(*) FROM files", [], |r| r.get::<_, i64>(0)))?
        .ok()? as usize;
    let listed = conn
        .query_row("SELECT value FROM meta WHERE key = 'listed'", [], |r| {
            r.get::<_, i64>(0)
        })
        .ok()
        .map(|n| n as usize);
    Some((rows, listed))
}

/// The cache at `path`, its tables made (again, when its version is not ours).
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version != VERSION {
        conn.execute_batch(
            "DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS tags; DROP TABLE IF EXISTS names;
             CREATE TABLE files (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL,
               size INTEGER NOT NULL, tags BLOB NOT NULL) WITHOUT ROWID;
             CREATE TABLE names (name TEXT PRIMARY KEY, id INTEGER NOT NULL) WITHOUT ROWID;",
        )?;
        conn.pragma_update(None, "user_version", VERSION)?;
        // The old format's pages, freed.
        conn.execute_batch("VACUUM")?;
    }
    Ok(conn)
}

impl TagCache {
    /// Records how many source files this build's walk found, before it parses them, so a
    /// later run can tell a whole cache from one a build left half made. (A table of its own
    /// beside the rows: the rows' format, and so `VERSION`, stay as they are.)
    pub(super) fn set_listed(&self, files: usize) {
        let Some(conn) = &self.conn else {
            return;
        };
        let written = conn
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID",
            )
            .and_then(|()| {
                conn.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('listed', ?1)",
                    params![files as i64],
                )
            });
        if let Err(e) = written {
            tracing::debug!("the repo map's cache does not record its size: {e}");
        }
    }

    /// Opens (creating, when `create`) the cache in `state` (the workspace's `.agent-ls`).
    pub(super) fn open(state: &Path, create: bool) -> TagCache {
        let path = state.join(FILE);
        let none = TagCache {
            conn: None,
            ids: HashMap::new(),
        };
        if !create && !path.exists() {
            return none;
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
            Ok(c) => TagCache {
                conn: Some(c),
                ..none
            },
            Err(e) => {
                tracing::debug!("the repo map's cache cannot be opened: {e}");
                none
            }
        }
    }

    /// Every row and name, read in one transaction (a writer elsewhere adds names and rows
    /// together). Nothing when the cache cannot be read.
    pub(super) fn load(&self) -> Loaded {
        let empty = || Loaded {
            files: HashMap::new(),
            names: Names::default(),
        };
        let Some(conn) = &self.conn else {
            return empty();
        };
        let read = || -> rusqlite::Result<Loaded> {
            let tx = conn.unchecked_transaction()?;
            let mut names = Vec::new();
            {
                let mut stmt = tx.prepare("SELECT name, id FROM names")?;
                let mut rows = stmt.query([])?;
                while let Some(r) = rows.next()? {
                    names.push((r.get::<_, String>(0)?, r.get::<_, u32>(1)?));
                }
            }
            let mut stmt = tx.prepare("SELECT path, mtime_ns, size, tags FROM files")?;
            let files = stmt
                .query_map([], |r| {
                    let known = Known {
                        mtime_ns: r.get(1)?,
                        size: r.get::<_, i64>(2)? as u64,
                    };
                    Ok((r.get::<_, String>(0)?, (known, r.get::<_, Vec<u8>>(3)?)))
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Loaded {
                files,
                names: Names::of(names),
            })
        };
        read().unwrap_or_else(|e| {
            tracing::debug!("the repo map's cache cannot be read: {e}");
            empty()
        })
    }

    /// Rewrites the cache with its pages full (after a cold build). Skipped, and logged, while
    /// another process reads or writes it.
    pub(super) fn compact(&self) {
        if let Some(conn) = &self.conn
            && let Err(e) = conn.execute_batch("VACUUM")
        {
            tracing::debug!("the repo map's cache was not compacted: {e}");
        }
    }

    /// Records `fresh` files and forgets `gone` ones, in one transaction. A failure is logged:
    /// the next build parses those files again.
    pub(super) fn write(&mut self, fresh: &[(String, Known, Tags)], gone: &[String]) {
        let Some(conn) = &mut self.conn else {
            return;
        };
        if fresh.is_empty() && gone.is_empty() {
            return;
        }
        let ids = &mut self.ids;
        let mut write = || -> rusqlite::Result<()> {
            // Immediate: the names' next id is read and used under the write lock.
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            add_names(&tx, ids, fresh.iter().map(|(_, _, t)| t))?;
            {
                let mut file = tx.prepare_cached(
                    "INSERT OR REPLACE INTO files (path, mtime_ns, size, tags) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (path, k, tags) in fresh {
                    let Some(data) = pack(tags, ids) else {
                        continue;
                    };
                    file.execute(params![path, k.mtime_ns, k.size as i64, data])?;
                }
                let mut del = tx.prepare_cached("DELETE FROM files WHERE path = ?1")?;
                for path in gone {
                    del.execute([path])?;
                }
            }
            tx.commit()
        };
        if let Err(e) = write() {
            // The ids of names added in a transaction that did not commit are not the table's.
            self.ids.clear();
            tracing::debug!("the repo map's cache was not written: {e}");
        }
    }
}

/// Gives every name `tags` use an id in `ids`: the table's, or a new one added to it. The
/// table only grows, so an id once read stays true; a table smaller than what this process
/// knows was made anew (another process found ours stale), and is read again.
fn add_names<'t>(
    tx: &rusqlite::Transaction,
    ids: &mut HashMap<String, u32>,
    tags: impl Iterator<Item = &'t Tags>,
) -> rusqlite::Result<()> {
    let mut next: u32 = tx.query_row("SELECT count(*) FROM names", [], |r| r.get(0))?;
    if (next as usize) < ids.len() || ids.is_empty() {
        ids.clear();
        let mut stmt = tx.prepare("SELECT name, id FROM names")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            ids.insert(r.get(0)?, r.get(1)?);
        }
    }
    let mut find = tx.prepare_cached("SELECT id FROM names WHERE name = ?1")?;
    let mut add = tx.prepare_cached("INSERT INTO names (name, id) VALUES (?1, ?2)")?;
    for t in tags {
        let names = t
            .defs
            .iter()
            .map(|d| &d.name)
            .chain(t.refs.iter().map(|r| &r.0));
        for name in names {
            if ids.contains_key(name) {
                continue;
            }
            // Added by another process since this one read the table.
            let id = match find.query_row([name], |r| r.get(0)).optional()? {
                Some(id) => id,
                None => {
                    add.execute(params![name, next])?;
                    next += 1;
                    next - 1
                }
            };
            ids.insert(name.clone(), id);
        }
    }
    Ok(())
}

/// `tags` as a row keeps them (`None` when a name has no id, which `add_names` rules out).
fn pack(tags: &Tags, ids: &HashMap<String, u32>) -> Option<Vec<u8>> {
    let mut packed = Packed::default();
    let mut line = 0i64;
    for d in &tags.defs {
        packed
            .defs
            .push((*ids.get(&d.name)?, (i64::from(d.line) - line) as i32));
        line = i64::from(d.line);
    }
    let mut uses: Vec<(u32, u32)> = tags
        .refs
        .iter()
        .map(|(n, c)| Some((*ids.get(n)?, *c)))
        .collect::<Option<_>>()?;
    uses.sort_unstable();
    let mut last = 0u32;
    for (id, count) in uses {
        let extra = count.saturating_sub(1);
        packed
            .uses
            .push((u64::from(id - last) << 2) | u64::from(extra.min(3)));
        if extra >= 3 {
            packed.counts.push(extra - 3);
        }
        last = id;
    }
    postcard::to_stdvec(&packed).ok()
}

/// The tags a row keeps (signatures left empty), or `None` when it does not decode or names an
/// id the table does not have (its file is then parsed again).
fn unpack(data: &[u8], names: &Names) -> Option<Tags> {
    let packed: Packed = postcard::from_bytes(data).ok()?;
    let name = |id: u32| names.name.get(id as usize)?.clone();
    let mut line = 0i64;
    let mut defs = Vec::with_capacity(packed.defs.len());
    for (id, delta) in packed.defs {
        line += i64::from(delta);
        defs.push(Def {
            name: name(id)?,
            line: u32::try_from(line).ok()?,
            signature: String::new(),
        });
    }
    let (mut id, mut counts) = (0u32, packed.counts.into_iter());
    let mut uses = Vec::with_capacity(packed.uses.len());
    for u in packed.uses {
        id = id.checked_add(u32::try_from(u >> 2).ok()?)?;
        let extra = match (u & 3) as u32 {
            3 => 3 + counts.next()?,
            e => e,
        };
        uses.push((id, extra + 1));
    }
    uses.sort_unstable_by_key(|(id, _)| names.order.get(*id as usize).copied());
    let refs = uses
        .into_iter()
        .map(|(id, count)| Some((name(id)?, count)))
        .collect::<Option<_>>()?;
    Some(Tags { defs, refs })
}

impl Names {
    fn of(pairs: Vec<(String, u32)>) -> Names {
        let len = pairs
            .iter()
            .map(|(_, id)| *id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut names = Names {
            name: vec![None; len],
            order: vec![u32::MAX; len],
        };
        let mut sorted: Vec<&(String, u32)> = pairs.iter().collect();
        sorted.sort_unstable();
        for (place, (_, id)) in sorted.iter().enumerate() {
            names.order[*id as usize] = place as u32;
        }
        for (name, id) in pairs {
            names.name[id as usize] = Some(name);
        }
        names
    }
}

impl Loaded {
    /// The tags of each of `wanted` the cache holds, decoded on every core: decoding allocates
    /// every name, and a warm build of 20,000 files decodes millions.
    pub(super) fn tags(&self, wanted: &[&str]) -> Vec<(String, Tags)> {
        super::cores::on_every_core(wanted, |path| {
            let (_, data) = self.files.get(*path)?;
            Some((path.to_string(), unpack(data, &self.names)?))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tags as `tags::extract` gives them: uses in name order.
    fn tags(defs: &[(&str, u32)], refs: &[(&str, u32)]) -> Tags {
        let mut refs: Vec<(String, u32)> = refs.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        refs.sort();
        Tags {
            defs: defs
                .iter()
                .map(|(n, l)| Def {
                    name: n.to_string(),
                    line: *l,
                    signature: String::new(),
                })
                .collect(),
            refs,
        }
    }

    fn known(size: u64) -> Known {
        Known { mtime_ns: 7, size }
    }

    #[test]
    fn tags_come_back_as_written_with_their_uses_in_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = TagCache::open(dir.path(), true);
        // Ids are given in the order names are met; uses come back in name order all the same.
        let a = tags(
            &[("zeta", 3), ("alpha", 3), ("mid", 40)],
            &[("beta", 1), ("omega", 4), ("q", 3), ("x", 900)],
        );
        let b = tags(&[("q", 1)], &[("alpha", 2), ("zeta", 1)]);
        cache.write(&[("a.py".into(), known(1), a.clone())], &[]);
        cache.write(&[("b.py".into(), known(2), b.clone())], &[]);
        let loaded = TagCache::open(dir.path(), false).load();
        assert_eq!(loaded.files["a.py"].0, known(1));
        let mut back = loaded.tags(&["a.py", "b.py", "c.py"]);
        back.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(back, [("a.py".into(), a), ("b.py".into(), b)]);
    }

    #[test]
    fn two_writers_share_one_names_table() {
        let dir = tempfile::tempdir().unwrap();
        let (mut one, mut two) = (
            TagCache::open(dir.path(), true),
            TagCache::open(dir.path(), true),
        );
        let a = tags(&[("shared", 1)], &[("first", 1)]);
        let b = tags(&[("other", 1)], &[("shared", 1), ("second", 2)]);
        one.write(&[("a.rs".into(), known(1), a.clone())], &[]);
        two.write(&[("b.rs".into(), known(1), b.clone())], &[]);
        // `one` has not seen `second`'s id; it must not give it to another name.
        let c = tags(&[("third", 1)], &[("second", 1)]);
        one.write(&[("c.rs".into(), known(1), c.clone())], &["a.rs".into()]);
        let loaded = one.load();
        let mut back = loaded.tags(&["a.rs", "b.rs", "c.rs"]);
        back.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(back, [("b.rs".into(), b), ("c.rs".into(), c)]);
    }

    #[test]
    fn a_row_that_does_not_decode_is_left_out() {
        let names = Names::of(vec![("a".into(), 0)]);
        assert_eq!(unpack(b"\xff\xff", &names), None);
        let unknown = postcard::to_stdvec(&Packed {
            defs: vec![(5, 1)],
            ..Packed::default()
        })
        .unwrap();
        assert_eq!(unpack(&unknown, &names), None);
        let ok = postcard::to_stdvec(&Packed {
            defs: vec![(0, 2)],
            ..Packed::default()
        })
        .unwrap();
        assert_eq!(unpack(&ok, &names), Some(tags(&[("a", 2)], &[])));
    }
}
