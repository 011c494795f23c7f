//! Committing a run's own files, and nothing else: `git commit --only` on the run's paths,
//! run as the user's own git (their author, their hooks unless `git.no_verify`), with a
//! `Co-authored-by: agent-ls` trailer. The user's other staged changes stay staged and their
//! unstaged ones unstaged; a commit that fails (a hook, git itself) leaves the files and the
//! index as they were (docs/git.md says why `--only` rather than a temporary index).

use std::io::Write;

use super::checkpoint::{RunFiles, files_now};
use super::{GitError, Repo, nul_list};

/// The trailer every commit of a run's files carries; the author stays the user's own.
pub const TRAILER: &str = "Co-authored-by: agent-ls <agent-ls@localhost>";

/// A commit made of a run's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub id: String,
    /// The message's first line.
    pub subject: String,
    /// The workspace paths it committed.
    pub files: Vec<String>,
    /// The branch it was made on (`None`: a detached HEAD).
    pub branch: Option<String>,
}

/// How the commit is made.
#[derive(Debug, Clone, Copy, Default)]
pub struct CommitOptions {
    /// Skip the pre-commit and commit-msg hooks (`git.no_verify`): no hook runs at all.
    pub no_verify: bool,
    /// Commit the files as they are now even when they changed since the run.
    pub force: bool,
    /// When the run's checkpoint was taken (Unix milliseconds): a hook changed since then is
    /// not run, since the run's test runs could write `.git/`.
    pub since: Option<u128>,
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(
        "changed since the run: {}; committing would take in those changes too (--force commits the files as they are now)",
        .0.join(", ")
    )]
    ChangedSince(Vec<String>),
    #[error("nothing to commit: the run's files are as HEAD has them (committed already?)")]
    NothingToCommit,
    #[error(
        "the commit was refused (by a pre-commit or commit-msg hook, or by git); nothing was committed, and the files and the index are as they were. Its output:\n{0}"
    )]
    Refused(String),
    #[error(
        "the git hook(s) {} changed after the run began; a test run may write .git/, so agent-ls does not run them. Look at them, then commit with git yourself (or set git.no_verify = true)",
        .0.join(", ")
    )]
    HookChanged(Vec<String>),
    #[error(transparent)]
    Git(#[from] GitError),
}

/// The branch HEAD is on (`None`: detached, or not a repository).
pub fn current_branch(repo: &Repo) -> Option<String> {
    let out = repo
        .git(None)
        .run(&["symbolic-ref", "--short", "-q", "HEAD"], None)
        .ok()?;
    let name = String::from_utf8_lossy(&out).trim().to_string();
    (!name.is_empty()).then_some(name)
}

fn literal(repo: &Repo, files: &[String]) -> Vec<u8> {
    let mut spec = Vec::new();
    for f in files {
        spec.extend_from_slice(format!(":(literal){}", repo.path(f)).as_bytes());
        spec.push(0);
    }
    spec
}

/// Which of the run's files the commit takes: those on disk (but not ignored by git) and
/// those git knows (in the index or HEAD), as workspace paths; and, of those, the ones on
/// disk the index does not know yet, which `--only` needs named in the index first.
fn committable(repo: &Repo, files: &[String]) -> Result<(Vec<String>, Vec<String>), GitError> {
    let git = repo.git(None);
    let named: Vec<String> = files
        .iter()
        .map(|f| format!(":(literal){}", repo.path(f)))
        .collect();
    let mut args = vec!["ls-files", "-z", "--cached", "--"];
    args.extend(named.iter().map(String::as_str));
    let indexed = nul_list(&git.run(&args, None)?);
    let in_head = match super::checkpoint::head(repo) {
        Some(h) => {
            let mut a = vec!["ls-tree", "-r", "-z", "--name-only", h.as_str(), "--"];
            a.extend(named.iter().map(String::as_str));
            nul_list(&git.run(&a, None)?)
        }
        None => Vec::new(),
    };
    let on_disk = |f: &String| std::fs::symlink_metadata(repo.top.join(repo.path(f))).is_ok();
    let known = |f: &String| {
        let p = repo.path(f);
        indexed.contains(&p) || in_head.contains(&p)
    };
    let new: Vec<String> = files
        .iter()
        .filter(|f| on_disk(f) && !indexed.contains(&repo.path(f)))
        .cloned()
        .collect();
    // A file git ignores is not the project's: it stays out of the commit.
    let ignored = if new.is_empty() {
        Vec::new()
    } else {
        let mut paths = Vec::new();
        for f in &new {
            paths.extend_from_slice(repo.path(f).as_bytes());
            paths.push(0);
        }
        let (_, out, _) = git.status(&["check-ignore", "-z", "--stdin"], Some(&paths))?;
        nul_list(&out)
    };
    let keep = |f: &String| !ignored.contains(&repo.path(f));
    let take: Vec<String> = files
        .iter()
        .filter(|f| (on_disk(f) || known(f)) && keep(f))
        .cloned()
        .collect();
    let new = new.into_iter().filter(keep).collect();
    Ok((take, new))
}

/// Commits the run's files (`left`'s keys: what the run left in each) with `message`, as the
/// user, plus the agent-ls trailer.
pub fn commit(
    repo: &Repo,
    left: &RunFiles,
    message: &str,
    opts: CommitOptions,
) -> Result<Committed, CommitError> {
    let files: Vec<String> = left.keys().cloned().collect();
    if !opts.force {
        let now = files_now(repo, &files)?;
        let changed: Vec<String> = files
            .iter()
            .filter(|f| now.get(*f) != left.get(*f))
            .cloned()
            .collect();
        if !changed.is_empty() {
            return Err(CommitError::ChangedSince(changed));
        }
    }
    if let (false, Some(since)) = (opts.no_verify, opts.since) {
        let changed = hooks_changed_since(repo, since)?;
        if !changed.is_empty() {
            return Err(CommitError::HookChanged(changed));
        }
    }
    let (take, new) = committable(repo, &files)?;
    if take.is_empty() || (new.is_empty() && same_as_head(repo, &take)?) {
        return Err(CommitError::NothingToCommit);
    }
    // `--only` commits only paths git knows: a file the run created is named in the index
    // (intent to add, no content) first, and taken out again if the commit fails.
    let git = repo.git(None);
    if !new.is_empty() {
        let mut args = vec!["add", "--intent-to-add", "--"];
        let named: Vec<String> = new
            .iter()
            .map(|f| format!(":(literal){}", repo.path(f)))
            .collect();
        args.extend(named.iter().map(String::as_str));
        git.run(&args, None)?;
    }
    let made = commit_only(repo, &take, message, opts.no_verify);
    if made.is_err() && !new.is_empty() {
        let mut paths = Vec::new();
        for f in &new {
            paths.extend_from_slice(repo.path(f).as_bytes());
            paths.push(0);
        }
        let undo = git.run_in(&["update-index", "--force-remove", "-z", "--stdin"], &paths);
        if let Err(e) = undo {
            tracing::warn!("the new files could not be taken out of the index again: {e}");
        }
    }
    let id = made?;
    Ok(Committed {
        id,
        subject: message.lines().next().unwrap_or_default().to_string(),
        files: take,
        branch: current_branch(repo),
    })
}

/// The hooks (in the folder the user's git takes them from) written at or after `since`.
fn hooks_changed_since(repo: &Repo, since: u128) -> Result<Vec<String>, GitError> {
    // Asked of the user's git with hooks on, so `core.hooksPath` is the user's (rev-parse
    // runs no hook).
    let out = repo.user_git(true).run(
        &["rev-parse", "--path-format=absolute", "--git-path", "hooks"],
        None,
    )?;
    let dir = std::path::PathBuf::from(String::from_utf8_lossy(&out).trim());
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut changed: Vec<String> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().ends_with(".sample"))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .is_some_and(|t| t.as_millis() > since)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    changed.sort();
    Ok(changed)
}

/// Whether the files on disk are as HEAD has them (so a commit would be empty; said before
/// any hook runs).
fn same_as_head(repo: &Repo, take: &[String]) -> Result<bool, GitError> {
    if super::checkpoint::head(repo).is_none() {
        return Ok(false);
    }
    let named: Vec<String> = take
        .iter()
        .map(|f| format!(":(literal){}", repo.path(f)))
        .collect();
    let mut args = vec![
        "diff",
        "--quiet",
        "--no-ext-diff",
        "--no-textconv",
        "HEAD",
        "--",
    ];
    args.extend(named.iter().map(String::as_str));
    let (code, _, _) = repo.git(None).status(&args, None)?;
    Ok(code == Some(0))
}

/// `git commit --only` of `take` with the message, as the user's git: the new commit's id.
fn commit_only(
    repo: &Repo,
    take: &[String],
    message: &str,
    no_verify: bool,
) -> Result<String, CommitError> {
    let mut file = tempfile::Builder::new()
        .prefix("agent-ls-commit")
        .tempfile()
        .map_err(GitError::Io)?;
    file.write_all(message.as_bytes()).map_err(GitError::Io)?;
    let path = file.path().to_string_lossy().into_owned();
    let mut args = vec![
        "commit",
        "--only",
        "--quiet",
        "--cleanup=whitespace",
        "-F",
        path.as_str(),
        "--trailer",
        TRAILER,
        "--pathspec-from-file=-",
        "--pathspec-file-nul",
    ];
    if no_verify {
        args.push("--no-verify");
    }
    let user = repo.user_git(!no_verify);
    let (code, out, err) = user.status(&args, Some(&literal(repo, take)))?;
    if code != Some(0) {
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&err)
        );
        if output.contains("nothing to commit") || output.contains("no changes added to commit") {
            return Err(CommitError::NothingToCommit);
        }
        return Err(CommitError::Refused(output.trim().to_string()));
    }
    let head = repo.git(None).run(&["rev-parse", "HEAD"], None)?;
    Ok(String::from_utf8_lossy(&head).trim().to_string())
}
