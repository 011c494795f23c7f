//! Work split over the machine's cores, for the repo map's two bulk jobs (the cold parse and
//! the warm decode of the cache). A module of its own so that both `mod.rs` and
//! `cache.rs` use it without depending on each other.

/// `f` of each of `items` (those it answers), the items split over the machine's cores (at
/// most 8): the map's cold parse and its warm decode are each millions of allocations.
pub(super) fn on_every_core<T: Sync, R: Send>(
    items: &[T],
    f: impl Fn(&T) -> Option<R> + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(8);
    let chunk = items.len().div_ceil(threads).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(chunk)
            .map(|part| s.spawn(move || part.iter().filter_map(f).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_default())
            .collect()
    })
}
