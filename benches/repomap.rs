//! Repo-map figures: a cold build (no cache), a warm build (every file cached) and a render,
//! on a generated 2,000-file tree of Python, Rust, TypeScript and Go, and on this repository.
//! Targets: under 2 s cold and 100 ms warm for the 2,000 files. Run with
//! `cargo bench --bench repomap`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use agent_ls_runtime::repomap::{self, Focus};
use agent_ls_runtime::tokens::Counter;

/// A module of `i` that defines a few functions and a type, and calls into two other modules.
fn module(lang: &str, i: usize, n: usize) -> String {
    let (a, b) = ((i * 7 + 3) % n, (i * 13 + 5) % n);
    match lang {
        "py" => format!(
            "from pkg.m{a} import func_{a}_0\nfrom pkg.m{b} import Model{b}\n\nclass Model{i}:\n    def total_{i}(self, items):\n        return sum(func_{a}_0(x) for x in items)\n\n{}",
            (0..8).map(|k| format!("def func_{i}_{k}(value, rate=1):\n    \"\"\"Helper {k}.\"\"\"\n    out = value * rate + {k}\n    return Model{b}().total_{b}([out])\n\n")).collect::<String>()
        ),
        "rs" => format!(
            "pub struct Model{i} {{ pub total: u64 }}\n\nimpl Model{i} {{\n    pub fn total_{i}(&self) -> u64 {{ func_{a}_0(self.total) }}\n}}\n\n{}",
            (0..8).map(|k| format!("pub fn func_{i}_{k}(value: u64) -> u64 {{\n    let m = Model{b} {{ total: value }};\n    m.total_{b}() + {k}\n}}\n\n")).collect::<String>()
        ),
        "ts" => format!(
            "import {{ func_{a}_0 }} from './m{a}';\n\nexport interface Item{i} {{ price: number }}\n\nexport class Model{i} {{\n  total_{i}(items: Item{i}[]): number {{ return items.reduce((s, x) => s + func_{a}_0(x.price), 0); }}\n}}\n\n{}",
            (0..8).map(|k| format!("export function func_{i}_{k}(value: number): number {{\n  return new Model{b}().total_{b}([]) + value + {k};\n}}\n\n")).collect::<String>()
        ),
        _ => format!(
            "package pkg\n\ntype Model{i} struct {{ Total int }}\n\nfunc (m Model{i}) Total{i}() int {{ return Func{a}x0(m.Total) }}\n\n{}",
            (0..8).map(|k| format!("func Func{i}x{k}(value int) int {{\n\tm := Model{b}{{Total: value}}\n\treturn m.Total{b}() + {k}\n}}\n\n")).collect::<String>()
        ),
    }
}

fn measure(name: &str, root: &Path, focus: &Focus) {
    let _ = std::fs::remove_file(root.join(".agent-ls/repomap.json"));
    let cold = repomap::build(root, &HashMap::new());
    let mut warm_best = u128::MAX;
    let mut warm = None;
    for _ in 0..5 {
        let start = Instant::now();
        let m = repomap::build(root, &HashMap::new());
        warm_best = warm_best.min(start.elapsed().as_micros());
        warm = Some(m);
    }
    let warm = warm.expect("five warm builds");
    let start = Instant::now();
    let text = warm.render(focus, 1024, &Counter::Bytes);
    let render = start.elapsed().as_micros();
    let defs: usize = warm.files.values().map(|t| t.defs.len()).sum();
    println!(
        "{name}: {} files, {defs} definitions; cold build {} ms ({} parsed), warm build {:.1} ms ({} cached), rank + render of 1,024 tokens {:.1} ms ({} lines)",
        warm.files.len(),
        cold.build_ms,
        cold.parsed,
        warm_best as f64 / 1000.0,
        warm.cached,
        render as f64 / 1000.0,
        text.lines().count()
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("a temp folder");
    let n = 2000;
    for i in 0..n {
        let lang = ["py", "rs", "ts", "go"][i % 4];
        let folder = dir.path().join(format!("pkg{}", i / 100));
        std::fs::create_dir_all(&folder).expect("a folder");
        std::fs::write(folder.join(format!("m{i}.{lang}")), module(lang, i, n)).expect("a file");
    }
    let focus = Focus {
        files: vec!["pkg0/m0.py".into()],
        idents: vec![],
    };
    measure("generated 2,000-file tree", dir.path(), &focus);
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    // This repository, through a copy so the bench leaves no cache in the checkout.
    let copy = tempfile::tempdir().expect("a temp folder");
    for folder in ["src", "benches", "tests", "editors/vscode/src"] {
        copy_tree(&here.join(folder), &copy.path().join(folder));
    }
    measure(
        "agent-ls itself",
        copy.path(),
        &Focus {
            files: vec!["src/drive.rs".into()],
            idents: vec![],
        },
    );
}

fn copy_tree(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    std::fs::create_dir_all(to).expect("a folder");
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            copy_tree(&p, &to.join(e.file_name()));
        } else {
            let _ = std::fs::copy(&p, to.join(e.file_name()));
        }
    }
}
