//! The `git` binary, run safely: every call time-bound, never a pager, an editor or a
//! prompt, and with the repository's own program-running settings (fsmonitor, hooks, clean
//! and smudge filters, external diff, textconv, ssh) turned off, since a repository's config is
//! not trusted (docs/security.md). Below everything else in `git/`: checkpoints, commits and
//! the rest call git through it, and it uses none of them.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use nix::unistd::Pid;
use std::time::Duration;

/// The oldest git that has everything used here (`--attr-source`, which reads attributes from
/// an empty tree so no filter or line-ending conversion applies, is 2.40's).
pub const MIN_VERSION: (u32, u32) = (2, 40);

/// How long one git call may take before it is killed.
const TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error(transparent)]
    NoGit(#[from] NoGit),
    #[error("{0} is not inside a git repository")]
    NotARepo(PathBuf),
    #[error("`git {args}` failed: {stderr}")]
    Failed { args: String, stderr: String },
    #[error("`git {args}` took longer than {secs} s and was stopped")]
    Timeout { args: String, secs: u64 },
    #[error("git: {0}")]
    Io(#[from] std::io::Error),
}

/// Why git cannot be used at all. Found once per process and kept, so it is `Clone`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoGit {
    #[error("git was not found on PATH; install git {}.{} or newer", MIN_VERSION.0, MIN_VERSION.1)]
    Missing,
    #[error("git {found} is too old; agent-ls needs git {}.{} or newer", MIN_VERSION.0, MIN_VERSION.1)]
    TooOld { found: String },
}

/// A repository as seen from a workspace folder inside it.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The top of the working tree: every git call runs here.
    pub top: PathBuf,
    /// The workspace's path below `top` ("" or "sub/dir/"), so workspace paths map to git's.
    pub prefix: String,
    /// The real index file, copied (never written) to seed a temporary one.
    pub index: PathBuf,
    /// The object id of the empty tree, the attribute source that turns attributes off.
    empty_tree: String,
    /// The filter drivers the config defines, each blanked on every call: an attribute in
    /// `.git/info/attributes` would otherwise still name one.
    filters: Vec<String>,
}

/// The non-empty names of a `-z` listing (NUL-separated), as text.
pub(crate) fn nul_list(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Checks that git is on PATH and new enough, once per process.
pub fn check_version() -> Result<(), GitError> {
    static FOUND: OnceLock<Result<(), NoGit>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let out = Command::new("git").arg("--version").output();
        match out {
            Err(_) => Err(NoGit::Missing),
            Ok(o) => {
                let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
                let version = text.trim_start_matches("git version ").to_string();
                let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
                if v >= MIN_VERSION {
                    Ok(())
                } else {
                    Err(NoGit::TooOld { found: version })
                }
            }
        }
    });
    Ok(found.clone()?)
}

impl Repo {
    /// The repository `dir` is in; `NotARepo` when there is none.
    pub fn discover(dir: &Path) -> Result<Repo, GitError> {
        check_version()?;
        let probe = Git::plain(dir);
        let out = match probe.run(&["rev-parse", "--show-toplevel", "--show-prefix"], None) {
            Ok(o) => o,
            Err(GitError::Failed { stderr, .. }) if stderr.contains("not a git repository") => {
                return Err(GitError::NotARepo(dir.to_path_buf()));
            }
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.lines();
        let top = PathBuf::from(lines.next().unwrap_or_default());
        let prefix = lines.next().unwrap_or_default().to_string();
        let index = Git::plain(&top).run(
            &["rev-parse", "--path-format=absolute", "--git-path", "index"],
            None,
        )?;
        let index = PathBuf::from(String::from_utf8_lossy(&index).trim());
        let top_git = Git::plain(&top);
        let empty_tree = top_git.run_in(&["mktree"], b"")?;
        let empty_tree = String::from_utf8_lossy(&empty_tree).trim().to_string();
        let names = top_git
            .run(
                &["config", "--name-only", "-z", "--get-regexp", r"^filter\."],
                None,
            )
            .unwrap_or_default();
        let mut filters: Vec<String> = names
            .split(|b| *b == 0)
            .filter_map(|n| {
                let n = String::from_utf8_lossy(n);
                let rest = n.strip_prefix("filter.")?;
                Some(rest.rsplit_once('.')?.0.to_string())
            })
            .collect();
        filters.sort();
        filters.dedup();
        Ok(Repo {
            top,
            prefix,
            index,
            empty_tree,
            filters,
        })
    }

    /// A git call in the working tree, with the temporary index `index` when given. It reads
    /// no attributes and runs no filter driver the config names, so the bytes recorded and
    /// compared are the files' own (and `write-tree`'s re-check of a racily clean entry
    /// runs no clean filter either).
    pub fn git(&self, index: Option<&Path>) -> Git {
        Git {
            dir: self.top.clone(),
            index: index.map(Path::to_path_buf),
            attr_source: Some(self.empty_tree.clone()),
            filters: self.filters.clone(),
            user: None,
        }
    }

    /// A git call as the user's own `git` would make it, for the commands the user asked for
    /// (commit, push) in a folder they trust: their hooks (unless `hooks` is false), filters,
    /// attributes, credential helpers and ssh command apply, and the author and committer are
    /// theirs. It still never waits on a person: no pager, editor or terminal prompt.
    pub fn user_git(&self, hooks: bool) -> Git {
        Git {
            dir: self.top.clone(),
            index: None,
            attr_source: None,
            filters: Vec::new(),
            user: Some(UserMode { hooks }),
        }
    }

    /// A workspace path as git names it (relative to the top of the working tree).
    pub fn path(&self, relative: &str) -> String {
        format!("{}{}", self.prefix, relative)
    }
}

/// A finished git call: its exit code, standard output and standard error.
pub type Ended = (Option<i32>, Vec<u8>, Vec<u8>);

/// One git command line, built with the overrides every call gets.
pub struct Git {
    dir: PathBuf,
    index: Option<PathBuf>,
    attr_source: Option<String>,
    filters: Vec<String>,
    /// Run as the user's own git (`Repo::user_git`), not with the repository's programs off.
    user: Option<UserMode>,
}

/// What a call made as the user's own git keeps of the safe call's overrides.
#[derive(Debug, Clone, Copy)]
struct UserMode {
    /// Run the repository's hooks.
    hooks: bool,
}

/// Overrides every call gets, the user's own included: nothing waits on a person.
const ALWAYS: &[&str] = &[
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=true",
    "core.askPass=true",
    "core.untrackedCache=false",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "commit.gpgSign=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.addEmbeddedRepo=false",
];

/// Overrides of the safe calls only: the repository's programs, its attributes and line
/// ending conversion off, and no network.
const SAFE: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.sshCommand=false",
    "core.attributesFile=/dev/null",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "protocol.allow=never",
];

impl Git {
    fn plain(dir: &Path) -> Git {
        Git {
            dir: dir.to_path_buf(),
            index: None,
            attr_source: None,
            filters: Vec::new(),
            user: None,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.current_dir(&self.dir);
        // Settings of the repository that would run a program of its choosing, or wait on a
        // person, are overridden on every call (the user's own calls keep their programs).
        let safe = match self.user {
            None => SAFE,
            Some(UserMode { hooks: false }) => &SAFE[..1],
            Some(UserMode { hooks: true }) => &[],
        };
        for setting in ALWAYS.iter().chain(safe) {
            c.args(["-c", setting]);
        }
        for name in &self.filters {
            for key in ["clean", "smudge", "process"] {
                c.args(["-c", &format!("filter.{name}.{key}=")]);
            }
            c.args(["-c", &format!("filter.{name}.required=false")]);
        }
        if let Some(tree) = &self.attr_source {
            c.arg(format!("--attr-source={tree}"));
        }
        c.args(args);
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_EXTERNAL_DIFF",
        ] {
            c.env_remove(var);
        }
        if self.user.is_none() {
            c.env_remove("GIT_SSH").env_remove("GIT_SSH_COMMAND");
        }
        if let Some(index) = &self.index {
            c.env("GIT_INDEX_FILE", index);
        }
        c.env("GIT_PAGER", "cat")
            .env("PAGER", "cat")
            .env("GIT_EDITOR", "true")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("LC_ALL", "C");
        if self.user.is_none() {
            c.env("GIT_OPTIONAL_LOCKS", "0")
                .env("GIT_AUTHOR_NAME", "agent-ls")
                .env("GIT_AUTHOR_EMAIL", "agent-ls@localhost")
                .env("GIT_COMMITTER_NAME", "agent-ls")
                .env("GIT_COMMITTER_EMAIL", "agent-ls@localhost");
        }
        crate::child::start_clean(&mut c);
        c
    }

    /// Runs `git args` and returns its standard output; a non-zero exit is `Failed`.
    pub fn run(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Vec<u8>, GitError> {
        let (code, out, err) = self.status(args, stdin)?;
        if code == Some(0) {
            Ok(out)
        } else {
            Err(GitError::Failed {
                args: args.join(" "),
                stderr: String::from_utf8_lossy(&err).trim().to_string(),
            })
        }
    }

    /// `run` with `stdin` given.
    pub fn run_in(&self, args: &[&str], stdin: &[u8]) -> Result<Vec<u8>, GitError> {
        self.run(args, Some(stdin))
    }

    /// Runs `git args` within the time bound: its exit code, standard output and error.
    pub fn status(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Ended, GitError> {
        bounded(self.command(args), &args.join(" "), stdin)
    }
}

/// Blocks until the child `pid` has exited, without reaping it (`WNOWAIT`): until it is
/// reaped under the lock, its pid cannot be given to another process.
fn exited(pid: Pid) {
    use nix::sys::wait::{Id, WaitPidFlag, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
}

/// The child, whoever panicked while holding it: a `Child` has no state a panic half-changes.
fn lock(child: &Mutex<Child>) -> std::sync::MutexGuard<'_, Child> {
    child
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `cmd` within the time bound (killed after it): its exit code, standard output and
/// error. `label` names it in a timeout's error.
pub fn bounded(mut cmd: Command, label: &str, stdin: Option<&[u8]>) -> Result<Ended, GitError> {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => GitError::from(NoGit::Missing),
        _ => GitError::Io(e),
    })?;
    let pid = Pid::from_raw(child.id() as i32);
    let input = stdin.map(<[u8]>::to_vec);
    let mut pipe_in = child.stdin.take();
    let mut pipe_out = child.stdout.take();
    let mut pipe_err = child.stderr.take();
    // Shared with the waiter, which reaps the child only while holding the lock: a kill made
    // under the same lock is sent to our own child (running, or a zombie whose pid no other
    // process can have) or to none (`Child` remembers that it was reaped and sends nothing).
    let child = Arc::new(Mutex::new(child));
    let waited = Arc::clone(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let writer = std::thread::spawn(move || {
            if let (Some(p), Some(i)) = (pipe_in.as_mut(), input) {
                let _ = p.write_all(&i);
            }
            drop(pipe_in);
        });
        let errs = std::thread::spawn(move || {
            let mut e = Vec::new();
            if let Some(p) = pipe_err.as_mut() {
                let _ = p.read_to_end(&mut e);
            }
            e
        });
        let mut out = Vec::new();
        if let Some(p) = pipe_out.as_mut() {
            let _ = p.read_to_end(&mut out);
        }
        let _ = writer.join();
        let err = errs.join().unwrap_or_default();
        exited(pid);
        let status = lock(&waited).wait();
        let _ = tx.send(status.map(|s| (s.code(), out, err)));
    });
    match rx.recv_timeout(TIMEOUT) {
        Ok(r) => Ok(r?),
        Err(_) => {
            // Under the lock the waiter cannot reap it, so the pid is still this child's; if
            // it was reaped already, `kill` sends nothing.
            let _ = lock(&child).kill();
            Err(GitError::Timeout {
                args: label.to_string(),
                secs: TIMEOUT.as_secs(),
            })
        }
    }
}
