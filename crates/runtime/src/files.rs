//! Workspace files on disk: resolving a model's path without leaving the workspace (symlinks
//! included), reading files for a plan, and writing changes atomically.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use agent_ls_core::edit::{self, FileChange, FileText};

/// A workspace path that cannot be resolved, or changes that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot open the workspace {}: {source}", root.display())]
    Workspace {
        root: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot resolve {relative}: {source}")]
    Resolve {
        relative: String,
        source: std::io::Error,
    },
    #[error("`{relative}` leads outside the workspace (to {})", real.display())]
    Outside { relative: String, real: PathBuf },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// One write failed, and those before it were put back.
    #[error("cannot write {path}: {cause}; no file was changed")]
    NotWritten { path: String, cause: Box<FileError> },
}

/// Resolves a normalised relative path to the real file it names, refusing one that leads
/// outside `root` through a symlink anywhere along the way. The file itself need not exist.
pub fn resolve(root: &Path, relative: &str) -> Result<PathBuf, FileError> {
    let real_root = root.canonicalize().map_err(|source| FileError::Workspace {
        root: root.to_path_buf(),
        source,
    })?;
    let joined = real_root.join(relative);
    // Canonicalise the nearest part that exists; what does not exist yet cannot be a link.
    let mut existing = joined.clone();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    while fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name() else {
            break;
        };
        rest.push(name.to_owned());
        if !existing.pop() {
            break;
        }
    }
    let mut real = existing
        .canonicalize()
        .map_err(|source| FileError::Resolve {
            relative: relative.into(),
            source,
        })?;
    for name in rest.iter().rev() {
        real.push(name);
    }
    if !real.starts_with(&real_root) {
        return Err(FileError::Outside {
            relative: relative.into(),
            real,
        });
    }
    Ok(real)
}

/// Reads a plan's file from disk for the edit engine.
pub fn read_for_plan(root: &Path, relative: &str) -> FileText {
    let path = match resolve(root, relative) {
        Ok(p) => p,
        Err(reason) => return FileText::Refused(reason.to_string()),
    };
    match fs::read(&path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => FileText::Text(text),
            Err(_) => FileText::Refused(format!("`{relative}` is not UTF-8 text")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => FileText::Missing,
        Err(e) if e.kind() == std::io::ErrorKind::IsADirectory => {
            FileText::Refused(format!("`{relative}` is a directory"))
        }
        Err(e) => FileText::Refused(format!("cannot read `{relative}`: {e}")),
    }
}

/// Writes `contents` to `path` so that a reader sees the old file or the new one, never a
/// mix: a temporary file in the same directory, flushed to disk, renamed over the target.
/// `path` must already be the real target (see `resolve`), or the rename would replace a
/// symlink instead of writing through it. An existing file's permissions are kept.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    // An existing file keeps its permissions; a new one is never executable.
    let permissions = match fs::metadata(path) {
        Ok(meta) => meta.permissions(),
        Err(_) => std::os::unix::fs::PermissionsExt::from_mode(0o644),
    };
    fs::set_permissions(tmp.path(), permissions)?;
    tmp.persist(path).map_err(|e| e.error)?;
    // The rename itself is durable only once the directory is flushed.
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes every change, or none: when a write fails, the files already written are put back
/// (and created ones removed) before the error is returned.
pub fn write_changes(root: &Path, changes: &[FileChange]) -> Result<(), FileError> {
    let mut done: Vec<(PathBuf, &FileChange)> = Vec::new();
    for change in changes {
        let result = resolve(root, &change.path).and_then(|path| {
            write_atomic(&path, change.new_text.as_bytes())
                .map(|_| path)
                .map_err(FileError::Io)
        });
        match result {
            Ok(path) => done.push((path, change)),
            Err(err) => {
                for (path, change) in done.iter().rev() {
                    let _ = match &change.original {
                        Some(text) => write_atomic(path, text.as_bytes()),
                        None => fs::remove_file(path),
                    };
                }
                return Err(FileError::NotWritten {
                    path: change.path.clone(),
                    cause: Box::new(err),
                });
            }
        }
    }
    Ok(())
}

/// Applies a plan to the files under `root` (read from disk), without writing.
pub fn plan_on_disk(
    plan: &edit::EditPlan,
    root: &Path,
    limits: &edit::Limits,
) -> edit::PlanOutcome {
    edit::apply_plan(plan, root, limits, |rel| read_for_plan(root, rel))
}

/// Up to `limit` files of the workspace, each under 100 KB, by the shared walk
/// (`crate::walk`: `.gitignore` honoured, hidden entries and our state skipped). Folders named
/// `target`, `node_modules`, `__pycache__`, `dist`, `build` or `venv` are skipped at any depth
/// too, for a workspace whose `.gitignore` does not name them. It does not look inside files,
/// so binary files are listed too (a reader skips what is not UTF-8 text). Shallow files come
/// first, each depth in name order; the order is stable, not ranked: callers rank the files
/// themselves.
pub fn workspace_files(root: &Path, limit: usize) -> Vec<String> {
    // One level deeper at a time, stopping once `limit` files are found: the context shows a
    // couple of hundred names, and a big repository's deep folders (most of its files) need
    // not be walked for them. The levels above are walked again each time, and they are few.
    let mut depth = 1;
    loop {
        let (mut found, cut) = files_to_depth(root, depth);
        if found.len() >= limit || !cut {
            found.sort();
            return found.into_iter().take(limit).map(|(_, rel)| rel).collect();
        }
        depth += 1;
    }
}

/// The files at most `depth` levels down (with their depth), and whether a folder at that
/// depth was left unwalked.
fn files_to_depth(root: &Path, depth: usize) -> (Vec<(usize, String)>, bool) {
    const SKIP: &[&str] = &[
        "target",
        "node_modules",
        "__pycache__",
        "dist",
        "build",
        "venv",
    ];
    let walk = crate::walk::builder_skipping(root, Some(depth), |e| {
        e.file_type().is_some_and(|t| t.is_dir())
            && e.file_name().to_str().is_some_and(|n| SKIP.contains(&n))
    });
    let mut cut = false;
    let mut out = Vec::new();
    for e in walk.build().flatten() {
        let Some(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            cut |= e.depth() == depth;
        } else if kind.is_file()
            && e.metadata().is_ok_and(|m| m.len() < 100_000)
            && let Some(rel) = crate::walk::relative(root, e.path())
        {
            out.push((e.depth(), rel));
        }
    }
    (out, cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_files_honour_gitignore_and_come_shallow_first() {
        let dir = crate::walk::tests::tree(&[
            (".gitignore", "secret/\n"),
            ("pkg/deep/mod.py", "x = 1\n"),
            ("pkg/a.py", "x = 1\n"),
            ("main.py", "x = 1\n"),
            ("secret/keys.py", "KEY = 1\n"),
            ("node_modules/lib/index.js", "x\n"),
            (".agent-ls/store.sqlite", ""),
        ]);
        let root = dir.path();
        assert_eq!(
            workspace_files(root, 200),
            ["main.py", "pkg/a.py", "pkg/deep/mod.py"]
        );
        assert_eq!(workspace_files(root, 2), ["main.py", "pkg/a.py"]);
    }

    #[test]
    fn symlinks_leading_outside_are_refused_and_inside_ones_resolve() {
        let outside = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.txt"), "s").unwrap();
        fs::write(ws.path().join("real.txt"), "r").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("out")).unwrap();
        std::os::unix::fs::symlink(ws.path().join("real.txt"), ws.path().join("link.txt")).unwrap();
        assert!(resolve(ws.path(), "out/secret.txt").is_err());
        assert!(resolve(ws.path(), "out/new.txt").is_err());
        let real = resolve(ws.path(), "link.txt").unwrap();
        assert_eq!(real, ws.path().canonicalize().unwrap().join("real.txt"));
        assert!(resolve(ws.path(), "new/dir/file.txt").is_ok());
    }

    #[test]
    fn atomic_write_through_a_symlink_keeps_the_link() {
        let ws = tempfile::tempdir().unwrap();
        fs::write(ws.path().join("real.txt"), "old").unwrap();
        std::os::unix::fs::symlink(ws.path().join("real.txt"), ws.path().join("link.txt")).unwrap();
        let target = resolve(ws.path(), "link.txt").unwrap();
        write_atomic(&target, b"new").unwrap();
        assert!(
            fs::symlink_metadata(ws.path().join("link.txt"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            fs::read_to_string(ws.path().join("link.txt")).unwrap(),
            "new"
        );
    }
}
