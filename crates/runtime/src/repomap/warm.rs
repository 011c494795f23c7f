//! The repo maps a long-lived process keeps between runs (`agent-ls serve`): built once in the
//! background when the editor opens the workspace, lent whole to each run, and given back with
//! what the run parsed again, so a run from the editor starts with the whole map: it only
//! catches up with the disk (`RepoMap::catch_up_with`: the files that changed since, by the
//! editor or any other program, parsed again). Which files changed, the workspace's watch says
//! (`watch.rs`, armed before the build walks); without one, a walk. A process that never asks
//! (`agent-ls run`) keeps nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::watch::Watch;
use super::{Pending, RepoMap};

/// A kept workspace: its map and its watch.
struct Kept {
    slot: Slot,
    watch: Arc<Watch>,
}

/// A kept workspace's map.
enum Slot {
    Building(Pending),
    Ready(RepoMap),
    /// A run has it.
    Lent,
}

/// The maps kept, by workspace root.
fn kept() -> MutexGuard<'static, HashMap<PathBuf, Kept>> {
    static KEPT: OnceLock<Mutex<HashMap<PathBuf, Kept>>> = OnceLock::new();
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
    let watch = Arc::new(Watch::default());
    let (w, r) = (watch.clone(), root.to_path_buf());
    let arm = move || w.arm(&r);
    let pending = super::spawn_with(root.to_path_buf(), HashMap::new(), write_cache, true, arm);
    let slot = Slot::Building(pending);
    kept.insert(root.to_path_buf(), Kept { slot, watch });
}

/// A kept map lent to a run: whole (to catch up with the disk, with what its watch saw), or
/// still being built.
pub(crate) enum Lent {
    Ready(RepoMap, Arc<Watch>),
    Building(Pending),
}

/// `root`'s kept map, lent until `give_back`; `None` when it is not kept or another run has it.
pub(crate) fn lend(root: &Path) -> Option<Lent> {
    let mut kept = kept();
    let k = kept.get_mut(root)?;
    match std::mem::replace(&mut k.slot, Slot::Lent) {
        Slot::Ready(map) => Some(Lent::Ready(map, k.watch.clone())),
        // A build that finished since (a run waited for it and gave it back unfinished) is
        // lent as built maps are, to catch up with what changed after its walk.
        Slot::Building(p) => Some(match p.finished() {
            Some(map) => Lent::Ready(map, k.watch.clone()),
            None => Lent::Building(p),
        }),
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
    if let Some(k) = kept.get_mut(root) {
        k.slot = match map {
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
            Lent::Ready(m, _) => m,
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

    #[cfg(target_os = "linux")]
    #[test]
    fn a_kept_maps_watch_tells_a_run_what_changed_without_a_walk() {
        use super::super::watch::Changes;
        let dir = root_with(&[
            ("a.py", "def alpha():\n    pass\n"),
            ("b.py", "def beta():\n    pass\n"),
        ]);
        let root = dir.path();
        keep(root);
        let Some(lent) = lend(root) else {
            panic!("kept")
        };
        let map = wait(lent);
        give_back(root, Some(Returned::Ready(map)));
        let Some(Lent::Ready(_, watch)) = lend(root) else {
            panic!("ready")
        };
        // The build armed the watch before it walked: nothing has changed since.
        assert_eq!(watch.changes(root), Changes::Paths(Default::default()));
        // Given back while still building (a run that gave up waiting), a finished build is
        // lent ready: it catches up with what changed after its walk.
        give_back(
            root,
            Some(Returned::Building(super::super::spawn_with(
                root.to_path_buf(),
                HashMap::new(),
                false,
                false,
                || {},
            ))),
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (mut map, watch) = loop {
            match lend(root) {
                Some(Lent::Ready(m, w)) => break (m, w),
                Some(Lent::Building(p)) if std::time::Instant::now() < deadline => {
                    give_back(root, Some(Returned::Building(p)));
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                _ => panic!("still lent as a build a minute on"),
            }
        };
        std::fs::write(root.join("a.py"), "def alpha2():\n    pass\n").unwrap();
        assert_eq!(map.catch_up_with(root, watch.changes(root)), (1, false));
        assert_eq!(map.files["a.py"].defs[0].name, "alpha2");
        give_back(root, None);
    }
}
