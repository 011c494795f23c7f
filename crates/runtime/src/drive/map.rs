//! A run's repo map and where its time went. The map is built once a run, on a background
//! thread started when the run opens; the first context waits for it within a budget (longer
//! for a cold map than a warm one) and
//! otherwise goes out with a map of the files the goal and the failures name (and the open
//! buffers), taking the whole map at a later step once it is there. Later steps re-parse only
//! the files the run changed and the buffers, never the repository. The phase timings are
//! written to the journal as one `phases` line at the run's end (docs/bigrepo.md) and shown
//! by `agent-ls stats`. Under `agent-ls serve` the map is the one the server keeps
//! (`repomap::warm`), lent for the run and given back at its end.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::repomap::warm::{self, Lent, Returned};
use crate::repomap::{Pending, RepoMap};

/// How long the first context waits for a cold map (no cache yet) before going without it:
/// a small repository's is built within it; a big one's is finished in the background.
const COLD_BUDGET: Duration = Duration::from_millis(1500);
/// How long it waits for a warm map (its cache there, or the one the server keeps). Reading
/// the cache and ranking are a few tens of milliseconds a thousand files (docs/bigrepo.md): a
/// warm map not built by then is a big repository's, and its first request does not wait.
const WARM_BUDGET: Duration = Duration::from_millis(400);
/// A warm map of more files than this is not waited for at all: reading its cache and ranking
/// it take longer than the warm budget (0.6 s for 17,784 files on the 2-core machine kind,
/// about 34 µs a file: some 12,000 files fit 0.4 s), so waiting the budget out would only
/// delay the first request. The map joins at a later step, as a late one does.
const WARM_WAIT_FILES: usize = 12_000;

/// Files a warm build may still have to parse for its first context to wait for it: about
/// what two cores parse within the warm budget.
const MISSING_WAIT_FILES: usize = 300;

/// How long the first context waits for a map built for the run, by how many files its cache
/// holds and how many the last build found (`None`: no cache, a cold build). A cache a build
/// left half made (a CLI run that ended first) is a big repository's whose rest will not be
/// parsed within the budget: the first request does not wait for it, and the build goes on
/// while the model thinks, saving its rows as it goes.
fn first_budget(cached_files: Option<(usize, Option<usize>)>) -> Duration {
    match cached_files {
        None => COLD_BUDGET,
        Some((rows, listed)) => {
            let files = listed.unwrap_or(rows).max(rows);
            if files > WARM_WAIT_FILES || files - rows > MISSING_WAIT_FILES {
                Duration::ZERO
            } else {
                WARM_BUDGET
            }
        }
    }
}

/// The phases of a run, in milliseconds (docs/bigrepo.md says what each covers).
#[derive(Debug, Default, Clone, Serialize)]
pub(super) struct Phases {
    /// The repo map's build: the walk, reading its cache, parsing, writing its cache.
    pub walk_ms: u64,
    pub load_ms: u64,
    pub parse_ms: u64,
    pub cache_write_ms: u64,
    /// Ranking and rendering the map, over all of the run's contexts.
    pub rank_ms: u64,
    /// The first context, whole (the wait for the map, the map, reading the files).
    pub context_ms: u64,
    /// From the run's start to its first model request.
    pub first_request_ms: Option<u64>,
    /// The fault localisation's coverage run and ranking (docs/locate.md), when it ran.
    pub locate_ms: Option<u64>,
    /// Waiting for the store's writes (the checkpoint before a coder call).
    pub store_ms: u64,
    /// Memory across runs: recalling and remembering.
    pub memory_ms: u64,
    /// From the last step to the outcome: git's record of the run, memory, the MCP servers.
    pub end_ms: u64,
    /// The map's files, how many were parsed now and how many came from its cache.
    pub map_files: usize,
    pub map_parsed: usize,
    pub map_cached: usize,
    /// Whether the first request went out before the whole map was built.
    pub map_late: bool,
    /// Whether the map was the one the server keeps (`agent-ls serve`), not built for the run.
    pub map_kept: bool,
    /// Whether that kept map caught up from its watch's changed paths, with no walk.
    pub map_watched: bool,
    /// The process's peak resident memory, in KiB (Linux).
    pub peak_rss_kib: Option<u64>,
}

/// The map as the run has it.
enum State {
    Building(Pending),
    Ready(RepoMap),
    /// The background build is gone (its thread could not start or panicked).
    Lost,
}

/// A run's repo map, the workspace's other files (listed once), and its phase timings.
pub(super) struct RunMap {
    state: State,
    root: std::path::PathBuf,
    /// Lent by the map the server keeps, and given back when the run ends.
    kept: bool,
    /// How long the first context waits for the map: warm (from the run's opening) or cold.
    budget: Duration,
    /// The files the context lists after the ranked ones, walked once a run.
    rest: Option<Vec<String>>,
    /// How many contexts were made.
    contexts: u32,
    pub phases: Phases,
    pub started: Instant,
}

impl RunMap {
    /// Starts the map's build for a run opening now.
    pub(super) fn start(root: &Path, buffers: HashMap<String, String>) -> RunMap {
        let (state, kept, budget) = match warm::lend(root) {
            Some(Lent::Ready(map, watch)) => (
                crate::repomap::catch_up_in_background(root.to_path_buf(), map, Some(watch)),
                true,
                WARM_BUDGET,
            ),
            Some(Lent::Building(p)) => (p, true, COLD_BUDGET),
            None => {
                let budget = first_budget(crate::repomap::cached_files(root));
                (
                    crate::repomap::spawn(root.to_path_buf(), buffers),
                    false,
                    budget,
                )
            }
        };
        let phases = Phases {
            map_kept: kept,
            ..Phases::default()
        };
        RunMap {
            state: State::Building(state),
            root: root.to_path_buf(),
            kept,
            budget,
            rest: None,
            contexts: 0,
            phases,
            started: Instant::now(),
        }
    }

    /// The map for this step: the whole one when it is built (waiting within the budget at
    /// the first context only), its `changed` files and `buffers` parsed again; else a map of `named`.
    pub(super) fn map(
        &mut self,
        root: &Path,
        (named, changed): (&[String], &[String]),
        buffers: &HashMap<String, String>,
    ) -> std::borrow::Cow<'_, RepoMap> {
        let first = self.contexts == 0;
        self.contexts += 1;
        if let State::Building(p) = &self.state {
            let budget = match (first, self.budget) {
                (false, _) => Duration::ZERO,
                // A warm map's budget is counted from the run's opening, when its build
                // started: what the run did before its first context was the map's time too.
                (true, b) if b == WARM_BUDGET => b.saturating_sub(self.started.elapsed()),
                (true, b) => b,
            };
            match p.wait(budget) {
                Ok(map) => {
                    self.took(&map);
                    self.state = State::Ready(map);
                }
                Err(true) => self.state = State::Lost,
                Err(false) => {}
            }
        }
        if first && !matches!(self.state, State::Ready(_)) {
            self.phases.map_late = true;
        }
        match &mut self.state {
            State::Ready(map) => {
                let mut again: Vec<String> = changed.to_vec();
                again.extend(buffers.keys().cloned());
                map.refresh(root, &again, buffers);
                std::borrow::Cow::Borrowed(map)
            }
            _ => {
                let mut paths: Vec<String> = named.to_vec();
                paths.extend(changed.iter().cloned());
                paths.extend(buffers.keys().cloned());
                std::borrow::Cow::Owned(RepoMap::of_files(root, &paths, buffers))
            }
        }
    }

    /// The build's figures, once it is taken.
    fn took(&mut self, map: &RepoMap) {
        let t = &map.timings;
        let p = &mut self.phases;
        (p.walk_ms, p.load_ms, p.parse_ms, p.cache_write_ms) =
            (t.walk_ms, t.load_ms, t.parse_ms, t.write_ms);
        (p.map_files, p.map_parsed, p.map_cached) = (map.files.len(), map.parsed, map.cached);
        p.map_watched = t.watched;
    }

    /// The workspace's files after the ranked ones, walked the first time only.
    pub(super) fn rest(&mut self, root: &Path) -> &[String] {
        self.rest
            .get_or_insert_with(|| crate::files::workspace_files(root, 200))
    }

    /// Notes the first model request, now.
    pub(super) fn requested(&mut self) {
        if self.phases.first_request_ms.is_none() {
            self.phases.first_request_ms = Some(self.started.elapsed().as_millis() as u64);
        }
    }

    /// The phases as they stand, with the process's peak memory.
    pub(super) fn finish_phases(&mut self) -> Phases {
        self.phases.peak_rss_kib = peak_rss_kib();
        self.phases.clone()
    }
}

impl Drop for RunMap {
    /// A kept map goes back to the server, built or still building, for the next run; any
    /// other is freed on a thread of its own.
    fn drop(&mut self) {
        if !self.kept {
            // A big repository's map is hundreds of thousands of small allocations: freed
            // here, the run's end waited a second for it (20,000 files).
            let state = std::mem::replace(&mut self.state, State::Lost);
            let _ = std::thread::Builder::new()
                .name("repo map drop".into())
                .spawn(move || drop(state));
            return;
        }
        let map = match std::mem::replace(&mut self.state, State::Lost) {
            State::Ready(map) => Some(Returned::Ready(map)),
            State::Building(p) => Some(Returned::Building(p)),
            State::Lost => None,
        };
        warm::give_back(&self.root, map);
    }
}

/// The process's peak resident memory (`VmHWM`), where /proc has it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_big_warm_map_is_not_waited_for_a_small_one_is_and_a_cold_one_longest() {
        assert_eq!(first_budget(None), COLD_BUDGET);
        assert_eq!(first_budget(Some((300, Some(300)))), WARM_BUDGET);
        assert_eq!(first_budget(Some((300, None))), WARM_BUDGET);
        let whole = Some((WARM_WAIT_FILES, Some(WARM_WAIT_FILES)));
        assert_eq!(first_budget(whole), WARM_BUDGET);
        let big = Some((WARM_WAIT_FILES + 1, Some(WARM_WAIT_FILES + 1)));
        assert_eq!(first_budget(big), Duration::ZERO);
    }

    /// A first run on 20,000 files that ended before its map was whole left 5,000 rows: the
    /// second run's first request does not wait for the other 15,000 to be parsed.
    #[test]
    fn a_cache_a_build_left_half_made_is_not_waited_for() {
        assert_eq!(first_budget(Some((5_000, Some(20_000)))), Duration::ZERO);
        assert_eq!(first_budget(Some((900, Some(2_000)))), Duration::ZERO);
        // A few files left (the last batch of a small repository): waited for.
        assert_eq!(first_budget(Some((1_900, Some(2_000)))), WARM_BUDGET);
    }

    /// The cache records how many files its build found before parsing them, so a build cut
    /// short leaves a cache that says it is not whole.
    #[test]
    fn a_build_records_how_many_files_it_found() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3 {
            std::fs::write(
                dir.path().join(format!("m{i}.py")),
                "def f():\n    return 1\n",
            )
            .unwrap();
        }
        crate::repomap::build(dir.path(), &HashMap::new());
        assert_eq!(crate::repomap::cached_files(dir.path()), Some((3, Some(3))));
    }
}
