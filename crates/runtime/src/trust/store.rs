//! Where the user's trust decisions live: `$XDG_STATE_HOME/agent-ls/trust.json` (or
//! `~/.local/state/agent-ls/trust.json`), keyed by each folder's real path, so a symlink or a
//! relative path cannot stand in for a trusted folder. IO only; `agent-ls trust` and
//! `agent-ls untrust` change it, and the server when the user answers its question.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What the user decided about a folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Trusted,
    /// Asked and declined: not asked again until `agent-ls trust`.
    Declined,
    Unknown,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    #[serde(default)]
    trusted: BTreeSet<String>,
    #[serde(default)]
    declined: BTreeSet<String>,
}

/// The trust file of this user.
#[derive(Debug, Clone)]
pub struct TrustStore {
    path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("cannot find the folder {}: {}", .0.display(), .1)]
    Folder(PathBuf, std::io::Error),
    #[error("cannot write the trust file {}: {}", .0.display(), .1)]
    Write(PathBuf, std::io::Error),
    #[error("no state folder: set XDG_STATE_HOME or HOME")]
    NoStateDir,
}

/// `$XDG_STATE_HOME/agent-ls`, or `~/.local/state/agent-ls`.
pub fn state_dir() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".local/state"),
    };
    Some(base.join("agent-ls"))
}

impl TrustStore {
    pub fn for_user() -> Result<TrustStore, TrustError> {
        Ok(TrustStore {
            path: state_dir()
                .ok_or(TrustError::NoStateDir)?
                .join("trust.json"),
        })
    }

    pub fn at(path: PathBuf) -> TrustStore {
        TrustStore { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn read(&self) -> Record {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    /// The decision for `folder`; a folder that cannot be resolved is unknown.
    pub fn decision(&self, folder: &Path) -> Decision {
        let Ok(real) = folder.canonicalize() else {
            return Decision::Unknown;
        };
        let key = real.to_string_lossy().into_owned();
        let record = self.read();
        if record.trusted.contains(&key) {
            Decision::Trusted
        } else if record.declined.contains(&key) {
            Decision::Declined
        } else {
            Decision::Unknown
        }
    }

    /// Records a decision for `folder` (by its real path); `Unknown` forgets it.
    pub fn set(&self, folder: &Path, decision: Decision) -> Result<PathBuf, TrustError> {
        let real = folder
            .canonicalize()
            .map_err(|e| TrustError::Folder(folder.to_path_buf(), e))?;
        let key = real.to_string_lossy().into_owned();
        let mut record = self.read();
        record.trusted.remove(&key);
        record.declined.remove(&key);
        match decision {
            Decision::Trusted => {
                record.trusted.insert(key);
            }
            Decision::Declined => {
                record.declined.insert(key);
            }
            Decision::Unknown => {}
        }
        write_json(&self.path, &record)?;
        Ok(real)
    }
}

/// Writes `value` as JSON to `path` at once (a temporary file renamed over it), so a reader
/// never sees half a trust file.
pub(super) fn write_json(path: &Path, value: &impl Serialize) -> Result<(), TrustError> {
    let write = |e| TrustError::Write(path.to_path_buf(), e);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(write)?;
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(write)?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(write)?;
    tmp.persist(path).map_err(|e| write(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_kept_by_real_path() {
        let state = tempfile::tempdir().unwrap();
        let store = TrustStore::at(state.path().join("trust.json"));
        let folder = tempfile::tempdir().unwrap();
        let link = state.path().join("link");
        std::os::unix::fs::symlink(folder.path(), &link).unwrap();
        assert_eq!(store.decision(folder.path()), Decision::Unknown);
        store.set(&link, Decision::Trusted).unwrap();
        assert_eq!(store.decision(folder.path()), Decision::Trusted);
        store.set(folder.path(), Decision::Declined).unwrap();
        assert_eq!(store.decision(&link), Decision::Declined);
        store.set(folder.path(), Decision::Unknown).unwrap();
        assert_eq!(store.decision(folder.path()), Decision::Unknown);
    }
}
