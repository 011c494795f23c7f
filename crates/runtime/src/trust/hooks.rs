//! Which workspace hooks the user trusts, by the hash of their exact content:
//! `$XDG_STATE_HOME/agent-ls/hooks.json`, keyed by each folder's real path. A hook whose entry
//! or script changed has another hash, so it is not run until trusted again (`agent-ls hooks
//! trust`). IO only: reading and writing that file, and hashing the files a hook names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::store::{TrustError, state_dir, write_json};
use agent_ls_core::permissions::HookConfig;

/// The user's file of trusted hook hashes.
#[derive(Debug, Clone)]
pub struct HookTrust {
    path: PathBuf,
}

type Record = BTreeMap<String, BTreeSet<String>>;

impl HookTrust {
    pub fn for_user() -> Result<HookTrust, TrustError> {
        Ok(HookTrust {
            path: state_dir()
                .ok_or(TrustError::NoStateDir)?
                .join("hooks.json"),
        })
    }

    pub fn at(path: PathBuf) -> HookTrust {
        HookTrust { path }
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

    fn key(folder: &Path) -> Option<String> {
        folder
            .canonicalize()
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    pub fn is_trusted(&self, folder: &Path, hash: &str) -> bool {
        Self::key(folder)
            .and_then(|k| self.read().remove(&k))
            .is_some_and(|set| set.contains(hash))
    }

    /// Trusts exactly `hashes` for `folder`: the hashes trusted before and not named now are
    /// forgotten, so an old version of a hook cannot come back trusted.
    pub fn trust(&self, folder: &Path, hashes: &[String]) -> Result<PathBuf, TrustError> {
        let real = folder
            .canonicalize()
            .map_err(|e| TrustError::Folder(folder.to_path_buf(), e))?;
        let mut record = self.read();
        let key = real.to_string_lossy().into_owned();
        if hashes.is_empty() {
            record.remove(&key);
        } else {
            record.insert(key, hashes.iter().cloned().collect());
        }
        write_json(&self.path, &record)?;
        Ok(real)
    }
}

/// The hash of a hook's exact content: its entry, and the bytes of every file of the
/// workspace its command names (a script edited after it was trusted changes the hash).
pub fn hook_hash(hook: &HookConfig, root: &Path) -> String {
    let mut hasher = Sha256::new();
    hasher.update(serde_json::to_vec(hook).unwrap_or_default());
    for arg in &hook.command {
        let path = root.join(arg);
        let inside = path
            .canonicalize()
            .ok()
            .zip(root.canonicalize().ok())
            .is_some_and(|(p, r)| p.starts_with(r));
        if let (true, Ok(bytes)) = (inside, std::fs::read(&path)) {
            hasher.update(arg.as_bytes());
            hasher.update(&bytes);
        }
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_ls_core::permissions::HookEvent;

    #[test]
    fn editing_the_script_a_hook_names_changes_its_hash() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("check.sh"), "exit 0\n").unwrap();
        let hook = HookConfig {
            event: HookEvent::BeforeChange,
            matcher: String::new(),
            command: vec!["sh".into(), "check.sh".into()],
            timeout_secs: 5,
            sandbox: true,
        };
        let before = hook_hash(&hook, root.path());
        assert_eq!(before, hook_hash(&hook, root.path()));
        std::fs::write(root.path().join("check.sh"), "exit 2\n").unwrap();
        assert_ne!(before, hook_hash(&hook, root.path()));
        let state = tempfile::tempdir().unwrap();
        let trust = HookTrust::at(state.path().join("hooks.json"));
        trust
            .trust(root.path(), std::slice::from_ref(&before))
            .unwrap();
        assert!(trust.is_trusted(root.path(), &before));
        assert!(!trust.is_trusted(root.path(), &hook_hash(&hook, root.path())));
    }
}
