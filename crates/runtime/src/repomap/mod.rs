//! The repo map: the definitions of a repository that matter most for a run, as
//! `path:line: signature` lines within a token budget, so the first prompt shows where the
//! code is even when the files themselves do not fit. Tags come from tree-sitter and ranks from a
//! personalised PageRank over references (both pure, in the core's `repomap`); this module walks the
//! workspace and keeps the tags in `.agent-ls/repomap.sqlite` (`cache.rs`), one row a file,
//! reused while a file's mtime and size stay the same. A build can run in the background
//! (`spawn`) while a run's first request goes out with the files it names (`of_files`).

mod cache;
mod cores;
pub mod warm;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

pub use agent_ls_core::repomap::Focus;
use agent_ls_core::repomap::{rank, tags, tags::Tags};

use crate::tokens::Counter;
use agent_ls_core::syntax::Lang;
use cache::{Known, TagCache};

/// Files larger than this are generated or vendored code more often than not.
const MAX_FILE_BYTES: u64 = 512 * 1024;
/// Files parsed between two writes of the cache: a build cut short (the process ended with
/// its run) keeps what it parsed, so the next build goes on from there. The first batches are
/// smaller (`FIRST_BATCH`, doubling), so a short run writes some rows early.
const BATCH: usize = 128;
const FIRST_BATCH: usize = 32;
/// A build that wrote at least this many rows, and most of the map's, compacts the cache:
/// rows written batch by batch leave its pages a sixth empty (5.1 MB, 4.8 MB compacted, on
/// 20,000 files), and rewriting it costs a tenth of a second there.
const COMPACT_AFTER: usize = 1000;
/// How many lines in a row may not fit the map's budget before the map stops looking for
/// smaller ones further down.
const MISSES: usize = 256;
/// Set only by tests: a background build waits this many milliseconds before it starts, so a
/// test can show that a run does not wait for a slow map.
pub const DELAY_ENV: &str = "AGENT_LS_TEST_MAP_DELAY_MS";

/// The tags of a workspace's source files.
#[derive(Debug, Default, Clone)]
pub struct RepoMap {
    pub files: BTreeMap<String, Tags>,
    /// Files parsed now, and files whose tags came from the cache.
    pub parsed: usize,
    pub cached: usize,
    pub build_ms: u64,
    /// Where the build's time went (the run journal's `phases`).
    pub timings: Timings,
    /// The mtime and size each file had when it was read from disk (none for a file read from
    /// an unsaved buffer), so a kept map can catch up with the disk (`catch_up`).
    stamps: HashMap<String, (i64, u64)>,
    /// The workspace, where `render` reads the signatures the cache does not keep.
    root: PathBuf,
    /// The rank's index of `files`, built at the first render and kept while their tags rank
    /// alike: a server renders its kept map at every run (`warm`), and building the index is
    /// half of the rank on 20,000 files.
    index: std::sync::OnceLock<Box<rank::Index>>,
}

/// A build's phases, in milliseconds: the walk (listing and stat), reading the cache,
/// parsing the files it did not answer, and writing their rows.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Timings {
    pub walk_ms: u64,
    pub load_ms: u64,
    pub parse_ms: u64,
    pub write_ms: u64,
    /// A kept map caught up from its watch's paths, with no walk.
    pub watched: bool,
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// Reads the tags of every source file under `root` (gitignore-aware), parsing only what
/// changed since the cache was written; `buffers` are the editor's unsaved texts, which are
/// parsed afresh and never cached. A cache that cannot be read is rebuilt; one that cannot be
/// written costs the next build its speed, nothing else.
pub fn build(root: &Path, buffers: &HashMap<String, String>) -> RepoMap {
    build_with(root, buffers, true)
}

/// `build`, creating and writing the cache only when `write_cache`.
fn build_with(root: &Path, buffers: &HashMap<String, String>, write_cache: bool) -> RepoMap {
    let started = Instant::now();
    let listed = source_files(root);
    let mut timings = Timings {
        walk_ms: ms(started),
        ..Timings::default()
    };
    let t = Instant::now();
    let state = root.join(".agent-ls");
    let mut cache = TagCache::open(&state, false);
    let Sorted {
        mut files,
        todo,
        gone,
        cached,
    } = sort_out(&listed, buffers, &cache);
    timings.load_ms = ms(t);
    if write_cache && (!todo.is_empty() || !gone.is_empty()) {
        cache = TagCache::open(&state, true);
        cache.set_listed(listed.len());
        cache.write(&[], &gone);
    }
    let _writing = write_cache.then(Writing::start);
    let mut parsed = 0;
    for batch in batches(&todo) {
        // The command is ending (`finish_writes`): what was parsed is written, no more.
        if write_cache && STOPPING.load(Ordering::Relaxed) {
            break;
        }
        let t = Instant::now();
        let results = parse_all(root, batch);
        timings.parse_ms += ms(t);
        let t = Instant::now();
        cache.write(&results, &[]);
        timings.write_ms += ms(t);
        parsed += results.len();
        files.extend(results.into_iter().map(|(rel, _, tags)| (rel, tags)));
    }
    if parsed >= COMPACT_AFTER && parsed * 2 >= files.len() && !STOPPING.load(Ordering::Relaxed) {
        let t = Instant::now();
        cache.compact();
        timings.write_ms += ms(t);
    }
    parsed += parse_buffers(&mut files, buffers);
    let stamps = listed
        .iter()
        .filter(|l| !buffers.contains_key(&l.rel))
        .map(|l| (l.rel.clone(), (l.mtime_ns, l.size)))
        .collect();
    RepoMap {
        files,
        parsed,
        cached,
        build_ms: ms(started),
        timings,
        stamps,
        root: root.to_path_buf(),
        index: Default::default(),
    }
}

/// `todo` in batches of `FIRST_BATCH` files, doubling up to `BATCH`.
fn batches<T>(todo: &[T]) -> impl Iterator<Item = &[T]> {
    let mut at = 0;
    let mut size = FIRST_BATCH;
    std::iter::from_fn(move || {
        if at >= todo.len() {
            return None;
        }
        let end = (at + size).min(todo.len());
        let batch = &todo[at..end];
        (at, size) = (end, (size * 2).min(BATCH));
        Some(batch)
    })
}

/// Set when the command is ending: a build that writes the cache stops at its next batch.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// How many builds that write the cache are running, and a signal when one ends.
static WRITERS: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// A build that writes the cache, counted while it runs.
struct Writing;

impl Writing {
    fn start() -> Writing {
        *WRITERS.0.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        Writing
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut n = WRITERS.0.lock().unwrap_or_else(|e| e.into_inner());
        *n = n.saturating_sub(1);
        WRITERS.1.notify_all();
    }
}

/// For a command that ends while its map is still being built (`agent-ls run` ends when its
/// run does, whatever the build's progress): the builds stop at their next batch, and this
/// waits up to `wait` for them to write the batch they were parsing, so the next run's cache
/// starts from everything this one parsed. A server never calls it: its builds go on.
pub fn finish_writes(wait: Duration) {
    STOPPING.store(true, Ordering::Relaxed);
    let until = Instant::now() + wait;
    let mut n = WRITERS.0.lock().unwrap_or_else(|e| e.into_inner());
    while *n > 0 {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        n = match WRITERS.1.wait_timeout(n, left) {
            Ok((n, _)) => n,
            Err(e) => e.into_inner().0,
        };
    }
}

/// Parses each unsaved buffer that is source into `files`: how many.
fn parse_buffers(files: &mut BTreeMap<String, Tags>, buffers: &HashMap<String, String>) -> usize {
    let mut n = 0;
    for (rel, text) in buffers {
        if let Some(tags) = Lang::of(rel, text)
            .filter(|l| *l != Lang::Shell)
            .and_then(|l| tags::extract(l, text))
        {
            files.insert(rel.clone(), tags);
            n += 1;
        }
    }
    n
}

/// How many files `root`'s map cache holds, and how many its last build found; `None` when it
/// has none (or one of another version, which the next build replaces): that build is cold.
pub fn cached_files(root: &Path) -> Option<(usize, Option<usize>)> {
    cache::count(&root.join(".agent-ls").join(cache::FILE))
}

/// A build on a thread of its own, to be waited for within a budget.
pub struct Pending {
    rx: std::sync::mpsc::Receiver<RepoMap>,
}

/// Starts `build` on a background thread (its cache rows are written as it goes, so a build
/// cut short by the process's end is not lost).
pub fn spawn(root: PathBuf, buffers: HashMap<String, String>) -> Pending {
    spawn_with(root, buffers, true, false, || {})
}

/// `spawn`, writing the cache only when `write_cache`, at a low CPU priority when
/// `background` (a map nobody waits for yet must not slow the editor's own work), and doing
/// `first` on the build's thread before it walks.
fn spawn_with(
    root: PathBuf,
    buffers: HashMap<String, String>,
    write_cache: bool,
    background: bool,
    first: impl FnOnce() + Send + 'static,
) -> Pending {
    let delay = std::env::var(DELAY_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    in_background(move || {
        if let Some(ms) = delay {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if background {
            lower_priority();
        }
        first();
        let map = build_with(&root, &buffers, write_cache);
        if background {
            // A kept map is ranked at every run: its index is built now, not on the first
            // run's path.
            map.index
                .get_or_init(|| Box::new(rank::Index::of(&map.files)));
        }
        map
    })
}

/// `job` on a thread of its own, its map to be waited for.
fn in_background(job: impl FnOnce() -> RepoMap + Send + 'static) -> Pending {
    let (tx, rx) = std::sync::mpsc::channel();
    let job = move || {
        let _ = tx.send(job());
    };
    if let Err(e) = std::thread::Builder::new()
        .name("repo map".into())
        .spawn(job)
    {
        tracing::debug!("the repo map cannot be built in the background: {e}");
    }
    Pending { rx }
}

/// `map` (built earlier) caught up with the disk under `root` in the background: with what
/// `watch` saw change, or by a walk when nothing watches it.
pub fn catch_up_in_background(
    root: PathBuf,
    mut map: RepoMap,
    watch: Option<std::sync::Arc<watch::Watch>>,
) -> Pending {
    in_background(move || {
        let started = Instant::now();
        let changes = watch.map_or(watch::Changes::Walk, |w| w.changes(&root));
        let (parsed, walked) = map.catch_up_with(&root, changes);
        map.timings = Timings {
            walk_ms: ms(started),
            watched: !walked,
            ..Timings::default()
        };
        (map.parsed, map.cached) = (parsed, map.files.len().saturating_sub(parsed));
        map
    })
}

impl Pending {
    /// The map, when it is built already (`None` while it is not, or when it is lost).
    pub fn finished(&self) -> Option<RepoMap> {
        self.rx.try_recv().ok()
    }

    /// The map, once it is built, waiting at most `budget`; `None` while it is not (or when
    /// its thread is gone, which `gone` then says).
    pub fn wait(&self, budget: Duration) -> Result<RepoMap, bool> {
        use std::sync::mpsc::RecvTimeoutError;
        match self.rx.recv_timeout(budget) {
            Ok(map) => Ok(map),
            Err(RecvTimeoutError::Timeout) => Err(false),
            Err(RecvTimeoutError::Disconnected) => Err(true),
        }
    }
}

/// Lowers the calling thread's CPU priority (nice 10); the threads it starts inherit it.
fn lower_priority() {
    // SAFETY: setpriority takes no pointer; on Linux, PRIO_PROCESS with 0 names the calling
    // thread. A failure leaves the priority as it was, which is only slower for others.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}

/// A file's mtime in nanoseconds since the epoch (0 when the system has none).
fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64)
}

/// A source file of the workspace, as the walk found it.
struct Listed {
    rel: String,
    lang: Lang,
    mtime_ns: i64,
    size: u64,
}

/// The workspace's source files sorted out against the cache.
struct Sorted {
    /// The tags the cache still holds, by file.
    files: BTreeMap<String, Tags>,
    /// The files to parse.
    todo: Vec<Listed>,
    /// Files the cache knows that are gone.
    gone: Vec<String>,
    /// How many files the cache answered.
    cached: usize,
}

/// Which source files the cache answers (same mtime and size) and which must be parsed.
/// Files with an unsaved buffer are left to the caller, their cache row kept.
fn sort_out(listed: &[Listed], buffers: &HashMap<String, String>, cache: &TagCache) -> Sorted {
    let loaded = cache.load();
    let fresh: Vec<&str> = listed
        .iter()
        .filter(|l| !buffers.contains_key(&l.rel))
        .filter(|l| {
            loaded.files.get(&l.rel).map(|(k, _)| *k)
                == Some(Known {
                    mtime_ns: l.mtime_ns,
                    size: l.size,
                })
        })
        .map(|l| l.rel.as_str())
        .collect();
    let files: BTreeMap<String, Tags> = loaded.tags(&fresh).into_iter().collect();
    let todo = listed
        .iter()
        .filter(|l| !buffers.contains_key(&l.rel) && !files.contains_key(&l.rel))
        .map(|l| Listed {
            rel: l.rel.clone(),
            ..*l
        })
        .collect();
    let present: std::collections::HashSet<&str> = listed.iter().map(|l| l.rel.as_str()).collect();
    let gone = loaded
        .files
        .into_keys()
        .filter(|k| !present.contains(k.as_str()))
        .collect();
    Sorted {
        cached: files.len(),
        files,
        todo,
        gone,
    }
}

/// The tags of each file in `todo` that can be read and parsed, with its cache row. Parsing
/// is the cold build's cost, so it is spread over the machine's cores.
fn parse_all(root: &Path, todo: &[Listed]) -> Vec<(String, Known, Tags)> {
    cores::on_every_core(todo, |t| {
        let text = std::fs::read_to_string(root.join(&t.rel)).ok()?;
        let tags = tags::extract(t.lang, &text)?;
        let known = Known {
            mtime_ns: t.mtime_ns,
            size: t.size,
        };
        Some((t.rel.clone(), known, tags))
    })
}

/// The workspace's source files as git sees them (the shared walk of `crate::walk`), with
/// their mtime and size, sorted.
fn source_files(root: &Path) -> Vec<Listed> {
    let mut out: Vec<Listed> = crate::walk::files_parallel(root, |rel, e| {
        let lang = Lang::of(&rel, "").filter(|l| *l != Lang::Shell)?;
        let meta = e.metadata().ok()?;
        (meta.len() <= MAX_FILE_BYTES).then(|| Listed {
            lang,
            mtime_ns: mtime_ns(&meta),
            size: meta.len(),
            rel,
        })
    });
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

impl RepoMap {
    /// A map of `paths` alone (the files a goal names, while the whole map is still being
    /// built): each read from its buffer or the disk and parsed now.
    pub fn of_files(root: &Path, paths: &[String], buffers: &HashMap<String, String>) -> RepoMap {
        let started = Instant::now();
        let mut map = RepoMap {
            root: root.to_path_buf(),
            ..RepoMap::default()
        };
        map.refresh(root, paths, buffers);
        map.build_ms = ms(started);
        map
    }

    /// Parses `paths` again (the files a run changed, its open buffers), from their buffer or
    /// the disk; a file that is gone or is not source leaves the map. No walk: the rest of the
    /// map stays as it was built.
    pub fn refresh(&mut self, root: &Path, paths: &[String], buffers: &HashMap<String, String>) {
        for rel in paths {
            self.stamps.remove(rel);
            let text = match buffers.get(rel) {
                Some(t) => Some(t.clone()),
                None => {
                    if let Ok(meta) = std::fs::metadata(root.join(rel)) {
                        self.stamps
                            .insert(rel.clone(), (mtime_ns(&meta), meta.len()));
                    }
                    std::fs::read_to_string(root.join(rel))
                        .ok()
                        .filter(|t| t.len() as u64 <= MAX_FILE_BYTES)
                }
            };
            let tags = text.and_then(|t| {
                let lang = Lang::of(rel, &t).filter(|l| *l != Lang::Shell)?;
                tags::extract(lang, &t)
            });
            match tags {
                Some(t) => {
                    if !self
                        .files
                        .get(rel)
                        .is_some_and(|old| rank::ranks_alike(old, &t))
                    {
                        self.index.take();
                    }
                    self.files.insert(rel.clone(), t);
                    self.parsed += 1;
                }
                None => {
                    if self.files.remove(rel).is_some() {
                        self.index.take();
                    }
                }
            }
        }
    }

    /// `catch_up`, or, when a watch says which paths changed, only those parsed again (a
    /// folder named drops the files it held), and the files read from a buffer. A path the map
    /// does not know (a new file, which an ignore rule may exclude) calls for the walk. How
    /// many files it parsed, and whether it walked.
    pub fn catch_up_with(&mut self, root: &Path, changes: watch::Changes) -> (usize, bool) {
        let watch::Changes::Paths(paths) = changes else {
            return (self.catch_up(root), true);
        };
        let mut again: Vec<String> = Vec::new();
        for rel in &paths {
            let known = self.files.contains_key(rel) || self.stamps.contains_key(rel);
            let under = format!("{rel}/");
            let held: Vec<String> = self
                .files
                .range(under.clone()..)
                .take_while(|(p, _)| p.starts_with(&under))
                .map(|(p, _)| p.clone())
                .collect();
            if known {
                again.push(rel.clone());
            } else if !held.is_empty() {
                again.extend(held);
            } else if Lang::of(rel, "").is_some_and(|l| l != Lang::Shell) {
                return (self.catch_up(root), true);
            }
        }
        // Files parsed from an editor's buffer are read from disk again.
        again.extend(
            self.files
                .keys()
                .filter(|rel| !self.stamps.contains_key(*rel))
                .cloned(),
        );
        again.sort();
        again.dedup();
        self.refresh(root, &again, &HashMap::new());
        (again.len(), false)
    }

    /// Brings a map built earlier up to date with the disk: one walk, and the files whose
    /// mtime or size moved (or that were read from a buffer) parsed again; files gone leave.
    /// How many files it parsed.
    pub fn catch_up(&mut self, root: &Path) -> usize {
        let listed = source_files(root);
        let on_disk: std::collections::HashSet<&str> =
            listed.iter().map(|l| l.rel.as_str()).collect();
        let mut again: Vec<String> = self
            .files
            .keys()
            .filter(|rel| !on_disk.contains(rel.as_str()))
            .cloned()
            .collect();
        again.extend(
            listed
                .iter()
                .filter(|l| self.stamps.get(&l.rel) != Some(&(l.mtime_ns, l.size)))
                .map(|l| l.rel.clone()),
        );
        self.refresh(root, &again, &HashMap::new());
        again.len()
    }

    /// The map for `focus`: the best-ranked definitions as `path:line: signature` lines,
    /// grouped by file in rank order, within `max_tokens` as `counter` counts them.
    pub fn render(&self, focus: &Focus, max_tokens: usize, counter: &Counter) -> String {
        self.render_ranked(focus, max_tokens, counter).0
    }

    /// `render`, and the files in rank order (the first context reads them in this order),
    /// from one ranking.
    pub fn render_ranked(
        &self,
        focus: &Focus,
        max_tokens: usize,
        counter: &Counter,
    ) -> (String, Vec<String>) {
        let index = self
            .index
            .get_or_init(|| Box::new(rank::Index::of(&self.files)));
        let ranked = rank::rank_with(&self.files, index, focus);
        let order = rank::file_order(&ranked);
        if max_tokens == 0 {
            return (String::new(), order);
        }
        let mut signatures = Signatures::new(&self.root);
        let mut chosen: Vec<(&rank::Ranked, String)> = Vec::new();
        let mut used = 0;
        let mut missed = 0;
        for r in &ranked {
            let def = r.definition;
            let line = format!("{}:{}: {}\n", r.path, def.line, signatures.of(r.path, def));
            let cost = counter.count(&line);
            if used + cost > max_tokens {
                // Smaller lines further down may still fit; stop once nothing can, or once
                // a run of lines did not (a big repository ranks hundreds of thousands).
                missed += 1;
                if max_tokens - used < 8 || missed >= MISSES {
                    break;
                }
                continue;
            }
            missed = 0;
            used += cost;
            chosen.push((r, line));
        }
        let position: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_str(), i))
            .collect();
        chosen.sort_by_key(|(r, _)| (position.get(r.path).copied(), r.definition.line));
        let out = chosen.into_iter().map(|(_, line)| line).collect();
        (out, order)
    }
}

/// The signatures of the definitions a render shows. A parsed file's definitions carry
/// theirs; the cache's do not, and their line is read from the file, each file once. A line
/// that no longer names the definition (the file changed since its tags were read) shows the
/// name alone.
struct Signatures<'a> {
    root: &'a Path,
    texts: HashMap<&'a str, Option<String>>,
}

impl<'a> Signatures<'a> {
    fn new(root: &'a Path) -> Self {
        Signatures {
            root,
            texts: HashMap::new(),
        }
    }

    fn of(&mut self, path: &'a str, def: &'a tags::Def) -> std::borrow::Cow<'a, str> {
        if !def.signature.is_empty() {
            return def.signature.as_str().into();
        }
        let root = self.root;
        let text = self
            .texts
            .entry(path)
            .or_insert_with(|| std::fs::read_to_string(root.join(path)).ok());
        text.as_deref()
            .and_then(|t| tags::signature_at(t, def.line))
            .filter(|s| s.contains(def.name.as_str()))
            .map_or_else(|| def.name.as_str().into(), Into::into)
    }
}

/// The names a goal mentions that look like code (`apply_discount`, `Cart.total`).
pub fn idents_of(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| {
            w.len() >= 3
                && w.chars()
                    .next()
                    .is_some_and(|c| c.is_alphabetic() || c == '_')
                && (w.contains('_') || w.chars().skip(1).any(char::is_uppercase))
        })
        .map(String::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A short run's build writes its first rows after 32 files, not 128; the batches then
    /// double up to 128, and cover every file once.
    #[test]
    fn the_first_batches_are_small_and_double() {
        let todo: Vec<u32> = (0..1000).collect();
        let sizes: Vec<usize> = batches(&todo).map(<[u32]>::len).collect();
        assert_eq!(sizes, [32, 64, 128, 128, 128, 128, 128, 128, 128, 8]);
        let seen: Vec<u32> = batches(&todo).flatten().copied().collect();
        assert_eq!(seen, todo);
        assert_eq!(batches::<u32>(&[]).count(), 0);
    }

    const CORE: &str = "from app.discount import apply_discount\n\ndef compute_total(items):\n    return apply_discount(sum(items))\n";

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (p, t) in [
            ("app/core.py", CORE),
            (
                "app/discount.py",
                "def apply_discount(amount):\n    return amount * 0.9\n",
            ),
            ("app/unused.py", "def lonely_helper():\n    pass\n"),
            (
                "tests/test_core.py",
                "from app.core import compute_total\n\ndef test_total():\n    assert compute_total([10]) == 9\n",
            ),
            ("README.md", "# not code\n"),
            ("build/gen.py", "def generated(): pass\n"),
            (".gitignore", "build/\n"),
        ] {
            std::fs::create_dir_all(dir.path().join(p).parent().unwrap()).unwrap();
            std::fs::write(dir.path().join(p), t).unwrap();
        }
        dir
    }

    #[test]
    fn builds_ranks_renders_and_reuses_its_cache() {
        let dir = project();
        let map = build(dir.path(), &HashMap::new());
        assert_eq!((map.parsed, map.cached), (4, 0));
        assert_eq!(cached_files(dir.path()), Some((4, Some(4))));
        assert!(!map.files.contains_key("build/gen.py"));
        let focus = Focus {
            files: vec!["tests/test_core.py".into()],
            idents: vec![],
        };
        let text = map.render(&focus, 1000, &Counter::Bytes);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..2],
            [
                "app/core.py:3: def compute_total(items):",
                "app/discount.py:1: def apply_discount(amount):"
            ],
            "{text}"
        );
        // A budget of a dozen tokens holds the best line only.
        let small = map.render(&focus, 12, &Counter::Bytes);
        assert_eq!(small, "app/core.py:3: def compute_total(items):\n");

        let again = build(dir.path(), &HashMap::new());
        assert_eq!((again.parsed, again.cached), (0, 4));
        // The cache keeps no signatures; the render reads them from the files, the same.
        let unsigned = |m: &RepoMap| {
            let mut files = m.files.clone();
            files
                .values_mut()
                .flat_map(|t| &mut t.defs)
                .for_each(|d| d.signature.clear());
            files
        };
        assert_eq!(again.files, unsigned(&map));
        assert_eq!(again.render(&focus, 1000, &Counter::Bytes), text);
        // A changed file is parsed again; an unsaved buffer wins over the disk.
        std::fs::write(
            dir.path().join("app/unused.py"),
            "def lonely_helper2():\n    pass\n",
        )
        .unwrap();
        let mut buffers = HashMap::new();
        buffers.insert(
            "app/discount.py".to_string(),
            "def apply_discount(amount, rate):\n    return amount\n".to_string(),
        );
        let third = build(dir.path(), &buffers);
        assert_eq!((third.parsed, third.cached), (2, 2));
        assert_eq!(third.files["app/unused.py"].defs[0].name, "lonely_helper2");
        // The buffer's file keeps its cached tags: building again with it parses only it.
        let fourth = build(dir.path(), &buffers);
        assert_eq!((fourth.parsed, fourth.cached), (1, 3));
        assert_eq!(
            third.files["app/discount.py"].defs[0].signature,
            "def apply_discount(amount, rate):"
        );
        // A deleted file leaves the map and the cache.
        std::fs::remove_file(dir.path().join("app/unused.py")).unwrap();
        let fifth = build(dir.path(), &HashMap::new());
        assert!(!fifth.files.contains_key("app/unused.py"));
        assert_eq!((fifth.parsed, fifth.cached), (0, 3));
        assert_eq!(build(dir.path(), &HashMap::new()).cached, 3);
        // A cache that is not ours is replaced.
        std::fs::write(dir.path().join(".agent-ls/repomap.sqlite"), "{not sqlite").unwrap();
        assert_eq!(build(dir.path(), &HashMap::new()).parsed, 3);
        assert_eq!(build(dir.path(), &HashMap::new()).cached, 3);
        // A file changed behind the map's back shows its definition's name, not a wrong line.
        std::fs::write(dir.path().join("app/core.py"), "\n\n\n").unwrap();
        assert!(
            fifth
                .render(&focus, 1000, &Counter::Bytes)
                .starts_with("app/core.py:3: compute_total\n")
        );
    }

    #[test]
    fn catching_up_with_a_watchs_paths_parses_those_and_walks_only_for_a_new_file() {
        use watch::Changes;
        let dir = project();
        let root = dir.path();
        let mut map = build(root, &HashMap::new());
        let paths = |p: &[&str]| Changes::Paths(p.iter().map(|s| s.to_string()).collect());
        std::fs::write(root.join("app/unused.py"), "def lonely2():\n    pass\n").unwrap();
        std::fs::write(root.join("app/extra.py"), "def extra():\n    pass\n").unwrap();
        // Only the named path is parsed: the new file, not named, is not seen (no walk).
        assert_eq!(
            map.catch_up_with(root, paths(&["app/unused.py"])),
            (1, false)
        );
        assert_eq!(map.files["app/unused.py"].defs[0].name, "lonely2");
        assert!(!map.files.contains_key("app/extra.py"));
        // A removed folder drops what it held; a non-source path is nothing to do.
        std::fs::remove_dir_all(root.join("tests")).unwrap();
        assert_eq!(
            map.catch_up_with(root, paths(&["tests", "notes.txt"])),
            (1, false)
        );
        assert!(!map.files.contains_key("tests/test_core.py"));
        // A path the map does not know is a new file: the walk decides (gitignore).
        std::fs::write(root.join("build/more.py"), "def more():\n    pass\n").unwrap();
        assert!(
            map.catch_up_with(root, paths(&["build/more.py"])).1,
            "a walk"
        );
        assert!(map.files.contains_key("app/extra.py"));
        assert!(!map.files.contains_key("build/more.py"));
        // A buffer's file is read from disk again at the next catch-up, named or not.
        let buffers = HashMap::from([(
            "app/core.py".to_string(),
            "def from_buffer():\n    pass\n".to_string(),
        )]);
        map.refresh(root, &["app/core.py".into()], &buffers);
        assert_eq!(map.catch_up_with(root, paths(&[])), (1, false));
        assert_eq!(map.files["app/core.py"].defs[0].name, "compute_total");
    }

    #[test]
    fn the_rank_index_is_kept_while_tags_rank_alike_and_rebuilt_when_they_do_not() {
        let dir = project();
        let root = dir.path();
        let mut map = build(root, &HashMap::new());
        let focus = Focus {
            files: vec!["tests/test_core.py".into()],
            idents: vec![],
        };
        // Whether discount.py ranks above unused.py.
        let discount_first = |m: &RepoMap| {
            let order = m.render_ranked(&focus, 1000, &Counter::Bytes).1;
            let at = |p: &str| order.iter().position(|o| o == p);
            at("app/discount.py") < at("app/unused.py")
        };
        assert!(discount_first(&map));
        assert!(map.index.get().is_some());
        // The same text from a buffer (with its signatures, which the cache's rows lack).
        let same = HashMap::from([("app/core.py".to_string(), CORE.to_string())]);
        map.refresh(root, &["app/core.py".into()], &same);
        assert!(map.index.get().is_some(), "kept");
        // core.py now uses lonely_helper and not apply_discount: the order follows.
        let moved = HashMap::from([(
            "app/core.py".to_string(),
            "def compute_total(items):\n    return lonely_helper(items)\n".to_string(),
        )]);
        map.refresh(root, &["app/core.py".into()], &moved);
        assert!(map.index.get().is_none(), "dropped");
        assert!(!discount_first(&map));
    }

    #[test]
    fn goal_idents_are_the_code_like_words() {
        assert_eq!(
            idents_of("fix apply_discount in CartTotal and the tests"),
            ["apply_discount", "CartTotal"]
        );
    }
}
