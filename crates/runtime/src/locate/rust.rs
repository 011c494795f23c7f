//! Rust's coverage from the toolchain's own instrumentation: the tests are built once more
//! with `-C instrument-coverage` into a target folder of agent-ls's own (the user's build is
//! left alone, and the next localisation builds from it incrementally); a listing run says
//! which test binaries ran and which tests failed; then each chosen test runs alone
//! (`cargo test --tests NAME -- --exact`), every binary writing a raw profile, which the
//! toolchain's `llvm-profdata` merges and its `llvm-cov` exports as lcov, whose lines with a
//! count are the lines it ran. Without the toolchain's llvm-tools nothing is built.

use std::path::{Path, PathBuf};

use agent_ls_core::locate::TestLines;
use tokio_util::sync::CancellationToken;

use super::run::{Lines, LocateError, Probe, coverage_run, own_file, probe_each, sample};
use crate::config::Config;

/// `cargo test`'s flags that pick what is built and run; with none of them, the coverage
/// runs take `--tests` (unit and integration tests, not the doctests, which the
/// instrumentation does not reach).
const TARGETS: &[&str] = &[
    "--lib",
    "--bins",
    "--bin",
    "--test",
    "--tests",
    "--doc",
    "--all-targets",
    "--examples",
    "--example",
    "--benches",
    "--bench",
];

/// The toolchain's `llvm-profdata` and `llvm-cov` (rustup's `llvm-tools`): their LLVM is
/// rustc's, which a system package's need not be. `toolchain` is the command's `+name`.
/// Asked from `/`, outside the sandbox: in the workspace, rustup would follow its
/// `rust-toolchain.toml`, which may name a toolchain by path, and its programs would be the
/// ones run here, unconfined. So a project that pins another toolchain than the user's
/// default gets the default's tools (a mismatch makes the coverage run find nothing, said so).
pub(super) fn llvm_tools(toolchain: Option<&str>) -> Option<(PathBuf, PathBuf)> {
    let out = std::process::Command::new("rustc")
        .args(toolchain)
        .args(["--print", "sysroot"])
        .current_dir("/")
        .output()
        .ok()?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    std::fs::read_dir(sysroot.join("lib").join("rustlib"))
        .ok()?
        .flatten()
        .map(|host| host.path().join("bin"))
        .find(|bin| bin.join("llvm-profdata").is_file() && bin.join("llvm-cov").is_file())
        .map(|bin| (bin.join("llvm-profdata"), bin.join("llvm-cov")))
}

/// cargo's options that take the next word as their value (`-p shop`, `--features x`).
const VALUED: &[&str] = &[
    "-p",
    "--package",
    "--exclude",
    "-F",
    "--features",
    "--target",
    "--target-dir",
    "--manifest-path",
    "-j",
    "--jobs",
    "--profile",
    "--bin",
    "--test",
    "--example",
    "--bench",
    "--color",
    "--message-format",
    "-Z",
    "--config",
    "--lockfile-path",
];
/// The test harness's options that take a value (`--skip slow`, `--test-threads 1`).
const HARNESS_VALUED: &[&str] = &[
    "--skip",
    "--test-threads",
    "--format",
    "--color",
    "--logfile",
    "-Z",
    "--shuffle-seed",
];

/// A `cargo test` command, taken apart.
#[derive(Debug, PartialEq)]
pub(super) struct CargoTest {
    /// `cargo`, and its `+toolchain` when the command names one.
    program: Vec<String>,
    /// The options that shape the build and pick the targets (`--features x`, `-p shop`),
    /// without `-q` and `--no-fail-fast`, which are the coverage runs' own.
    build: Vec<String>,
    /// `--tests` when the user picks no target (unit and integration tests: the doctests are
    /// not instrumented), else nothing.
    targets: Vec<String>,
    /// The test name filter before `--` (`cargo test cart`), for the listing only.
    filter: Option<String>,
    /// The harness's arguments for the listing (`--skip slow`, `--ignored`), without those
    /// that change what it prints (`-q`, `--format`).
    harness: Vec<String>,
    /// `--ignored` or `--include-ignored`: a probe needs it to run a listed ignored test.
    ignored: Vec<String>,
}

/// The `cargo test` command `argv` is (`cargo test …`, `cargo +nightly test …`); `None` else.
pub(super) fn runner(argv: &[String]) -> Option<CargoTest> {
    let first = argv.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    if base != "cargo" {
        return None;
    }
    let at = if argv.get(1).is_some_and(|a| a.starts_with('+')) {
        2
    } else {
        1
    };
    if argv.get(at).is_none_or(|a| a != "test") {
        return None;
    }
    let rest = &argv[at + 1..];
    let (cargo, harness) = match rest.iter().position(|a| a == "--") {
        Some(dash) => (&rest[..dash], &rest[dash + 1..]),
        None => (rest, &[][..]),
    };
    let mut build = Vec::new();
    let mut filter = None;
    let mut words = cargo.iter();
    while let Some(a) = words.next() {
        if a == "-q" || a == "--quiet" || a == "--no-fail-fast" {
            continue;
        }
        if a.starts_with('-') {
            build.push(a.clone());
            if VALUED.contains(&a.as_str())
                && let Some(v) = words.next()
            {
                build.push(v.clone());
            }
        } else {
            filter = Some(a.clone());
        }
    }
    let targets = if build.iter().any(|a| TARGETS.contains(&a.as_str())) {
        Vec::new()
    } else {
        vec!["--tests".to_string()]
    };
    let mut kept = Vec::new();
    let mut ignored = Vec::new();
    let mut words = harness.iter();
    while let Some(a) = words.next() {
        let name = a.split('=').next().unwrap_or(a);
        let value = (!a.contains('=') && HARNESS_VALUED.contains(&name))
            .then(|| words.next())
            .flatten();
        if a == "-q" || a == "--quiet" || name == "--format" {
            continue;
        }
        if a == "--ignored" || a == "--include-ignored" {
            ignored.push(a.clone());
        }
        kept.push(a.clone());
        kept.extend(value.cloned());
    }
    Some(CargoTest {
        program: argv[..at].to_vec(),
        build,
        targets,
        filter,
        harness: kept,
        ignored,
    })
}

impl CargoTest {
    /// The `+toolchain` the command names, if any.
    pub(super) fn toolchain(&self) -> Option<&str> {
        self.program.get(1).map(String::as_str)
    }

    /// The listing run: every test the user's command runs, none stopping the others.
    fn listing(&self) -> Vec<String> {
        let mut argv = self.program.clone();
        argv.extend(["test".into(), "--no-fail-fast".into()]);
        argv.extend(self.build.iter().cloned());
        argv.extend(self.targets.iter().cloned());
        argv.extend(self.filter.iter().cloned());
        argv.push("--".into());
        argv.extend(self.harness.iter().cloned());
        argv
    }

    /// One test alone, by its exact name (after `--`: cargo takes one name before it).
    fn probe(&self, name: &str) -> Vec<String> {
        let mut argv = self.program.clone();
        argv.push("test".into());
        argv.extend(self.build.iter().cloned());
        argv.extend(self.targets.iter().cloned());
        argv.extend(["--".into(), "--exact".into()]);
        argv.extend(self.ignored.iter().cloned());
        argv.push(name.to_string());
        argv
    }
}

/// The listing run, built with the instrumentation, then each chosen test alone.
pub(super) async fn trace(
    root: &Path,
    config: &Config,
    cargo: &CargoTest,
    (profdata, cov): (PathBuf, PathBuf),
    cancel: &CancellationToken,
) -> Result<Vec<TestLines>, LocateError> {
    let dir = root.join(".agent-ls").join("locate");
    // Kept between runs (the locate folder is not): the instrumented build is the cost.
    let target = root.join(".agent-ls").join("locate-target");
    let env = |profile: String| instrumented(&target, &dir.join(profile));
    let (result, output) = coverage_run(
        root,
        config,
        cargo.listing(),
        env("list-%p-%m.profraw".into()),
        cancel,
    )
    .await?;
    let listed = parse_listing(&output);
    if listed.tests.is_empty() {
        let why = "`cargo test` listed no test".to_string();
        return Err(LocateError::NoRecord(why, result.report));
    }
    let objects: Vec<PathBuf> = listed.binaries.iter().map(|b| root.join(b)).collect();
    let probes = listed
        .tests
        .into_iter()
        .map(|t| Probe {
            argv: cargo.probe(&t.name),
            // Beside a failing test: in its module.
            group: t
                .name
                .rsplit_once("::")
                .map(|(m, _)| m)
                .unwrap_or("")
                .to_string(),
            test: t.name,
            failed: t.failed,
            env: Vec::new(),
        })
        .collect();
    let mut chosen = sample(probes);
    // The profile's name is known only once the sample has its order.
    for (i, p) in chosen.iter_mut().enumerate() {
        p.env = env(format!("rs-{i}-%p-%m.profraw"));
    }
    let canonical = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    probe_each(root, config, chosen, cancel, &|i| {
        export(&dir, i, (&profdata, &cov), &objects)
            .map(|lcov| without_tests(parse_lcov(&lcov, &canonical), root))
            .unwrap_or_default()
    })
    .await
}

/// The environment of an instrumented run: the user's RUSTFLAGS with the instrumentation,
/// agent-ls's target folder, and where each process writes its raw profile.
fn instrumented(target: &Path, profile: &Path) -> Vec<(String, String)> {
    let flags = std::env::var("RUSTFLAGS").unwrap_or_default();
    vec![
        (
            "RUSTFLAGS".to_string(),
            format!("{flags} -C instrument-coverage").trim().to_string(),
        ),
        (
            "CARGO_TARGET_DIR".to_string(),
            target.to_string_lossy().into_owned(),
        ),
        (
            "LLVM_PROFILE_FILE".to_string(),
            profile.to_string_lossy().into_owned(),
        ),
    ]
}

/// One test the listing run reported: its path in its binary (`cart::tests::bulk`), and
/// whether it failed.
#[derive(Debug, PartialEq)]
struct Listed {
    name: String,
    failed: bool,
}

#[derive(Debug, Default, PartialEq)]
struct Listing {
    tests: Vec<Listed>,
    /// Every test binary run, as cargo printed its path (under the coverage target folder).
    binaries: Vec<String>,
}

/// Reads `cargo test`'s output: `Running unittests src/lib.rs (target/debug/deps/shop-1a2b)`
/// names a binary (on stderr), `test cart::tests::bulk ... FAILED` is a test (on stdout).
/// The two streams come apart, so a test is not tied to its binary: each runs alone by its
/// exact name in every binary, where a name of another binary's matches nothing.
fn parse_listing(output: &str) -> Listing {
    let mut listing = Listing::default();
    for line in output.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ")
            && let Some((_, binary)) = rest.rsplit_once(" (")
        {
            listing
                .binaries
                .push(binary.trim_end_matches(')').to_string());
        } else if let Some(rest) = t.strip_prefix("test ")
            && let Some((name, outcome)) = rest.rsplit_once(" ... ")
        {
            let failed = match outcome.trim() {
                "ok" => false,
                "FAILED" => true,
                _ => continue,
            };
            // `test it_panics - should panic ... ok`: the name is before the note.
            let name = name.trim().trim_end_matches(" - should panic").to_string();
            // The same name in two binaries: one probe runs both, failed if one failed.
            match listing.tests.iter_mut().find(|t| t.name == name) {
                Some(known) => known.failed |= failed,
                None => listing.tests.push(Listed { name, failed }),
            }
        }
    }
    listing
}

/// The `i`th probe's raw profiles merged and exported as lcov from `objects`.
fn export(
    dir: &Path,
    i: usize,
    (profdata, cov): (&Path, &Path),
    objects: &[PathBuf],
) -> Option<String> {
    let prefix = format!("rs-{i}-");
    let raws: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".profraw"))
        })
        .collect();
    if raws.is_empty() {
        return None;
    }
    let merged = dir.join(format!("rs-{i}.profdata"));
    let ok = std::process::Command::new(profdata)
        .args(["merge", "-sparse", "-o"])
        .arg(&merged)
        .args(&raws)
        .output()
        .ok()?
        .status
        .success();
    if !ok {
        return None;
    }
    let mut export = std::process::Command::new(cov);
    export
        .args(["export", "-format=lcov", "-instr-profile"])
        .arg(&merged);
    for (n, object) in objects.iter().filter(|o| o.is_file()).enumerate() {
        if n > 0 {
            export.arg("-object");
        }
        export.arg(object);
    }
    let out = export.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `lines` without those of the files' own tests (`#[cfg(test)]` modules, `#[test]`
/// functions): a unit test lives beside the code it tests, and is no suspect.
fn without_tests(mut lines: Lines, root: &Path) -> Lines {
    for (path, ran) in lines.iter_mut() {
        let Ok(text) = std::fs::read_to_string(root.join(path)) else {
            continue;
        };
        let tests = agent_ls_core::locate::rust_test_ranges(&text);
        ran.retain(|l| !tests.iter().any(|(a, b)| a <= l && l <= b));
    }
    lines.retain(|_, ran| !ran.is_empty());
    lines
}

/// The lines an lcov record ran (`DA:line,count` with a count above zero, under `SF:path`),
/// by workspace file; the standard library's and dependencies' files are not the project's.
fn parse_lcov(text: &str, root: &Path) -> Lines {
    let mut lines = Lines::new();
    let mut file: Option<String> = None;
    for l in text.lines() {
        if let Some(path) = l.strip_prefix("SF:") {
            file = own_file(root, Path::new(path));
        } else if l == "end_of_record" {
            file = None;
        } else if let (Some(f), Some(da)) = (&file, l.strip_prefix("DA:")) {
            let mut parts = da.split(',');
            let line = parts.next().and_then(|n| n.parse::<u32>().ok());
            let count = parts.next().and_then(|n| n.parse::<u64>().ok());
            if let (Some(line), Some(count)) = (line, count)
                && count > 0
            {
                lines.entry(f.clone()).or_default().insert(line);
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_listing_names_each_test_and_binary_from_either_stream() {
        // stdout, then stderr, as the run hands them over.
        let out = "\nrunning 2 tests\ntest cart::tests::small ... ok\ntest cart::tests::bulk ... FAILED\n\nrunning 2 tests\ntest mixed ... ok\ntest slow ... ignored\n\n   Compiling shop v0.1.0 (/ws)\n    Finished `test` profile\n     Running unittests src/lib.rs (.agent-ls/locate-target/debug/deps/shop-1a2b)\n     Running tests/prices.rs (.agent-ls/locate-target/debug/deps/prices-3c4d)\n";
        let l = parse_listing(out);
        assert_eq!(
            l.binaries,
            [
                ".agent-ls/locate-target/debug/deps/shop-1a2b",
                ".agent-ls/locate-target/debug/deps/prices-3c4d"
            ]
        );
        let got: Vec<(&str, bool)> = l
            .tests
            .iter()
            .map(|t| (t.name.as_str(), t.failed))
            .collect();
        assert_eq!(
            got,
            [
                ("cart::tests::small", false),
                ("cart::tests::bulk", true),
                ("mixed", false)
            ]
        );
    }

    #[test]
    fn lcov_lines_with_a_count_in_the_projects_files() {
        let lcov = "SF:/ws/src/rules.rs\nFN:1,rule_for\nDA:1,1\nDA:2,1\nDA:4,0\nend_of_record\nSF:/home/u/.cargo/registry/src/x/lib.rs\nDA:1,5\nend_of_record\nSF:/rustc/abc/library/core/src/fmt.rs\nDA:9,1\nend_of_record\n";
        let lines = parse_lcov(lcov, Path::new("/ws"));
        let got: Vec<(&str, Vec<u32>)> = lines
            .iter()
            .map(|(p, l)| (p.as_str(), l.iter().copied().collect()))
            .collect();
        assert_eq!(got, [("src/rules.rs", vec![1, 2])]);
    }

    #[test]
    fn the_users_arguments_keep_their_build_flags_and_filters() {
        let cargo = runner(&words(&[
            "cargo",
            "+nightly",
            "test",
            "-p",
            "shop",
            "cart",
            "--features",
            "x",
            "-q",
            "--",
            "--skip",
            "slow",
            "--test-threads",
            "1",
            "--format",
            "terse",
            "--include-ignored",
        ]))
        .unwrap();
        assert_eq!(
            cargo.listing(),
            words(&[
                "cargo",
                "+nightly",
                "test",
                "--no-fail-fast",
                "-p",
                "shop",
                "--features",
                "x",
                "--tests",
                "cart",
                "--",
                "--skip",
                "slow",
                "--test-threads",
                "1",
                "--include-ignored"
            ])
        );
        // The name after `--`: cargo takes one before it, and the user's filter is not it.
        assert_eq!(
            cargo.probe("cart::tests::bulk"),
            words(&[
                "cargo",
                "+nightly",
                "test",
                "-p",
                "shop",
                "--features",
                "x",
                "--tests",
                "--",
                "--exact",
                "--include-ignored",
                "cart::tests::bulk"
            ])
        );
        let lib = runner(&words(&["cargo", "test", "--lib"])).unwrap();
        assert_eq!(
            lib.probe("t"),
            words(&["cargo", "test", "--lib", "--", "--exact", "t"])
        );
        assert_eq!(runner(&words(&["cargo", "build"])), None);
        assert_eq!(runner(&words(&["cargo", "+nightly", "build"])), None);
        let l = parse_listing("test it_panics - should panic ... ok\n");
        assert_eq!(l.tests[0].name, "it_panics");
    }
}
