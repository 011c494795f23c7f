//! The repo map: the definitions of a repository that matter most for a run, as
//! `path:line: signature` lines within a token budget, so the first prompt shows where the
//! code is even when the files themselves do not fit. Tags come from tree-sitter and ranks from a
//! personalised PageRank over references (both pure, in the core's `repomap`); this module walks the
//! workspace and keeps the tags in `.agent-ls/repomap.json`, reused while a file's mtime and
//! size stay the same.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub use agent_ls_core::repomap::Focus;
use agent_ls_core::repomap::{rank, tags, tags::Tags};

use crate::tokens::Counter;
use agent_ls_core::syntax::Lang;

/// Files larger than this are generated or vendored code more often than not.
const MAX_FILE_BYTES: u64 = 512 * 1024;
const CACHE_FILE: &str = "repomap.json";
const CACHE_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    mtime_ns: u128,
    size: u64,
    tags: Tags,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Cache {
    version: u32,
    files: BTreeMap<String, Entry>,
}

/// The tags of a workspace's source files.
#[derive(Debug, Default)]
pub struct RepoMap {
    pub files: BTreeMap<String, Tags>,
    /// Files parsed now, and files whose tags came from the cache.
    pub parsed: usize,
    pub cached: usize,
    pub build_ms: u64,
}

/// Reads the tags of every source file under `root` (gitignore-aware), parsing only what
/// changed since the cache was written; `buffers` are the editor's unsaved texts, which are
/// parsed afresh and never cached. A cache that cannot be read is rebuilt; one that cannot be
/// written costs the next build its speed, nothing else.
pub fn build(root: &Path, buffers: &HashMap<String, String>) -> RepoMap {
    let started = Instant::now();
    let state = root.join(".agent-ls");
    let cache: Cache = std::fs::read(state.join(CACHE_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|c: &Cache| c.version == CACHE_VERSION)
        .unwrap_or_default();
    let Sorted {
        mut files,
        mut next,
        todo,
        cached,
    } = sort_out(root, buffers, &cache);
    let results = parse_all(root, &todo);
    let changed = !results.is_empty() || next.files.len() != cache.files.len();
    let mut parsed = 0;
    for (rel, entry) in results {
        parsed += 1;
        files.insert(rel.clone(), entry.tags.clone());
        next.files.insert(rel, entry);
    }
    for (rel, text) in buffers {
        if let Some(tags) = Lang::of(rel, text)
            .filter(|l| *l != Lang::Shell)
            .and_then(|l| tags::extract(l, text))
        {
            files.insert(rel.clone(), tags);
            parsed += 1;
        }
    }
    if changed {
        write_cache(&state, &next);
    }
    RepoMap {
        files,
        parsed,
        cached,
        build_ms: started.elapsed().as_millis() as u64,
    }
}

/// A source file whose cached tags are missing or stale.
struct Todo {
    rel: String,
    lang: Lang,
    mtime_ns: u128,
    size: u64,
}

/// The workspace's source files sorted out against the cache.
struct Sorted {
    /// The tags the cache still holds, by file.
    files: BTreeMap<String, Tags>,
    /// The cache to write next: the entries still good so far.
    next: Cache,
    /// The files to parse.
    todo: Vec<Todo>,
    /// How many files the cache answered.
    cached: usize,
}

/// Which source files the cache answers (same mtime and size) and which must be parsed.
/// Files with an unsaved buffer are left to the caller, their cache entry kept.
fn sort_out(root: &Path, buffers: &HashMap<String, String>, cache: &Cache) -> Sorted {
    let mut out = Sorted {
        files: BTreeMap::new(),
        next: Cache {
            version: CACHE_VERSION,
            files: BTreeMap::new(),
        },
        todo: Vec::new(),
        cached: 0,
    };
    for (rel, meta) in source_files(root) {
        let Some(lang) = Lang::of(&rel, "") else {
            continue;
        };
        if lang == Lang::Shell || meta.len() > MAX_FILE_BYTES {
            continue;
        }
        // An unsaved buffer is parsed by the caller; the file's cached tags stay for the next
        // build.
        if buffers.contains_key(&rel) {
            if let Some(e) = cache.files.get(&rel) {
                out.next.files.insert(rel, e.clone());
            }
            continue;
        }
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        match cache.files.get(&rel) {
            Some(e) if e.mtime_ns == mtime_ns && e.size == meta.len() => {
                out.files.insert(rel.clone(), e.tags.clone());
                out.next.files.insert(rel, e.clone());
                out.cached += 1;
            }
            _ => out.todo.push(Todo {
                rel,
                lang,
                mtime_ns,
                size: meta.len(),
            }),
        }
    }
    out
}

/// The tags of each file in `todo` that can be read and parsed, as cache entries. Parsing is
/// the cold build's cost, so it is spread over the machine's cores.
fn parse_all(root: &Path, todo: &[Todo]) -> Vec<(String, Entry)> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let chunk = todo.len().div_ceil(threads).max(1);
    let parse = |t: &Todo| {
        let text = std::fs::read_to_string(root.join(&t.rel)).ok()?;
        let tags = tags::extract(t.lang, &text)?;
        let entry = Entry {
            mtime_ns: t.mtime_ns,
            size: t.size,
            tags,
        };
        Some((t.rel.clone(), entry))
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = todo
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().filter_map(parse).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

fn write_cache(state: &Path, cache: &Cache) {
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(state)?;
        let mut tmp = tempfile::NamedTempFile::new_in(state)?;
        serde_json::to_writer(&mut tmp, cache)?;
        tmp.persist(state.join(CACHE_FILE))?;
        Ok(())
    };
    if let Err(e) = write() {
        tracing::debug!("the repo map's cache was not written: {e}");
    }
}

/// The workspace's files as git sees them (the shared walk of `crate::walk`), with their
/// metadata, sorted.
fn source_files(root: &Path) -> Vec<(String, std::fs::Metadata)> {
    let mut out: Vec<(String, std::fs::Metadata)> = crate::walk::files(root)
        .filter_map(|(rel, e)| Some((rel, e.metadata().ok()?)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

impl RepoMap {
    /// The map for `focus`: the best-ranked definitions as `path:line: signature` lines,
    /// grouped by file in rank order, within `max_tokens` as `counter` counts them.
    pub fn render(&self, focus: &Focus, max_tokens: usize, counter: &Counter) -> String {
        if max_tokens == 0 {
            return String::new();
        }
        let ranked = rank::rank(&self.files, focus);
        let mut chosen: Vec<&rank::Ranked> = Vec::new();
        let mut used = 0;
        for r in &ranked {
            let Some(def) = self.files.get(&r.path).and_then(|t| t.defs.get(r.def)) else {
                continue;
            };
            let line = format!("{}:{}: {}\n", r.path, def.line, def.signature);
            let cost = counter.count(&line);
            if used + cost > max_tokens {
                // Smaller lines further down may still fit; stop once nothing can.
                if max_tokens - used < 8 {
                    break;
                }
                continue;
            }
            used += cost;
            chosen.push(r);
        }
        let order = rank::file_order(&ranked);
        let position: HashMap<&str, usize> = order
            .iter()
            .enumerate()
            .map(|(i, p)| (p.as_str(), i))
            .collect();
        chosen.sort_by_key(|r| {
            let line = self.files[&r.path].defs[r.def].line;
            (position.get(r.path.as_str()).copied(), line)
        });
        let mut out = String::new();
        for r in chosen {
            let def = &self.files[&r.path].defs[r.def];
            out.push_str(&format!("{}:{}: {}\n", r.path, def.line, def.signature));
        }
        out
    }

    /// The files in rank order for `focus` (the fixed context reads them in this order).
    pub fn ranked_files(&self, focus: &Focus) -> Vec<String> {
        rank::file_order(&rank::rank(&self.files, focus))
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

    fn project() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (p, t) in [
            (
                "app/core.py",
                "from app.discount import apply_discount\n\ndef compute_total(items):\n    return apply_discount(sum(items))\n",
            ),
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
        assert_eq!(again.files, map.files);
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
        // A cache that is not ours is rebuilt.
        std::fs::write(dir.path().join(".agent-ls/repomap.json"), "{not json").unwrap();
        assert_eq!(build(dir.path(), &HashMap::new()).parsed, 4);
    }

    #[test]
    fn goal_idents_are_the_code_like_words() {
        assert_eq!(
            idents_of("fix apply_discount in CartTotal and the tests"),
            ["apply_discount", "CartTotal"]
        );
    }
}
