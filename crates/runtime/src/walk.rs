//! The one walk of the workspace, shared by the agent's context (`files::workspace_files`),
//! its tools (`list_files`, `find_files`, `grep`) and the repo map: what git would show,
//! so a file the user ignores never reaches the model by one path and not by another.
//!
//! It honours `.gitignore` (also outside a git repository, and the parent folders' files up
//! to the root), `.ignore` and git's global and `info/exclude` files, and skips hidden entries
//! and our own state (`.agent-ls`).

use std::path::Path;

use ignore::{DirEntry, WalkBuilder};

/// A walk from `dir` (the workspace root or a folder in it), `depth` levels deep at most.
/// Entries come in name order, so every caller sees the same order.
pub fn builder(dir: &Path, depth: Option<usize>) -> WalkBuilder {
    builder_skipping(dir, depth, |_| false)
}

/// `builder` that also skips the entries `skip` names (and a skipped folder's contents).
/// (`WalkBuilder::filter_entry` replaces the filter before it, so extra rules come here.)
pub fn builder_skipping(
    dir: &Path,
    depth: Option<usize>,
    skip: impl Fn(&DirEntry) -> bool + Send + Sync + 'static,
) -> WalkBuilder {
    let mut w = WalkBuilder::new(dir);
    w.max_depth(depth)
        .require_git(false)
        .hidden(true)
        .sort_by_file_name(|a, b| a.cmp(b))
        .filter_entry(move |e| e.file_name() != ".agent-ls" && e.file_name() != ".git" && !skip(e));
    w
}

/// What `keep` makes of each file the walk from `root` finds (its path relative to `root`,
/// `/`-separated on Unix; entries that cannot be read or named in UTF-8 are skipped). The
/// walk runs on every core, since a big repository's walk is mostly stat calls that wait on
/// the disk, so the results come in no particular order.
pub fn files_parallel<T: Send>(
    root: &Path,
    keep: impl Fn(String, &DirEntry) -> Option<T> + Sync,
) -> Vec<T> {
    let found = std::sync::Mutex::new(Vec::new());
    builder(root, None).build_parallel().run(|| {
        let (keep, found) = (&keep, &found);
        Box::new(move |entry| {
            let kept = entry
                .ok()
                .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
                .and_then(|e| keep(relative(root, e.path())?, &e));
            if let Some(v) = kept {
                found.lock().unwrap_or_else(|e| e.into_inner()).push(v);
            }
            ignore::WalkState::Continue
        })
    });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// The folders the walk from `root` enters (relative, as `files_parallel` gives files; the
/// root itself left out), in no particular order.
pub fn dirs_parallel(root: &Path) -> Vec<String> {
    let found = std::sync::Mutex::new(Vec::new());
    builder(root, None).build_parallel().run(|| {
        let found = &found;
        Box::new(move |entry| {
            if let Some(rel) = entry
                .ok()
                .filter(|e| e.file_type().is_some_and(|t| t.is_dir()))
                .and_then(|e| relative(root, e.path()))
            {
                found.lock().unwrap_or_else(|e| e.into_inner()).push(rel);
            }
            ignore::WalkState::Continue
        })
    });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// `path` relative to `root`, when it is inside it, is not the root itself, and is UTF-8.
pub fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?.to_str()?;
    (!rel.is_empty()).then(|| rel.to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A temporary folder holding `files` (path, text).
    pub(crate) fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    }

    #[test]
    fn the_walk_honours_gitignore_outside_git_and_skips_hidden_and_our_state() {
        let dir = tree(&[
            (".gitignore", "build/\n*.log\n"),
            ("src/app.py", "x = 1\n"),
            ("src/debug.log", "noise\n"),
            ("build/out.py", "generated\n"),
            (".env", "SECRET=1\n"),
            (".agent-ls/store.sqlite", ""),
            ("README.md", "hi\n"),
        ]);
        let mut found = files_parallel(dir.path(), |rel, _| Some(rel));
        found.sort();
        assert_eq!(found, ["README.md", "src/app.py"]);
        assert_eq!(dirs_parallel(dir.path()), ["src"]);
    }
}
