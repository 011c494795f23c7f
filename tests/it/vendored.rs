//! Files copied from a dependency stay the dependency's own: `crates/runtime/src/queue/pgmq.sql`
//! is the `pgmq` crate's SQL-only install script under a header of ours, and the crate's Rust
//! code expects its own version of that schema. A bump of the crate's pinned version that
//! brings a new script fails here until the copy is refreshed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const VENDORED: &str = "crates/runtime/src/queue/pgmq.sql";
/// Where the crate keeps the script, in its source as cargo downloaded it.
const IN_THE_CRATE: &str = "src/install/embedded/sql/pgmq.sql";

/// The machine's own target, for `cargo metadata --filter-platform`: without it cargo wants
/// every platform's packages (Android's, Windows'), which a build here never downloaded, and
/// `--offline` then fails on a fresh machine.
fn host_tuple() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "host-tuple"])
        .output()
        .expect("run rustc --print host-tuple");
    assert!(out.status.success(), "rustc --print host-tuple failed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The locked version and the source folder of the `pgmq` package, from `cargo metadata`:
/// the registry cargo used, wherever it sits (a vendored source or another CARGO_HOME too).
fn pgmq_package(root: &Path) -> (String, PathBuf) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", &host_tuple()])
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let pgmq = packages
        .iter()
        .find(|p| p["name"] == "pgmq")
        .expect("the pgmq package in cargo metadata");
    let manifest = PathBuf::from(pgmq["manifest_path"].as_str().expect("manifest_path"));
    let version = pgmq["version"].as_str().expect("version").to_string();
    (
        version,
        manifest.parent().expect("the crate's folder").to_path_buf(),
    )
}

/// The PGMQ version the crate's script installs, from its extension control file.
fn pgmq_sql_version(crate_dir: &Path) -> String {
    let control = std::fs::read_to_string(crate_dir.join("src/install/embedded/pgmq.control"))
        .expect("the crate's pgmq.control");
    let line = control
        .lines()
        .find_map(|l| l.strip_prefix("default_version"))
        .expect("default_version in pgmq.control");
    line.trim_matches(|c: char| c == '=' || c == '\'' || c.is_whitespace())
        .to_string()
}

#[test]
fn the_vendored_pgmq_sql_is_the_pgmq_crate_s_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (version, crate_dir) = pgmq_package(root);
    let theirs_path = crate_dir.join(IN_THE_CRATE);
    let theirs = std::fs::read_to_string(&theirs_path)
        .unwrap_or_else(|e| panic!("{}: {e}", theirs_path.display()));
    let ours = std::fs::read_to_string(root.join(VENDORED)).expect("the vendored pgmq.sql");
    // Our header (what it is, from which crate version, the licence) ends at the first blank
    // line; the rest is the crate's file byte for byte.
    let (header, body) = ours
        .split_once("\n\n")
        .expect("a header, a blank line, then the script");
    let refresh = format!(
        "to refresh: (sed '/^$/q' {VENDORED}; cat {}) > pgmq.sql && mv pgmq.sql {VENDORED}, \
         then update the versions the header names",
        theirs_path.display()
    );
    if body != theirs {
        // The line of our file where they part: after the header and its blank line.
        let offset = header.lines().count() + 1;
        let at = body
            .lines()
            .zip(theirs.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(body.lines().count().min(theirs.lines().count()));
        panic!(
            "{VENDORED}:{} differs from the pgmq {version} crate's {}; {refresh}",
            offset + at + 1,
            theirs_path.display()
        );
    }
    let unwrapped = header.replace("\n-- ", " ");
    let sql_version = pgmq_sql_version(&crate_dir);
    assert!(
        unwrapped.contains(&format!("PGMQ {sql_version}")) && unwrapped.contains(&version),
        "{VENDORED}'s header should name PGMQ {sql_version} and the crate's {version}:\n{header}"
    );
}
