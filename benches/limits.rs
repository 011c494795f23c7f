//! The cost of the sandbox's limits per test run (issue 38): the time to start and end a
//! command (`true`) unconfined, under Landlock with no limit, and under Landlock with the
//! limits (rlimits, the control group where one can be made, no capabilities, the seccomp
//! filter). Run with `cargo bench --bench limits`; it prints figures and asserts nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent_ls_runtime::config::SandboxConfig;
use agent_ls_runtime::trust::sandbox::{Sandbox, SandboxMode};

const RUNS: usize = 40;

/// The median time of `RUNS` runs of `argv` in `root`.
fn median(root: &Path, argv: &[String]) -> Duration {
    let mut times: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new(&argv[0])
                .args(&argv[1..])
                .current_dir(root)
                .status()
                .expect("the command starts");
            assert!(status.success(), "{argv:?}");
            started.elapsed()
        })
        .collect();
    times.sort();
    times[RUNS / 2]
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
    let unconfined = median(root.path(), &off.wrap(root.path(), &command));
    let landlock = median(root.path(), &bare.wrap(root.path(), &command));
    let with_limits = median(root.path(), &limited.wrap(root.path(), &command));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("per test run, median of {RUNS} runs of `true`:");
    println!("  unconfined                  {:7.2} ms", ms(unconfined));
    println!("  Landlock, no limits         {:7.2} ms", ms(landlock));
    println!("  Landlock and the limits     {:7.2} ms", ms(with_limits));
    println!(
        "  the limits cost             {:7.2} ms ({})",
        ms(with_limits.saturating_sub(landlock)),
        limited.describe_limits()
    );
}
