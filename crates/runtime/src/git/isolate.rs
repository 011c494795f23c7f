//! A run isolated from the user's work (`git.isolation`): on a new branch `agent/<slug>` from
//! HEAD in a clean checkout, or in a new worktree under `.agent-ls/worktrees/<slug>` on such a
//! branch, so the user's checkout (files, index, HEAD) never changes.

use std::path::{Path, PathBuf};

use super::{GitError, Repo};
use crate::config::Isolation;

/// Where worktrees are made, below the workspace.
pub const WORKTREES: &str = ".agent-ls/worktrees";
/// The longest slug taken from a goal, before any unique suffix.
const MAX_SLUG: usize = 40;
/// How many dirty paths a refusal names before it says how many more there are.
const NAMED: usize = 10;

#[derive(Debug, thiserror::Error)]
pub enum IsolateError {
    #[error(
        "git.isolation = \"branch\" starts the run on a new branch from HEAD, but the working tree has uncommitted changes: {}; commit or stash them, or isolate the run in a worktree (`agent-ls run --isolated`)",
        .0.join(", ")
    )]
    Dirty(Vec<String>),
    #[error(
        "a worktree starts from a commit, and this repository has none yet; commit first, or use git.isolation = \"branch\""
    )]
    NoCommit,
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// Where an isolated run works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolated {
    /// The branch the run is on (`agent/<slug>`).
    pub branch: String,
    /// The new worktree's top, in worktree mode.
    pub worktree: Option<PathBuf>,
    /// The folder the run works in: the workspace, or its place in the worktree.
    pub root: PathBuf,
    /// The branch (and worktree) were made for this run, not found already.
    pub new: bool,
}

/// Starts a run of `goal` in the workspace `root` as `mode` says: `None` for
/// `Isolation::None`, else where the run works.
pub fn start(root: &Path, mode: Isolation, goal: &str) -> Result<Option<Isolated>, IsolateError> {
    if mode == Isolation::None {
        return Ok(None);
    }
    let repo = Repo::discover(root)?;
    if let Some(done) = going_on(&repo, root) {
        return Ok(Some(done));
    }
    let done = match mode {
        Isolation::Branch => start_branch(&repo, root, goal)?,
        _ => add_worktree(&repo, root, goal)?,
    };
    Ok(Some(done))
}

/// A run in one of our worktrees is isolated already: it goes on there, on its branch,
/// rather than nesting a worktree in a worktree.
fn going_on(repo: &Repo, root: &Path) -> Option<Isolated> {
    let top = ours(repo)?;
    let branch = repo
        .git(None)
        .run(&["symbolic-ref", "--short", "-q", "HEAD"], None)
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    Some(Isolated {
        branch,
        worktree: Some(top),
        root: root.to_path_buf(),
        new: false,
    })
}

/// The top of the working tree when it is one of our worktrees (`.agent-ls/worktrees/<slug>`).
fn ours(repo: &Repo) -> Option<PathBuf> {
    let parent = repo.top.parent()?;
    parent.ends_with(WORKTREES).then(|| repo.top.clone())
}

impl Isolated {
    /// Where the run works, as said to the user.
    pub fn describe(&self) -> String {
        let new = if self.new { "the new" } else { "its" };
        match &self.worktree {
            Some(w) => format!(
                "working in the worktree {} on {new} branch {}",
                w.display(),
                self.branch
            ),
            None => format!("working on {new} branch {}", self.branch),
        }
    }
}

/// The goal as a branch name's last part: its ASCII letters and digits, lowercased, the words
/// joined by '-', cut at a word's end to at most `MAX_SLUG` characters ("run" if none).
pub fn slug(goal: &str) -> String {
    let mut out = String::new();
    let words = goal
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty());
    for word in words {
        let word = word.to_ascii_lowercase();
        let extra = usize::from(!out.is_empty()) + word.len();
        if out.len() + extra > MAX_SLUG {
            if out.is_empty() {
                out = word[..MAX_SLUG].to_string();
            }
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word);
    }
    if out.is_empty() {
        out.push_str("run");
    }
    out
}

/// The changes `git.isolation = "branch"` refuses to carry onto the new branch: tracked files
/// changed (staged or not) and untracked files git does not ignore, each named with how
/// ("calc.py (unstaged)"). agent-ls's own state (`.agent-ls/`) does not count.
pub fn dirty(repo: &Repo) -> Result<Vec<String>, GitError> {
    let own = format!(":(exclude,literal){}.agent-ls", repo.prefix);
    let out = repo.git(None).run(
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--",
            ":/",
            &own,
        ],
        None,
    )?;
    Ok(out
        .split(|b| *b == 0)
        .filter(|e| e.len() > 3)
        .map(|e| {
            // "XY path": X is the index's side, Y the working tree's.
            let path = String::from_utf8_lossy(&e[3..]);
            let how = match (e[0], e[1]) {
                (b'?', _) => "untracked",
                (b' ', _) => "unstaged",
                (_, b' ') => "staged",
                _ => "staged and unstaged",
            };
            format!("{path} ({how})")
        })
        .collect())
}

/// `agent/<slug>`, with `-2`, `-3`... when that branch (or the worktree folder `taken` names)
/// exists already.
fn free_branch(repo: &Repo, slug: &str, taken: impl Fn(&str) -> bool) -> String {
    (1..)
        .map(|n| match n {
            1 => slug.to_string(),
            n => format!("{slug}-{n}"),
        })
        .find(|s| {
            let name = format!("refs/heads/agent/{s}");
            let exists = repo
                .git(None)
                .run(&["rev-parse", "--verify", "-q", &name], None)
                .is_ok();
            !exists && !taken(s)
        })
        .unwrap_or_else(|| slug.to_string())
}

/// Switches the checkout to a new branch `agent/<slug-of-goal>` from HEAD, refusing a dirty
/// tree (nothing changes then). A branch from the same commit in a clean tree changes no file
/// and no index entry, only HEAD.
pub fn start_branch(repo: &Repo, workspace: &Path, goal: &str) -> Result<Isolated, IsolateError> {
    let mut changes = dirty(repo)?;
    if !changes.is_empty() {
        if changes.len() > NAMED {
            let more = changes.len() - NAMED;
            changes.truncate(NAMED);
            changes.push(format!("and {more} more"));
        }
        return Err(IsolateError::Dirty(changes));
    }
    let slug = free_branch(repo, &slug(goal), |_| false);
    let branch = format!("agent/{slug}");
    repo.git(None)
        .run(&["switch", "--quiet", "--no-guess", "-c", &branch], None)?;
    Ok(Isolated {
        branch,
        worktree: None,
        root: workspace.to_path_buf(),
        new: true,
    })
}

/// A new worktree `.agent-ls/worktrees/<slug>` (below the workspace) on a new branch
/// `agent/<slug>` from HEAD. The folder is ignored by a `.gitignore` of its own, so the
/// user's `git status` does not change.
pub fn add_worktree(repo: &Repo, workspace: &Path, goal: &str) -> Result<Isolated, IsolateError> {
    let Some(head) = super::checkpoint::head(repo) else {
        return Err(IsolateError::NoCommit);
    };
    let parent = workspace.join(WORKTREES);
    let io = |e| IsolateError::Io(parent.display().to_string(), e);
    std::fs::create_dir_all(&parent).map_err(io)?;
    let ignore = parent.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# agent-ls's worktrees: not part of this checkout\n*\n",
        )
        .map_err(io)?;
    }
    let slug = free_branch(repo, &slug(goal), |s| parent.join(s).exists());
    let branch = format!("agent/{slug}");
    let top = parent.join(&slug);
    let top_arg = top.to_string_lossy().into_owned();
    repo.git(None).run(
        &["worktree", "add", "--quiet", "-b", &branch, &top_arg, &head],
        None,
    )?;
    let root = top.join(repo.prefix.trim_end_matches('/'));
    Ok(Isolated {
        branch,
        worktree: Some(top),
        root,
        new: true,
    })
}

/// The folders where the isolated runs of the workspace `root` worked: each worktree under
/// `.agent-ls/worktrees/` at the workspace's place in it (`prefix`, from `Repo`).
pub fn run_roots(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root.join(WORKTREES)) else {
        return Vec::new();
    };
    let mut roots: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|top| top.join(".git").is_file())
        .map(|top| top.join(prefix.trim_end_matches('/')))
        .collect();
    roots.sort();
    roots
}

/// The workspace a worktree agent-ls made holds `dir` for, when `dir` is in one: an
/// ancestor `<workspace>/.agent-ls/worktrees/<slug>` whose `.git` file names a worktree of
/// the repository `<workspace>` is in, and which git's own record of that worktree points
/// back to. A folder that only looks like one (copied, or made by hand) is not.
pub fn made_in(dir: &Path) -> Option<PathBuf> {
    let dir = dir.canonicalize().ok()?;
    let top = dir
        .ancestors()
        .find(|a| a.parent().is_some_and(|p| p.ends_with(WORKTREES)))?;
    let workspace = top.parent()?.parent()?.parent()?;
    let pointer = std::fs::read_to_string(top.join(".git")).ok()?;
    let gitdir = PathBuf::from(pointer.strip_prefix("gitdir:")?.trim());
    let gitdir = top.join(gitdir).canonicalize().ok()?;
    // `<common>/worktrees/<name>`, where `<common>` is the `.git` of a checkout holding the
    // workspace, and whose `gitdir` file names this worktree's `.git` again.
    let common = gitdir
        .parent()
        .filter(|p| p.ends_with("worktrees"))?
        .parent()?;
    let checkout = common.parent().filter(|_| common.ends_with(".git"))?;
    let back = std::fs::read_to_string(gitdir.join("gitdir")).ok()?;
    let back = Path::new(back.trim()).canonicalize().ok()?;
    (workspace.starts_with(checkout) && back == top.join(".git")).then(|| workspace.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `git ARGS` in `dir` as a user runs it: its output, trimmed.
    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
            .args(args)
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A repository with `sub/a.txt` committed (or not).
    fn repository(commit: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        git(p, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/a.txt"), "a\n").unwrap();
        if commit {
            git(p, &["add", "-A"]);
            git(p, &["commit", "-qm", "start"]);
        }
        dir
    }

    #[test]
    fn agent_ls_state_is_not_dirt_and_a_repository_with_no_commits_gets_its_branch() {
        let dir = repository(false);
        let p = dir.path();
        // Nothing committed: `sub/a.txt` is untracked, so dirty.
        let repo = Repo::discover(p).unwrap();
        assert_eq!(dirty(&repo).unwrap(), ["sub/a.txt (untracked)"]);
        std::fs::remove_file(p.join("sub/a.txt")).unwrap();
        std::fs::create_dir_all(p.join(".agent-ls")).unwrap();
        std::fs::write(p.join(".agent-ls/store.sqlite"), "x").unwrap();
        assert!(dirty(&repo).unwrap().is_empty());
        let done = start_branch(&repo, p, "First steps").unwrap();
        assert_eq!(done.branch, "agent/first-steps");
        assert_eq!(
            git(p, &["symbolic-ref", "HEAD"]),
            "refs/heads/agent/first-steps"
        );
        assert!(matches!(
            add_worktree(&repo, p, "x"),
            Err(IsolateError::NoCommit)
        ));
    }

    #[test]
    fn a_workspace_below_the_top_works_at_its_place_in_the_worktree() {
        let dir = repository(true);
        let sub = dir.path().join("sub").canonicalize().unwrap();
        let repo = Repo::discover(&sub).unwrap();
        let done = add_worktree(&repo, &sub, "Edit a").unwrap();
        let top = sub.join(".agent-ls/worktrees/edit-a");
        assert_eq!(done.worktree.as_deref(), Some(top.as_path()));
        assert_eq!(done.root, top.join("sub"));
        assert_eq!(
            std::fs::read_to_string(done.root.join("a.txt")).unwrap(),
            "a\n"
        );
        assert_eq!(
            git(&top, &["symbolic-ref", "HEAD"]),
            "refs/heads/agent/edit-a"
        );
        // The user's status is clean, worktree and all; a second one gets a suffix.
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        let again = add_worktree(&repo, &sub, "Edit a").unwrap();
        assert_eq!(again.branch, "agent/edit-a-2");
        assert_eq!(git(dir.path(), &["status", "--porcelain"]), "");
        // A run started in the worktree goes on there, on its branch: no nested worktree.
        let inside = start(&done.root, Isolation::Worktree, "more")
            .unwrap()
            .unwrap();
        assert_eq!(inside.branch, "agent/edit-a");
        assert_eq!(inside.worktree.as_deref(), Some(top.as_path()));
        assert_eq!(inside.root, done.root);
        assert!(!done.root.join(WORKTREES).exists());
    }

    #[test]
    fn a_slug_is_lowercase_ascii_words_joined_by_dashes_and_bounded() {
        assert_eq!(slug("Fix the failing tests!"), "fix-the-failing-tests");
        assert_eq!(slug("  add `--json` to run "), "add-json-to-run");
        assert_eq!(slug("été: café"), "t-caf");
        assert_eq!(slug("…"), "run");
        let long = slug("make every function in the parser shorter than one hundred lines");
        assert!(long.len() <= MAX_SLUG, "{long}");
        assert_eq!(long, "make-every-function-in-the-parser");
        assert_eq!(slug(&"x".repeat(100)).len(), MAX_SLUG);
    }

    #[test]
    fn a_worktree_is_known_as_made_in_its_workspace_and_a_look_alike_is_not() {
        let dir = repository(true);
        let p = dir.path().canonicalize().unwrap();
        let repo = Repo::discover(&p).unwrap();
        let done = add_worktree(&repo, &p, "Edit a").unwrap();
        assert_eq!(made_in(&done.root), Some(p.clone()));
        assert_eq!(made_in(&done.root.join("sub")), Some(p.clone()));
        assert_eq!(run_roots(&p, ""), vec![done.root.clone()]);
        assert_eq!(made_in(&p), None);
        // A folder laid out the same way whose `.git` names another repository's worktree.
        let other = repository(true);
        let other_repo = Repo::discover(other.path()).unwrap();
        let theirs = add_worktree(&other_repo, other.path(), "x").unwrap();
        let fake = p.join(WORKTREES).join("fake");
        std::fs::create_dir_all(&fake).unwrap();
        std::fs::copy(theirs.root.join(".git"), fake.join(".git")).unwrap();
        assert_eq!(made_in(&fake), None);
    }
}
