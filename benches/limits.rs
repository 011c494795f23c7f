//! The cost of the sandbox's limits per test run (issue 38): the time to start and end a
//! command (`true`) unconfined, under Landlock with no limit, and under Landlock with the
//! limits (rlimits, the control group where one can be made, no capabilities, the seccomp
//! filter), each over `RUNS` runs, interleaved so that a busy machine weighs on all alike.
//! Run with `cargo bench --bench limits`; it prints figures and asserts nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent_ls_runtime::config::SandboxConfig;
use agent_ls_runtime::trust::limits;
use agent_ls_runtime::trust::sandbox::{Sandbox, SandboxMode};

const RUNS: usize = 40;

/// One run of `argv` in `root`, as a test run starts it, and the control group its helper
/// made (if any) removed afterwards as agent-ls removes it.
fn once(root: &Path, argv: &[String]) -> Duration {
    let started = Instant::now();
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(root)
        .spawn()
        .expect("the command starts");
    let helper = child.id();
    let status = child.wait().expect("the command ends");
    limits::remove_group(helper);
    let took = started.elapsed();
    assert!(status.success(), "{argv:?}");
    took
}

/// The median and the mean of `times`, in milliseconds.
fn figures(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    (ms(times[times.len() / 2]), mean)
}

fn main() {
    let root = tempfile::tempdir().expect("temp dir");
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_agent-ls"));
    let command = vec!["true".to_string()];
    let sandbox = |config: SandboxConfig| Sandbox::with_helper(&config, helper.clone());
    let off = sandbox(SandboxConfig {
        mode: SandboxMode::Off,
        ..SandboxConfig::default()
    });
    let bare = sandbox(SandboxConfig {
        max_processes: 0,
        max_memory_mb: 0,
        max_cpu_secs: 0,
        max_file_mb: 0,
        network: true,
        ..SandboxConfig::default()
    });
    let limited = sandbox(SandboxConfig::default());
    let kinds = [
        ("unconfined", off.wrap(root.path(), &command)),
        ("Landlock, no limits", bare.wrap(root.path(), &command)),
        (
            "Landlock and the limits",
            limited.wrap(root.path(), &command),
        ),
    ];
    // One warm-up run each (the page cache, the cgroup hierarchy), not counted.
    for (_, argv) in &kinds {
        once(root.path(), argv);
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(RUNS); kinds.len()];
    for _ in 0..RUNS {
        for (i, (_, argv)) in kinds.iter().enumerate() {
            times[i].push(once(root.path(), argv));
        }
    }
    println!("per test run of `true`, over {RUNS} runs each (median / mean):");
    let mut shown = Vec::new();
    for ((name, _), t) in kinds.iter().zip(times.iter_mut()) {
        let (median, mean) = figures(t);
        println!("  {name:<26} {median:7.2} ms / {mean:7.2} ms");
        shown.push((median, mean));
    }
    let (without, with) = (shown[1], shown[2]);
    println!(
        "  the limits cost            {:7.2} ms / {:7.2} ms per run",
        with.0 - without.0,
        with.1 - without.1
    );
    println!("  limits here: {}", limited.describe_limits());
}
