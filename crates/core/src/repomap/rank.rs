//! Ranks a repository's definitions for the repo map: a PageRank over the files, where a file
//! that uses a name points at the files that define it, personalised toward the files of the
//! goal, the selection and the failures. Pure: tags in, ranked definitions out.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::tags::Tags;

/// What the run is about: its files get the random surfer's restarts, its names weigh more.
#[derive(Debug, Clone, Default)]
pub struct Focus {
    pub files: Vec<String>,
    pub idents: Vec<String>,
}

/// One definition of the map, by its file and index in that file's tags.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    pub path: String,
    pub def: usize,
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
pub fn rank(files: &BTreeMap<String, Tags>, focus: &Focus) -> Vec<Ranked> {
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    if paths.is_empty() {
        return Vec::new();
    }
    let graph = Graph::of(files, focus);
    let pr = graph.page_rank(&teleport(&paths, focus));
    let mut out = graph.definitions(files, &paths, &pr);
    out.sort_by(|a, b| {
        b.rank
            .total_cmp(&a.rank)
            .then_with(|| a.path.cmp(&b.path))
            .then(a.def.cmp(&b.def))
    });
    out
}

/// Files as nodes (by their index in path order), uses as weighted edges.
struct Graph<'t> {
    /// Edges from a user to a definer, weighted, with the name they share.
    edges: Vec<Vec<(usize, &'t str, f64)>>,
    /// Each file's edges' total weight.
    out_weight: Vec<f64>,
}

impl<'t> Graph<'t> {
    fn of(files: &'t BTreeMap<String, Tags>, focus: &Focus) -> Graph<'t> {
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
        let out_weight = edges
            .iter()
            .map(|es| es.iter().map(|e| e.2).sum())
            .collect();
        Graph { edges, out_weight }
    }

    /// The power iteration: each file's rank, from restarts on `teleport`.
    fn page_rank(&self, teleport: &[f64]) -> Vec<f64> {
        let mut pr = teleport.to_vec();
        for _ in 0..ITERATIONS {
            let mut next: Vec<f64> = teleport.iter().map(|t| (1.0 - DAMPING) * t).collect();
            let mut dangling = 0.0;
            for (i, edges) in self.edges.iter().enumerate() {
                if self.out_weight[i] == 0.0 {
                    dangling += pr[i];
                    continue;
                }
                for &(d, _, w) in edges {
                    next[d] += DAMPING * pr[i] * w / self.out_weight[i];
                }
            }
            for (x, t) in next.iter_mut().zip(teleport) {
                *x += DAMPING * dangling * t;
            }
            pr = next;
        }
        pr
    }

    /// A definition's rank: what flows to its file through its name, plus a small share of
    /// its file's own rank (so the focus files' definitions are on the map too).
    fn definitions(
        &self,
        files: &BTreeMap<String, Tags>,
        paths: &[&str],
        pr: &[f64],
    ) -> Vec<Ranked> {
        let mut def_rank: HashMap<(usize, &str), f64> = HashMap::new();
        for (i, edges) in self.edges.iter().enumerate() {
            for &(d, ident, w) in edges {
                *def_rank.entry((d, ident)).or_default() += pr[i] * w / self.out_weight[i];
            }
        }
        let mut out = Vec::new();
        for (i, tags) in files.values().enumerate() {
            let base = pr[i] * 0.1 / tags.defs.len().max(1) as f64;
            for (k, d) in tags.defs.iter().enumerate() {
                let flow = def_rank.get(&(i, d.name.as_str())).copied().unwrap_or(0.0);
                out.push(Ranked {
                    path: paths[i].to_string(),
                    def: k,
                    rank: flow + base,
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
    let index: HashMap<&str, usize> = paths.iter().enumerate().map(|(i, p)| (*p, i)).collect();
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
    let mut seen = HashSet::new();
    ranked
        .iter()
        .filter(|r| seen.insert(r.path.as_str()))
        .map(|r| r.path.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repomap::tags::Def;

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
}
