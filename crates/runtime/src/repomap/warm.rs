//! The repo maps a long-lived process keeps between runs (`agent-ls serve`): built once in the
//! background when the editor opens the workspace, lent whole to each run, and given back with
//! what the run parsed again, so a run from the editor starts with the whole map: it only
//! catches up with the disk (`RepoMap::catch_up`: one walk, and the files that changed since,
//! by the editor or any other program, parsed again). A process that never asks
//! (`agent-ls run`) keeps nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::{Pending, RepoMap};

/// A kept workspace's map.
enum Slot {
    Building(Pending),
    Ready(RepoMap),
    /// A run has it.
    Lent,
}

/// The maps kept, by workspace root.
fn kept() -> MutexGuard<'static, HashMap<PathBuf, Slot>> {
    static KEPT: OnceLock<Mutex<HashMap<PathBuf, Slot>>> = OnceLock::new();
    KEPT.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Keeps `root`'s map from now on, starting its build in the background unless it is kept
/// already. The build writes the tag cache only where `.agent-ls/` exists, so a folder merely
/// opened in the editor is left as it was.
pub fn keep(root: &Path) {
    let mut kept = kept();
    if kept.contains_key(root) {
        return;
    }
    let write_cache = root.join(".agent-ls").is_dir();
    let pending = super::spawn_with(root.to_path_buf(), HashMap::new(), write_cache, true);
    kept.insert(root.to_path_buf(), Slot::Building(pending));
}

/// A kept map lent to a run: whole (to catch up with the disk), or still being built.
pub(crate) enum Lent {
    Ready(RepoMap),
    Building(Pending),
}

/// `root`'s kept map, lent until `give_back`; `None` when it is not kept or another run has it.
pub(crate) fn lend(root: &Path) -> Option<Lent> {
    let mut kept = kept();
    match std::mem::replace(kept.get_mut(root)?, Slot::Lent) {
        Slot::Ready(map) => Some(Lent::Ready(map)),
        Slot::Building(p) => Some(Lent::Building(p)),
        Slot::Lent => None,
    }
}

/// What a run gives back: the map it used, or the build it was still waiting for (`None`:
/// the build was lost, and the next `keep` starts another).
pub(crate) enum Returned {
    Ready(RepoMap),
    Building(Pending),
}

/// Gives `root`'s map back after a run (the editor's unsaved texts it parsed are read from
/// disk again when it next catches up).
pub(crate) fn give_back(root: &Path, map: Option<Returned>) {
    let mut kept = kept();
    let Some(map) = map else {
        kept.remove(root);
        return;
    };
    if let Some(slot) = kept.get_mut(root) {
        *slot = match map {
            Returned::Ready(m) => Slot::Ready(m),
            Returned::Building(p) => Slot::Building(p),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (p, t) in files {
            std::fs::write(dir.path().join(p), t).unwrap();
        }
        dir
    }

    fn wait(lent: Lent) -> RepoMap {
        match lent {
            Lent::Ready(m) => m,
            Lent::Building(p) => p.wait(std::time::Duration::from_secs(60)).unwrap(),
        }
    }

    #[test]
    fn a_kept_map_is_lent_once_at_a_time_and_catches_up_with_the_disk() {
        let dir = root_with(&[("a.py", "def alpha():\n    pass\n")]);
        let root = dir.path();
        assert!(lend(root).is_none(), "nothing is kept before keep");
        keep(root);
        let mut map = wait(lend(root).unwrap());
        assert!(map.files.contains_key("a.py"));
        assert!(lend(root).is_none(), "a lent map is not lent twice");
        // An unsaved buffer parsed by the run is read from disk again when it catches up.
        let buffers = HashMap::from([("a.py".to_string(), "def beta():\n    pass\n".to_string())]);
        map.refresh(root, &["a.py".into()], &buffers);
        give_back(root, Some(Returned::Ready(map)));
        std::fs::write(root.join("b.py"), "def gamma():\n    pass\n").unwrap();
        let mut map = wait(lend(root).unwrap());
        assert_eq!(map.catch_up(root), 2, "the buffer's file and the new one");
        let names = format!("{:?}", map.files);
        assert!(
            names.contains("alpha") && names.contains("gamma") && !names.contains("beta"),
            "{names}"
        );
        assert_eq!(map.catch_up(root), 0, "nothing moved since");
        std::fs::remove_file(root.join("b.py")).unwrap();
        assert_eq!(map.catch_up(root), 1);
        assert!(!map.files.contains_key("b.py"));
        assert!(
            !root.join(".agent-ls").exists(),
            "a folder without .agent-ls gets no cache"
        );
        give_back(root, None);
        assert!(lend(root).is_none(), "a lost build is forgotten");
    }
}
