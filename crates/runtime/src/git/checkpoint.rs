//! Checkpoints: the whole working tree (tracked changes and untracked files git does not
//! ignore) recorded as a commit in the user's own object database before a run writes, built
//! through a temporary index so the user's index, HEAD, branch and stash are never touched,
//! and kept alive by `refs/agent-ls/checkpoints/<run>`. A run's change is then a diff against
//! it, and rolling the run back restores the files it changed from it.

use std::collections::BTreeMap;
use std::path::Path;

use super::{GitError, Repo, nul_list};

/// Where checkpoints are kept, one ref per run.
pub const REFS: &str = "refs/agent-ls/checkpoints/";
/// Untracked files larger than this are left out of a checkpoint.
pub const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Untracked folders with more files than this are left out of a checkpoint.
pub const MAX_FOLDER_FILES: usize = 1000;

/// What a run left in each file it changed: the blob id of its bytes, or `None` when the run
/// deleted it. Keys are workspace paths.
pub type RunFiles = BTreeMap<String, Option<String>>;

/// A recorded working tree.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The checkpoint commit's id.
    pub id: String,
    /// Untracked paths left out, each with why ("24 MiB", "1,204 files").
    pub left_out: Vec<(String, String)>,
}

impl Checkpoint {
    /// The one warning naming everything left out, if anything was.
    pub fn warning(&self) -> Option<String> {
        if self.left_out.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .left_out
            .iter()
            .map(|(p, why)| format!("{p} ({why})"))
            .collect();
        Some(format!(
            "the checkpoint leaves out untracked files over 10 MiB and folders of over {MAX_FOLDER_FILES} files; rollback cannot restore: {}",
            named.join(", ")
        ))
    }
}

/// A temporary index file (in a folder of its own, since git wants to create the file and
/// its lock beside it), removed when dropped.
struct TempIndex {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl TempIndex {
    fn new() -> Result<TempIndex, GitError> {
        let dir = tempfile::Builder::new()
            .prefix("agent-ls-index")
            .tempdir()?;
        let path = dir.path().join("index");
        Ok(TempIndex { _dir: dir, path })
    }
}

/// The commit HEAD points at, if the repository has one yet.
pub fn head(repo: &Repo) -> Option<String> {
    let out = repo
        .git(None)
        .run(&["rev-parse", "--verify", "-q", "HEAD^{commit}"], None)
        .ok()?;
    Some(String::from_utf8_lossy(&out).trim().to_string())
}

/// The checkpoint `run_id` already has, if any (a resumed run's).
pub fn existing(repo: &Repo, run_id: &str) -> Option<String> {
    let name = format!("{REFS}{run_id}^{{commit}}");
    let out = repo
        .git(None)
        .run(&["rev-parse", "--verify", "-q", &name], None)
        .ok()?;
    Some(String::from_utf8_lossy(&out).trim().to_string())
}

/// Records the working tree as a checkpoint of `run_id`.
pub fn take(repo: &Repo, run_id: &str) -> Result<Checkpoint, GitError> {
    let index = TempIndex::new()?;
    let head = head(repo);
    // Seeded from the real index, whose file stat data lets `add` skip unchanged files.
    if repo.index.exists() {
        std::fs::copy(&repo.index, &index.path)?;
        // The copy keeps the index's time: git trusts an entry's stat data only for files
        // older than the index, and a fresh time would let a file rewritten to the same size
        // in the index's second pass as unchanged (the racy-git rule).
        let modified = std::fs::metadata(&repo.index)?.modified()?;
        std::fs::File::options()
            .write(true)
            .open(&index.path)?
            .set_modified(modified)?;
    } else if let Some(h) = &head {
        repo.git(Some(&index.path)).run(&["read-tree", h], None)?;
    }
    let raw = repo.git(Some(&index.path));
    let left_out = left_out(repo, &index.path)?;
    let mut spec: Vec<u8> = b".\0".to_vec();
    for (p, _) in &left_out {
        spec.extend_from_slice(format!(":(exclude,literal){p}\0").as_bytes());
    }
    raw.run_in(
        &[
            "add",
            "--all",
            "--pathspec-from-file=-",
            "--pathspec-file-nul",
        ],
        &spec,
    )?;
    let tree = repo.git(Some(&index.path)).run(&["write-tree"], None)?;
    let tree = String::from_utf8_lossy(&tree).trim().to_string();
    let stamp = crate::clock::now_ms();
    // The paths left out are named in the message, so a rollback never deletes one as if
    // the run had created it.
    let mut message = format!("agent-ls checkpoint {run_id} {stamp}\n");
    if !left_out.is_empty() {
        message.push('\n');
        for (p, _) in &left_out {
            message.push_str(&format!("left-out: {p}\n"));
        }
    }
    let mut args = vec!["commit-tree", "--no-gpg-sign", tree.as_str()];
    if let Some(h) = &head {
        args.extend(["-p", h.as_str()]);
    }
    let id = repo.git(None).run_in(&args, message.as_bytes())?;
    let id = String::from_utf8_lossy(&id).trim().to_string();
    let name = format!("{REFS}{run_id}");
    repo.git(None).run(
        &[
            "update-ref",
            "--no-deref",
            "-m",
            "agent-ls checkpoint",
            &name,
            &id,
        ],
        None,
    )?;
    Ok(Checkpoint { id, left_out })
}

/// The untracked paths git does not ignore that are too big to record: files over
/// `MAX_FILE_BYTES`, and wholly untracked folders of more than `MAX_FOLDER_FILES` files.
fn left_out(repo: &Repo, index: &Path) -> Result<Vec<(String, String)>, GitError> {
    let git = repo.git(Some(index));
    let files = git.run(&["ls-files", "-z", "--others", "--exclude-standard"], None)?;
    let dirs = git.run(
        &[
            "ls-files",
            "-z",
            "--others",
            "--exclude-standard",
            "--directory",
        ],
        None,
    )?;
    let files: Vec<String> = nul_list(&files);
    let mut out = Vec::new();
    let mut big_dirs: Vec<String> = Vec::new();
    for d in nul_list(&dirs).into_iter().filter(|d| d.ends_with('/')) {
        let n = files.iter().filter(|f| f.starts_with(&d)).count();
        if n > MAX_FOLDER_FILES {
            out.push((d.trim_end_matches('/').to_string(), format!("{n} files")));
            big_dirs.push(d);
        }
    }
    for f in &files {
        if big_dirs.iter().any(|d| f.starts_with(d)) {
            continue;
        }
        let size = std::fs::symlink_metadata(repo.top.join(f)).map_or(0, |m| m.len());
        if size > MAX_FILE_BYTES {
            out.push((f.clone(), format!("{} MiB", size / (1024 * 1024))));
        }
    }
    Ok(out)
}

/// The checkpoint refs, newest first: (ref name, commit, when it was taken in ms).
pub fn list(repo: &Repo) -> Result<Vec<(String, String, u128)>, GitError> {
    let out = repo.git(None).run(
        &[
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(contents:subject)",
            REFS,
        ],
        None,
    )?;
    let mut refs: Vec<(String, String, u128)> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| {
            let mut p = l.split('\0');
            let (name, id, subject) = (p.next()?, p.next()?, p.next()?);
            let stamp = subject.rsplit(' ').next()?.parse().unwrap_or(0);
            Some((name.to_string(), id.to_string(), stamp))
        })
        .collect();
    refs.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| b.0.cmp(&a.0)));
    Ok(refs)
}

/// When a checkpoint was taken (Unix milliseconds, from its message).
pub fn taken_at(repo: &Repo, checkpoint: &str) -> Option<u128> {
    let out = repo
        .git(None)
        .run(&["show", "-s", "--format=%s", checkpoint], None)
        .ok()?;
    let subject = String::from_utf8_lossy(&out);
    subject.trim().rsplit(' ').next()?.parse().ok()
}

/// Drops every checkpoint ref but the newest `keep`: the names of the runs dropped.
pub fn gc(repo: &Repo, keep: usize) -> Result<Vec<String>, GitError> {
    let old: Vec<_> = list(repo)?.into_iter().skip(keep).collect();
    if old.is_empty() {
        return Ok(Vec::new());
    }
    let mut script = String::new();
    for (name, id, _) in &old {
        script.push_str(&format!("delete {name} {id}\n"));
    }
    repo.git(None)
        .run_in(&["update-ref", "--stdin"], script.as_bytes())?;
    Ok(old
        .into_iter()
        .map(|(n, _, _)| n.trim_start_matches(REFS).to_string())
        .collect())
}

/// The blob id of each workspace file's bytes as they are now (`None`: no such file).
pub fn files_now(repo: &Repo, files: &[String]) -> Result<RunFiles, GitError> {
    let present: Vec<&String> = files
        .iter()
        .filter(|f| std::fs::symlink_metadata(repo.top.join(repo.path(f))).is_ok())
        .collect();
    let mut ids = Vec::new();
    if !present.is_empty() {
        let paths: String = present.iter().map(|f| repo.path(f) + "\n").collect();
        let out = repo.git(None).run_in(
            &["hash-object", "--no-filters", "--stdin-paths"],
            paths.as_bytes(),
        )?;
        ids = String::from_utf8_lossy(&out)
            .lines()
            .map(str::to_string)
            .collect();
    }
    let mut now: RunFiles = files.iter().map(|f| (f.clone(), None)).collect();
    for (f, id) in present.into_iter().zip(ids) {
        now.insert(f.clone(), Some(id));
    }
    Ok(now)
}

/// The run's change to `files` (workspace paths) as a unified diff from the checkpoint to
/// the files as they are now, paths relative to the top of the working tree, which
/// `git apply --check` accepts on the checkpoint.
pub fn diff(repo: &Repo, checkpoint: &str, files: &[String]) -> Result<Vec<u8>, GitError> {
    diff_with_context(repo, checkpoint, files, 3)
}

/// `diff` with `context` lines around each hunk (a reviewer reads more than a patch needs).
pub fn diff_with_context(
    repo: &Repo,
    checkpoint: &str,
    files: &[String],
    context: usize,
) -> Result<Vec<u8>, GitError> {
    let unified = format!("--unified={context}");
    let index = TempIndex::new()?;
    repo.git(Some(&index.path))
        .run(&["read-tree", checkpoint], None)?;
    let mut paths = Vec::new();
    for f in files {
        paths.extend_from_slice(repo.path(f).as_bytes());
        paths.push(0);
    }
    repo.git(Some(&index.path)).run_in(
        &["update-index", "--add", "--remove", "-z", "--stdin"],
        &paths,
    )?;
    let mut args = vec![
        "diff",
        "--cached",
        "--binary",
        "--full-index",
        "--no-ext-diff",
        "--no-textconv",
        "--no-color",
        "--no-renames",
        &unified,
        "--src-prefix=a/",
        "--dst-prefix=b/",
        checkpoint,
        "--",
    ];
    let named: Vec<String> = files
        .iter()
        .map(|f| format!(":(literal){}", repo.path(f)))
        .collect();
    args.extend(named.iter().map(String::as_str));
    repo.git(Some(&index.path)).run(&args, None)
}

#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error(
        "changed since the run: {}; rollback would lose those changes (--force rolls back anyway)",
        .0.join(", ")
    )]
    ChangedSince(Vec<String>),
    #[error(
        "not in the checkpoint (too big, left out): {}; --force rolls back the other files",
        .0.join(", ")
    )]
    LeftOut(Vec<String>),
    #[error("the checkpoint {0} is no longer in the repository (dropped by `agent-ls gc`?)")]
    Gone(String),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{0}: {1}")]
    Write(String, std::io::Error),
}

/// What one file becomes when a run is rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restore {
    /// A regular file with these bytes (`executable`: mode 100755 in the checkpoint).
    File { bytes: Vec<u8>, executable: bool },
    /// A symbolic link to this target.
    Symlink(String),
    /// Deleted: the run created it.
    Delete,
}

/// A rollback computed but not yet written, so a front end can apply it its own way (an
/// editor through a WorkspaceEdit, so unsaved buffers stay right; ACP through the client).
#[derive(Debug, Clone)]
pub struct RollbackPlan {
    /// Each file the run changed that the checkpoint recorded (workspace paths), and what it
    /// becomes.
    pub files: Vec<(String, Restore)>,
    /// Files the run changed that the checkpoint left out (too big): never touched.
    pub left_out: Vec<String>,
}

/// Computes the rollback of a run that left `left` in the files it changed, without writing
/// anything. Errors when the checkpoint is gone.
pub fn plan_rollback(
    repo: &Repo,
    checkpoint: &str,
    left: &RunFiles,
) -> Result<RollbackPlan, RollbackError> {
    let probe = format!("{checkpoint}^{{commit}}");
    if repo
        .git(None)
        .run(&["cat-file", "-e", &probe], None)
        .is_err()
    {
        return Err(RollbackError::Gone(checkpoint.to_string()));
    }
    let body = repo
        .git(None)
        .run(&["cat-file", "commit", checkpoint], None)?;
    let recorded_left_out: Vec<String> = String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| l.strip_prefix("left-out: ").map(str::to_string))
        .collect();
    let outside = |f: &String| {
        let path = repo.path(f);
        recorded_left_out
            .iter()
            .any(|l| path == *l || path.starts_with(&format!("{l}/")))
    };
    let (left_out, files): (Vec<String>, Vec<String>) = left.keys().cloned().partition(outside);
    let mut planned = Vec::with_capacity(files.len());
    for f in files {
        let restore = restore_of(repo, checkpoint, &f)?;
        planned.push((f, restore));
    }
    Ok(RollbackPlan {
        files: planned,
        left_out,
    })
}

/// The files among `files` whose content now differs from what the run left in them: the
/// bytes on disk, or for a file in `texts` (an editor's unsaved buffer) that text.
pub fn changed_since(
    repo: &Repo,
    left: &RunFiles,
    files: &[String],
    texts: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<String>, GitError> {
    let on_disk: Vec<String> = files
        .iter()
        .filter(|f| !texts.contains_key(*f))
        .cloned()
        .collect();
    let mut now = files_now(repo, &on_disk)?;
    for (f, bytes) in texts.iter().filter(|(f, _)| files.contains(f)) {
        let id = repo
            .git(None)
            .run_in(&["hash-object", "--no-filters", "--stdin"], bytes)?;
        now.insert(
            f.clone(),
            Some(String::from_utf8_lossy(&id).trim().to_string()),
        );
    }
    Ok(files
        .iter()
        .filter(|f| now.get(*f) != left.get(*f))
        .cloned()
        .collect())
}

/// Writes a planned rollback to disk; returns the files restored or deleted.
pub fn apply(repo: &Repo, plan: &RollbackPlan) -> Result<Vec<String>, RollbackError> {
    for (f, restore) in &plan.files {
        write_restore(repo, f, restore)?;
    }
    Ok(plan.files.iter().map(|(f, _)| f.clone()).collect())
}

/// What a rollback did: the files restored or deleted, and those that already held the
/// checkpoint's content (rolled back before, or put back by hand) and were left alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolledBack {
    pub done: Vec<String>,
    pub already: Vec<String>,
}

/// Restores each file the run changed (`left`'s keys) from the checkpoint, deleting those it
/// created. A file whose bytes differ from what the run left is a refusal unless `force`, and
/// so is a file the checkpoint left out (with `force` it is left as it is). A file that
/// already holds the checkpoint's content is no conflict and is left alone, so a second
/// rollback changes nothing.
pub fn rollback(
    repo: &Repo,
    checkpoint: &str,
    left: &RunFiles,
    force: bool,
) -> Result<RolledBack, RollbackError> {
    let mut plan = plan_rollback(repo, checkpoint, left)?;
    if !plan.left_out.is_empty() && !force {
        return Err(RollbackError::LeftOut(plan.left_out));
    }
    let none = BTreeMap::new();
    let already = plan.take_restored(repo, &none);
    let files: Vec<String> = plan.files.iter().map(|(f, _)| f.clone()).collect();
    let changed = changed_since(repo, left, &files, &none)?;
    if !changed.is_empty() && !force {
        return Err(RollbackError::ChangedSince(changed));
    }
    Ok(RolledBack {
        done: apply(repo, &plan)?,
        already,
    })
}

impl RollbackPlan {
    /// Takes out of the plan the files that already hold what it would give them, as `texts`
    /// (an editor's or ACP client's buffers) or else the disk has them; returns their names.
    pub fn take_restored(&mut self, repo: &Repo, texts: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
        let (held, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.files)
            .into_iter()
            .partition(|(f, r)| already_restored(repo, f, r, texts));
        self.files = rest;
        held.into_iter().map(|(f, _)| f).collect()
    }
}

/// Whether the workspace file `file` already holds what `restore` gives it: its text in
/// `texts` when there, else what is on disk.
fn already_restored(
    repo: &Repo,
    file: &str,
    restore: &Restore,
    texts: &BTreeMap<String, Vec<u8>>,
) -> bool {
    let on_disk = repo.top.join(repo.path(file));
    let meta = std::fs::symlink_metadata(&on_disk);
    match restore {
        Restore::Delete => !texts.contains_key(file) && meta.is_err(),
        Restore::Symlink(target) => {
            meta.is_ok_and(|m| m.file_type().is_symlink())
                && std::fs::read_link(&on_disk).is_ok_and(|t| t.to_string_lossy() == *target)
        }
        Restore::File { bytes, .. } => match texts.get(file) {
            Some(text) => text == bytes,
            None => {
                meta.is_ok_and(|m| m.is_file())
                    && std::fs::read(&on_disk).is_ok_and(|b| b == *bytes)
            }
        },
    }
}

/// What the checkpoint has for one workspace file.
fn restore_of(repo: &Repo, checkpoint: &str, file: &str) -> Result<Restore, RollbackError> {
    let literal = format!(":(literal){}", repo.path(file));
    let entry = repo
        .git(None)
        .run(&["ls-tree", "-z", checkpoint, "--", &literal], None)?;
    let entry = String::from_utf8_lossy(&entry);
    // "<mode> blob <id>\t<path>"
    let Some((meta, _)) = entry.split_once('\t') else {
        return Ok(Restore::Delete);
    };
    let mut parts = meta.split(' ');
    let (mode, _kind, id) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let bytes = repo.git(None).run(&["cat-file", "blob", id], None)?;
    Ok(match mode {
        "120000" => Restore::Symlink(String::from_utf8_lossy(&bytes).into_owned()),
        _ => Restore::File {
            bytes,
            executable: mode == "100755",
        },
    })
}

/// Puts one workspace file on disk as planned.
fn write_restore(repo: &Repo, file: &str, restore: &Restore) -> Result<(), RollbackError> {
    let on_disk = repo.top.join(repo.path(file));
    let werr = |e| RollbackError::Write(file.to_string(), e);
    let (bytes, executable) = match restore {
        Restore::Delete => {
            return match std::fs::remove_file(&on_disk) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(werr(e)),
                _ => Ok(()),
            };
        }
        Restore::Symlink(target) => {
            if let Some(parent) = on_disk.parent() {
                std::fs::create_dir_all(parent).map_err(werr)?;
            }
            let _ = std::fs::remove_file(&on_disk);
            return std::os::unix::fs::symlink(target, &on_disk).map_err(werr);
        }
        Restore::File { bytes, executable } => (bytes, *executable),
    };
    if let Some(parent) = on_disk.parent() {
        std::fs::create_dir_all(parent).map_err(werr)?;
    }
    if std::fs::symlink_metadata(&on_disk).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(&on_disk).map_err(werr)?;
    }
    crate::files::write_atomic(&on_disk, bytes).map_err(werr)?;
    set_executable(&on_disk, executable).map_err(werr)
}

/// Gives a file the executable bit a checkpoint recorded for it, or takes it away: for a
/// file written by a client (an editor or an ACP client writes text, not modes) as for one
/// written here.
pub fn set_executable(path: &Path, executable: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut perm = std::fs::metadata(path)?.permissions();
    let bits = perm.mode();
    let want = if executable {
        bits | 0o111
    } else {
        bits & !0o111
    };
    if want != bits {
        perm.set_mode(want);
        std::fs::set_permissions(path, perm)?;
    }
    Ok(())
}
