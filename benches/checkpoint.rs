//! Git checkpoint figures: the time to record the working tree of a 10,000-file repository
//! (committed, with 100 files modified and 100 untracked), cold (first checkpoint after the
//! files were written) and warm (the next ones). Target: under 300 ms warm. Run with
//! `cargo bench --bench checkpoint`.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use agent_ls_runtime::git::{Repo, checkpoint};

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=B", "-c", "user.email=b@example.com"])
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "git {args:?} failed");
}

fn main() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path();
    for i in 0..10_000 {
        let sub = root.join(format!("pkg{}", i / 100));
        std::fs::create_dir_all(&sub).expect("a folder");
        let body = format!("def f{i}(x):\n    return x + {i}\n").repeat(20);
        std::fs::write(sub.join(format!("m{i}.py")), body).expect("a file");
    }
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-qm", "10,000 files"]);
    for i in (0..10_000).step_by(100) {
        let path = root.join(format!("pkg{}/m{i}.py", i / 100));
        std::fs::write(&path, "changed\n").expect("a change");
        std::fs::write(root.join(format!("pkg{}/new{i}.py", i / 100)), "new\n").expect("a file");
    }
    let repo = Repo::discover(root).expect("the repository");
    let start = Instant::now();
    checkpoint::take(&repo, "run_cold").expect("a checkpoint");
    let cold = start.elapsed().as_secs_f64() * 1000.0;
    let mut times = Vec::new();
    for n in 0..10 {
        let start = Instant::now();
        checkpoint::take(&repo, &format!("run_{n}")).expect("a checkpoint");
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "checkpoint of 10,000 files (100 modified, 100 untracked): cold {cold:.0} ms, warm median {:.0} ms, best {:.0} ms, worst {:.0} ms (target under 300 ms warm)",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    let start = Instant::now();
    let dropped = checkpoint::gc(&repo, 1).expect("gc");
    println!(
        "gc of {} checkpoint refs: {:.0} ms",
        dropped.len(),
        start.elapsed().as_secs_f64() * 1000.0
    );
}
