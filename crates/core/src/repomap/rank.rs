//! Ranks a repository's definitions for the repo map: a PageRank over the files, where a file
//! that uses a name points at the files that define it, personalised toward the files of the
//! goal, the selection and the failures. Pure: tags in, ranked definitions out.

use std::collections::{BTreeMap, HashSet};

use super::tags::{Def, Tags};

/// What the run is about: its files get the random surfer's restarts, its names weigh more.
#[derive(Debug, Clone, Default)]
pub struct Focus {
    pub files: Vec<String>,
    pub idents: Vec<String>,
}

/// One definition of the map: its file, its index in that file's tags and the definition,
/// borrowed from the tags ranked (a map of 20,000 files has hundreds of thousands).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked<'t> {
    pub path: &'t str,
    /// The file's index in path order.
    pub file: usize,
    pub def: usize,
    pub definition: &'t Def,
    pub rank: f64,
}

const DAMPING: f64 = 0.85;
const ITERATIONS: usize = 40;

/// How much a use of `ident` says about where the reader should look.
fn ident_weight(ident: &str, definers: usize, focus: &HashSet<&str>) -> f64 {
    let mut w = 1.0;
    if focus.contains(ident) {
        w *= 10.0;
    }
    // Long, specific names (snake or camel case) say more than `get` or `x`.
    let specific =
        ident.len() >= 8 && (ident.contains('_') || ident.chars().any(char::is_uppercase));
    if specific {
        w *= 3.0;
    }
    if ident.len() < 4 {
        w *= 0.3;
    }
    if ident.starts_with('_') {
        w *= 0.3;
    }
    // A name defined everywhere (`new`, `run`, `__init__`) points nowhere in particular.
    if definers > 5 {
        w *= 0.1;
    }
    w
}

/// The personalised PageRank of every file, then each definition's share of the rank that
/// flows to its file through its name.
pub fn rank<'t>(files: &'t BTreeMap<String, Tags>, focus: &Focus) -> Vec<Ranked<'t>> {
    rank_with(files, &Index::of(files), focus)
}

/// `rank` with `files`' index built earlier (`Index::of`): a server ranks its kept map at
/// every run, and building the index is half of the rank on 20,000 files. An index that does
/// not fit `files` (another count of files or definitions) is built again.
pub fn rank_with<'t>(
    files: &'t BTreeMap<String, Tags>,
    index: &Index,
    focus: &Focus,
) -> Vec<Ranked<'t>> {
    let defs: usize = files.values().map(|t| t.defs.len()).sum();
    if index.starts.len() != files.len() + 1 || index.def_name.len() != defs {
        return rank(files, focus);
    }
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    if paths.is_empty() {
        return Vec::new();
    }
    let graph = Graph::of(index, focus);
    let pr = graph.page_rank(&teleport(&paths, focus));
    let mut out = graph.definitions(files, &pr);
    // Ties (a monorepo's copies rank alike) go in path order, which is the files' order:
    // their indexes compare as the paths would, without reading them.
    out.sort_unstable_by(|a, b| {
        b.rank
            .total_cmp(&a.rank)
            .then(a.file.cmp(&b.file))
            .then(a.def.cmp(&b.def))
    });
    out
}

/// Whether `a` and `b` rank alike: the same definitions' names in the same order, the same
/// uses. (Lines and signatures differ without moving the rank, so an index stays good.)
pub fn ranks_alike(a: &Tags, b: &Tags) -> bool {
    a.refs == b.refs
        && a.defs.len() == b.defs.len()
        && a.defs.iter().zip(&b.defs).all(|(x, y)| x.name == y.name)
}

/// Each name's id. FxHash: the names are looked up once a use, millions of times on a
/// big repository, and SipHash's resistance to chosen keys buys nothing here.
type Names<'t> = rustc_hash::FxHashMap<&'t str, usize>;

/// What the rank needs of the files alone, whatever the focus: each name's definers, and each
/// file's uses that make edges. Files are nodes (by their index in path order); a file that
/// uses a name points at every other file that defines it. The edges are kept factored
/// through the names (uses: file to name; definers: name to files), not spelled out file to
/// file: those number uses times definers, and a name defined in hundreds of files (`new`,
/// `run`, a monorepo's copies) made hundreds of millions of them on 20,000 files (80 s to
/// rank).
#[derive(Debug, Clone, Default)]
pub struct Index {
    /// Each name, by id.
    names: Vec<String>,
    /// Each name's defining files, in path order.
    definers: Vec<Vec<usize>>,
    /// Each file's uses that make an edge, file after file (file `i`'s are
    /// `starts[i]..starts[i + 1]`): the name's id, the square root of how often, and whether
    /// the file defines the name too. Flat arrays: the power iteration walks millions of them
    /// forty times.
    starts: Vec<usize>,
    use_name: Vec<u32>,
    use_root: Vec<f64>,
    use_own: Vec<bool>,
    /// Each definition's name id, file after file, in the tags' order.
    def_name: Vec<u32>,
}

impl Index {
    pub fn of(files: &BTreeMap<String, Tags>) -> Index {
        let mut ids: Names = Names::default();
        let mut index = Index::default();
        for (i, tags) in files.values().enumerate() {
            for d in &tags.defs {
                let id = *ids.entry(d.name.as_str()).or_insert_with(|| {
                    index.definers.push(Vec::new());
                    index.definers.len() - 1
                });
                if index.definers[id].last() != Some(&i) {
                    index.definers[id].push(i);
                }
                index.def_name.push(id as u32);
            }
        }
        // The last file (by index, plus one) to define each name: whether a file defines a
        // name it uses is one load, not a search of the name's definers a use.
        let mut defined_by = vec![0usize; index.definers.len()];
        let mut def = 0;
        for (i, tags) in files.values().enumerate() {
            index.starts.push(index.use_name.len());
            for id in &index.def_name[def..def + tags.defs.len()] {
                defined_by[*id as usize] = i + 1;
            }
            def += tags.defs.len();
            for (ident, count) in &tags.refs {
                let Some(&id) = ids.get(ident.as_str()) else {
                    continue;
                };
                let own = defined_by[id] == i + 1;
                if index.definers[id].len() > usize::from(own) {
                    index.use_name.push(id as u32);
                    index.use_root.push(f64::from(*count).sqrt());
                    index.use_own.push(own);
                }
            }
        }
        index.starts.push(index.use_name.len());
        index.names = vec![String::new(); index.definers.len()];
        for (name, id) in ids {
            index.names[id] = name.to_string();
        }
        index
    }
}

/// The index weighted for a focus: each use's edge weight, and each file's total.
struct Graph<'i> {
    index: &'i Index,
    use_weight: Vec<f64>,
    /// The uses of a name the file defines too: file, name, weight. It makes no edge to
    /// itself, so that share is taken back from what the name passes on.
    own_uses: Vec<(usize, usize, f64)>,
    /// Each file's edges' total weight.
    out_weight: Vec<f64>,
}

impl<'i> Graph<'i> {
    fn of(index: &'i Index, focus: &Focus) -> Graph<'i> {
        let focus_idents: HashSet<&str> = focus.idents.iter().map(String::as_str).collect();
        // Each name's weight, shared by its definers: worked out once a name, not once a
        // use (millions of them, each hashed into the focus and scanned for its case).
        let name_weight: Vec<f64> = index
            .names
            .iter()
            .zip(&index.definers)
            .map(|(name, ds)| ident_weight(name, ds.len(), &focus_idents) / ds.len() as f64)
            .collect();
        let files = index.starts.len() - 1;
        let mut graph = Graph {
            index,
            use_weight: Vec::with_capacity(index.use_name.len()),
            own_uses: Vec::new(),
            out_weight: vec![0.0; files],
        };
        for i in 0..files {
            for k in index.starts[i]..index.starts[i + 1] {
                let id = index.use_name[k] as usize;
                let w = name_weight[id] * index.use_root[k];
                let own = index.use_own[k];
                let others = index.definers[id].len() - usize::from(own);
                graph.use_weight.push(w);
                graph.out_weight[i] += w * others as f64;
                if own {
                    graph.own_uses.push((i, id, w));
                }
            }
        }
        graph
    }

    /// What flows into each name from the files that use it, at ranks `pr`: each file's rank
    /// split over its edges by weight. Each of the name's definers receives it whole, less
    /// its own use's share (`own`, which is given each such file, name and share).
    fn flow(&self, pr: &[f64], mut own: impl FnMut(usize, usize, f64)) -> Vec<f64> {
        let ix = self.index;
        let mut flow = vec![0.0; ix.definers.len()];
        for (i, (&p, &out)) in pr.iter().zip(&self.out_weight).enumerate() {
            if out == 0.0 {
                continue;
            }
            let share = p / out;
            let (from, to) = (ix.starts[i], ix.starts[i + 1]);
            for (&id, &w) in ix.use_name[from..to].iter().zip(&self.use_weight[from..to]) {
                flow[id as usize] += share * w;
            }
        }
        for &(i, id, w) in &self.own_uses {
            own(i, id, pr[i] / self.out_weight[i] * w);
        }
        flow
    }

    /// The power iteration: each file's rank, from restarts on `teleport`.
    fn page_rank(&self, teleport: &[f64]) -> Vec<f64> {
        let mut pr = teleport.to_vec();
        for _ in 0..ITERATIONS {
            let mut next: Vec<f64> = teleport.iter().map(|t| (1.0 - DAMPING) * t).collect();
            let flow = self.flow(&pr, |i, _, share| next[i] -= DAMPING * share);
            for (id, f) in flow.iter().enumerate() {
                if *f != 0.0 {
                    for &d in &self.index.definers[id] {
                        next[d] += DAMPING * f;
                    }
                }
            }
            let dangling: f64 = (0..pr.len())
                .filter(|i| self.out_weight[*i] == 0.0)
                .map(|i| pr[i])
                .sum();
            for (x, t) in next.iter_mut().zip(teleport) {
                *x += DAMPING * dangling * t;
            }
            let moved: f64 = next.iter().zip(&pr).map(|(a, b)| (a - b).abs()).sum();
            pr = next;
            // Converged: further rounds would not change the order.
            if moved < 1e-12 {
                break;
            }
        }
        pr
    }

    /// A definition's rank: what flows to its file through its name, plus a small share of
    /// its file's own rank (so the focus files' definitions are on the map too).
    fn definitions<'t>(&self, files: &'t BTreeMap<String, Tags>, pr: &[f64]) -> Vec<Ranked<'t>> {
        let mut own: rustc_hash::FxHashMap<(usize, usize), f64> = Default::default();
        let flow = self.flow(pr, |i, id, share| *own.entry((i, id)).or_default() += share);
        let mut out = Vec::with_capacity(self.index.def_name.len());
        let mut names = self.index.def_name.iter();
        for (i, (path, tags)) in files.iter().enumerate() {
            let base = pr[i] * 0.1 / tags.defs.len().max(1) as f64;
            for (k, d) in tags.defs.iter().enumerate() {
                let into = names.next().map_or(0.0, |&id| {
                    let id = id as usize;
                    flow[id] - own.get(&(i, id)).copied().unwrap_or(0.0)
                });
                out.push(Ranked {
                    path,
                    file: i,
                    def: k,
                    definition: d,
                    rank: into + base,
                });
            }
        }
        out
    }
}

/// Where the random surfer restarts: on the focus files when there are any, anywhere
/// otherwise.
fn teleport(paths: &[&str], focus: &Focus) -> Vec<f64> {
    let n = paths.len();
    let index: rustc_hash::FxHashMap<&str, usize> =
        paths.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let focused: Vec<usize> = focus
        .files
        .iter()
        .filter_map(|f| index.get(f.as_str()).copied())
        .collect();
    let mut teleport = vec![0.0; n];
    if focused.is_empty() {
        teleport.iter_mut().for_each(|t| *t = 1.0 / n as f64);
    } else {
        for &f in &focused {
            teleport[f] += 1.0 / focused.len() as f64;
        }
    }
    teleport
}

/// The files in order of their best definition's rank.
pub fn file_order(ranked: &[Ranked]) -> Vec<String> {
    let mut seen = rustc_hash::FxHashSet::default();
    ranked
        .iter()
        .filter(|r| seen.insert(r.file))
        .map(|r| r.path.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repomap::tags::Def;
    use std::collections::HashMap;

    fn tags(defs: &[&str], refs: &[(&str, u32)]) -> Tags {
        Tags {
            defs: defs
                .iter()
                .enumerate()
                .map(|(i, d)| Def {
                    name: d.to_string(),
                    line: i as u32 + 1,
                    signature: format!("def {d}()"),
                })
                .collect(),
            refs: refs.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        }
    }

    #[test]
    fn used_definitions_rank_first_and_focus_moves_the_rank() {
        let mut files = BTreeMap::new();
        files.insert(
            "app/core.py".to_string(),
            tags(&["compute_total"], &[("apply_discount", 2)]),
        );
        files.insert(
            "app/discount.py".to_string(),
            tags(&["apply_discount"], &[]),
        );
        files.insert("app/unused.py".to_string(), tags(&["lonely_helper"], &[]));
        files.insert(
            "tests/test_core.py".to_string(),
            tags(&["test_total"], &[("compute_total", 3)]),
        );
        let all = rank(&files, &Focus::default());
        assert_eq!(all.last().unwrap().path, "tests/test_core.py", "{all:?}");
        // From the failing test, the chain test -> core -> discount is what matters.
        let focused = rank(
            &files,
            &Focus {
                files: vec!["tests/test_core.py".into()],
                idents: vec![],
            },
        );
        let order = file_order(&focused);
        assert_eq!(
            order[..2],
            ["app/core.py", "app/discount.py"],
            "{focused:?}"
        );
        assert_eq!(order.last().unwrap(), "app/unused.py");
        // Naming a definition in the goal lifts it above an equally used one.
        files.insert(
            "app/core.py".to_string(),
            tags(
                &["compute_total"],
                &[("apply_discount", 1), ("lonely_helper", 1)],
            ),
        );
        let pos = |r: &[Ranked], p: &str| r.iter().position(|x| x.path == p).unwrap();
        let naming = |ident: &str| {
            let focus = Focus {
                files: vec![],
                idents: vec![ident.into()],
            };
            rank(&files, &focus)
        };
        let named = naming("lonely_helper");
        assert!(
            pos(&named, "app/unused.py") < pos(&named, "app/discount.py"),
            "{named:?}"
        );
        let other = naming("apply_discount");
        assert!(
            pos(&other, "app/discount.py") < pos(&other, "app/unused.py"),
            "{other:?}"
        );
        assert!(rank(&BTreeMap::new(), &Focus::default()).is_empty());
    }

    /// The ranks as the edges spelled out file to file give them (the graph before it was
    /// factored through names), with all 40 rounds.
    fn spelled_out(files: &BTreeMap<String, Tags>, focus: &Focus) -> Vec<f64> {
        let mut definers: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, tags) in files.values().enumerate() {
            for d in &tags.defs {
                let list = definers.entry(d.name.as_str()).or_default();
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        }
        let focus_idents: HashSet<&str> = focus.idents.iter().map(String::as_str).collect();
        let mut edges: Vec<Vec<(usize, &str, f64)>> = vec![Vec::new(); files.len()];
        for (i, tags) in files.values().enumerate() {
            for (ident, count) in &tags.refs {
                let Some(ds) = definers.get(ident.as_str()) else {
                    continue;
                };
                let w = ident_weight(ident, ds.len(), &focus_idents) * f64::from(*count).sqrt()
                    / ds.len() as f64;
                for &d in ds.iter().filter(|d| **d != i) {
                    edges[i].push((d, ident.as_str(), w));
                }
            }
        }
        let out: Vec<f64> = edges
            .iter()
            .map(|es| es.iter().map(|e| e.2).sum())
            .collect();
        let paths: Vec<&str> = files.keys().map(String::as_str).collect();
        let teleport = teleport(&paths, focus);
        let mut pr = teleport.clone();
        for _ in 0..ITERATIONS {
            let mut next: Vec<f64> = teleport.iter().map(|t| (1.0 - DAMPING) * t).collect();
            let mut dangling = 0.0;
            for (i, es) in edges.iter().enumerate() {
                if out[i] == 0.0 {
                    dangling += pr[i];
                    continue;
                }
                for &(d, _, w) in es {
                    next[d] += DAMPING * pr[i] * w / out[i];
                }
            }
            for (x, t) in next.iter_mut().zip(&teleport) {
                *x += DAMPING * dangling * t;
            }
            pr = next;
        }
        let mut def_rank: HashMap<(usize, &str), f64> = HashMap::new();
        for (i, es) in edges.iter().enumerate() {
            for &(d, ident, w) in es {
                *def_rank.entry((d, ident)).or_default() += pr[i] * w / out[i];
            }
        }
        let mut ranks = Vec::new();
        for (i, tags) in files.values().enumerate() {
            let base = pr[i] * 0.1 / tags.defs.len().max(1) as f64;
            for d in &tags.defs {
                ranks.push(def_rank.get(&(i, d.name.as_str())).copied().unwrap_or(0.0) + base);
            }
        }
        ranks
    }

    #[test]
    fn the_factored_graph_ranks_as_the_edges_spelled_out_do() {
        // A small generator of made-up repositories: names shared by many files, files
        // that use names they define too, files with no uses.
        let mut seed: u64 = 7;
        let mut next = move |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for round in 0..20 {
            let names: Vec<String> = (0..30).map(|k| format!("name_{k}")).collect();
            let mut files = BTreeMap::new();
            for f in 0..(5 + next(40)) {
                let defs: Vec<&str> = (0..next(4))
                    .map(|_| names[next(30) as usize].as_str())
                    .collect();
                let refs: Vec<(&str, u32)> = (0..next(8))
                    .map(|_| (names[next(30) as usize].as_str(), 1 + next(5) as u32))
                    .collect();
                files.insert(format!("f{f:03}.py"), tags(&defs, &refs));
            }
            let focus = Focus {
                files: if round % 2 == 0 {
                    vec!["f001.py".into()]
                } else {
                    vec![]
                },
                idents: vec![names[next(30) as usize].clone()],
            };
            let expected = spelled_out(&files, &focus);
            let mut got = rank(&files, &focus);
            let paths: Vec<&String> = files.keys().collect();
            got.sort_by(|a, b| a.path.cmp(b.path).then(a.def.cmp(&b.def)));
            assert_eq!(got.len(), expected.len());
            for (g, e) in got.iter().zip(&expected) {
                assert!(
                    (g.rank - e).abs() < 1e-9,
                    "round {round}: {g:?} against {e} ({paths:?})"
                );
            }
            // One index serves every focus; an index of other files is built again.
            let index = Index::of(&files);
            let focus = Focus {
                idents: vec![names[next(30) as usize].clone()],
                ..focus
            };
            assert_eq!(rank_with(&files, &index, &focus), rank(&files, &focus));
            let stale = Index::of(&BTreeMap::new());
            assert_eq!(rank_with(&files, &stale, &focus), rank(&files, &focus));
        }
    }

    #[test]
    fn tags_rank_alike_when_only_lines_and_signatures_differ() {
        let a = tags(&["f", "g"], &[("h", 2)]);
        let mut moved = a.clone();
        moved.defs[0].line = 9;
        moved.defs[1].signature.clear();
        assert!(ranks_alike(&a, &moved));
        assert!(!ranks_alike(&a, &tags(&["f", "g2"], &[("h", 2)])));
        assert!(!ranks_alike(&a, &tags(&["f", "g"], &[("h", 3)])));
        assert!(!ranks_alike(&a, &tags(&["f"], &[("h", 2)])));
    }
}
