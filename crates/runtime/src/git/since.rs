//! What changed in a workspace since a checkpoint, whoever changed it: the files that differ
//! from the checkpoint, were deleted since, or were created since (untracked, not ignored).
//! `agent-ls mcp`'s `rollback` to a checkpoint its caller took restores exactly these, since
//! the caller's own tools leave no record of the files they wrote.

use super::checkpoint::{self, RunFiles};
use super::{GitError, Repo};

/// The workspace files (paths below the workspace) that differ from `commit`, with their
/// blob ids now (`None`: deleted since), which is what a rollback to it restores. Ignored
/// files, nested repositories and paths outside the workspace are never named.
pub fn changed(repo: &Repo, commit: &str) -> Result<RunFiles, GitError> {
    let dir = tempfile::Builder::new()
        .prefix("agent-ls-index")
        .tempdir()?;
    let index = dir.path().join("index");
    let git = repo.git(Some(&index));
    git.run(&["read-tree", commit], None)?;
    // The temporary index has no stat data: a refresh hashes each file once, so what is left
    // as modified really differs.
    let _ = git.status(&["update-index", "-q", "--refresh"], None)?;
    let scope = format!(":(literal){}", repo.prefix);
    let scope = if repo.prefix.is_empty() { "." } else { &scope };
    let modified = git.run(&["diff-files", "--name-only", "-z", "--", scope], None)?;
    let created = git.run(
        &[
            "ls-files",
            "-z",
            "--others",
            "--exclude-standard",
            "--",
            scope,
        ],
        None,
    )?;
    let mut files: Vec<String> = modified
        .split(|b| *b == 0)
        .chain(created.split(|b| *b == 0))
        .filter(|p| !p.is_empty() && !p.ends_with(b"/"))
        .filter_map(|p| {
            let p = String::from_utf8_lossy(p);
            p.strip_prefix(&repo.prefix).map(str::to_string)
        })
        // agent-ls's own state, when the repository does not ignore it.
        .filter(|p| !p.starts_with(".agent-ls/"))
        .collect();
    files.sort();
    files.dedup();
    checkpoint::files_now(repo, &files)
}
