//! The tester's property tests need their library (`Effect::DevDependency`): Hypothesis in
//! the Python the tests run with, proptest among the Cargo.toml's dependencies. When it is
//! missing it is installed as a dev dependency with the project's own tools
//! (`python -I -m pip install hypothesis`, `cargo add --dev proptest --manifest-path ...`),
//! and only once the user approved that very command (`Shell::ask_install` when `policy::install` asks;
//! `agent-ls run --yes` approves).
//!
//! Whether the library is there is asked of the tests' Python in the test sandbox, with a
//! timeout: that Python may be the workspace's own, and its start-up runs code (`.pth` files),
//! and this happens before anyone approved anything. The install needs the network and writes
//! outside the workspace (the virtual environment, cargo's registry), so it runs outside the
//! sandbox, but as a fixed command the workspace cannot redirect: from `/`, not the workspace
//! (a `pip.py` there would be run as pip; cargo reads `.cargo/config.toml` and rustup
//! `rust-toolchain.toml` from the working folder up), Python isolated (`-I`), with the tests'
//! environment allowlist plus the package tools' own settings (proxies, certificates, `PIP_*`,
//! `CARGO_NET_*`, `CARGO_HTTP_*`) and no keys, as its own process group that a timeout or a
//! cancel ends whole.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::shell::Shell;
use crate::config::Config;
use crate::tests_run::command::filtered_env;
use crate::tests_run::process::{self, Limits};
use crate::tests_run::{self, RunEnd};
use crate::trust::sandbox::{self, Sandbox};
use agent_ls_core::agent::tester::InstallError;

/// How long an install may take (a download and, for pip, a build).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// How long asking the tests' Python whether it has the library may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(60);

/// Where installs run: a folder no project can put files in, so that neither Python's path
/// nor cargo's and rustup's configuration lookups see the workspace's files.
const INSTALL_CWD: &str = "/";

/// Makes sure the project has `library`: `Ok` when it is there or was installed, else why
/// not (for the tester).
pub(super) async fn ensure(
    root: &Path,
    config: &Config,
    cancel: &CancellationToken,
    library: &str,
    (shell, policy): (&mut impl Shell, &super::policy::Policy),
) -> Result<(), InstallError> {
    let python = python_of(root, config);
    if present(root, config, &python, library, cancel).await? {
        return Ok(());
    }
    let argv = install_command(root, &python, library)?;
    let (library, command) = (library.to_string(), argv.join(" "));
    if !config.tester.install {
        return Err(InstallError::NotAllowed { library, command });
    }
    let yes = match super::policy::install(policy, shell.present()) {
        Some(true) => {
            shell.progress(&format!(
                "the tester's property test needs {library}; installing it (--yes): {command}"
            ));
            true
        }
        Some(false) => {
            if !policy.dry_run {
                shell.warn(&format!(
                    "the tester's property test needs {library}, and no one is here to approve `{command}`; use --yes to install it"
                ));
            }
            false
        }
        None => shell.ask_install(&library, &argv).await,
    };
    if !yes {
        return Err(InstallError::NotApproved { library, command });
    }
    shell.progress(&format!("installing {library}: {command}"));
    let env = install_env(std::env::vars());
    if let Err(why) = run_in(&argv, Path::new(INSTALL_CWD), &env, INSTALL_TIMEOUT, cancel).await {
        return Err(InstallError::Failed {
            library,
            command,
            why: why.to_string(),
        });
    }
    if present(root, config, &python, &library, cancel).await? {
        shell.progress(&format!("{library} is installed as a dev dependency"));
        Ok(())
    } else {
        Err(InstallError::StillMissing { library, command })
    }
}

/// The command that installs `library` for the project in `root`. Every path in it is
/// absolute, since it does not run in `root`.
fn install_command(root: &Path, python: &Path, library: &str) -> Result<Vec<String>, InstallError> {
    let python = python.to_string_lossy();
    let manifest = root.join("Cargo.toml");
    let argv: Vec<&str> = match library {
        "hypothesis" => vec![&python, "-I", "-m", "pip", "install", "hypothesis"],
        "proptest" => vec![
            "cargo",
            "add",
            "--dev",
            "proptest",
            "--manifest-path",
            manifest.to_str().ok_or(InstallError::NotUtf8)?,
        ],
        other => return Err(InstallError::Unknown(other.to_string())),
    };
    Ok(argv.into_iter().map(str::to_string).collect())
}

/// The Python the tests run with: the test command's own when it names one (a virtual
/// environment's), else `python3`. A relative path is the workspace's, made absolute.
fn python_of(root: &Path, config: &Config) -> PathBuf {
    let argv = tests_run::prepare(root, &config.test)
        .map(|c| c.argv)
        .unwrap_or_default();
    let python = argv
        .into_iter()
        .find(|a| {
            Path::new(a)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python"))
        })
        .unwrap_or_else(|| "python3".into());
    let path = PathBuf::from(&python);
    if path.is_relative() && python.contains('/') {
        root.join(path)
    } else {
        path
    }
}

/// Whether the project has `library` now. Python answers in the test sandbox.
async fn present(
    root: &Path,
    config: &Config,
    python: &Path,
    library: &str,
    cancel: &CancellationToken,
) -> Result<bool, InstallError> {
    match library {
        // Isolated (-I): the workspace's own files are not on the path, and a file named
        // like the library does not count.
        "hypothesis" => {
            let argv = [
                python.to_string_lossy().into_owned(),
                "-I".into(),
                "-c".into(),
                "import hypothesis".into(),
            ];
            let sandbox = Sandbox::from_config(&config.sandbox);
            let argv = sandbox.wrap(root, &argv);
            let env = filtered_env(std::env::vars(), &config.test.env_allow);
            match run_in(&argv, root, &env, CHECK_TIMEOUT, cancel).await {
                Ok(()) => Ok(true),
                Err(Failed::Exited(code, stderr)) if code == sandbox::REFUSED => {
                    match stderr.lines().find_map(|l| l.strip_prefix(sandbox::MARK)) {
                        Some(why) => Err(InstallError::Unasked(format!(
                            "cannot ask {} for {library}: the sandbox could not be set up: {}",
                            python.display(),
                            why.trim()
                        ))),
                        None => Ok(false),
                    }
                }
                Err(Failed::Exited(..) | Failed::Signaled(_)) => Ok(false),
                Err(other) => Err(InstallError::Unasked(format!(
                    "asking {} for {library}: {other}",
                    python.display()
                ))),
            }
        }
        "proptest" => {
            let text = std::fs::read_to_string(root.join("Cargo.toml"))
                .map_err(|e| InstallError::Unasked(format!("cannot read Cargo.toml: {e}")))?;
            Ok(cargo_has(&text, library))
        }
        _ => Ok(false),
    }
}

/// Variables an install keeps besides the tests' allowlist: the package tools' own settings
/// (proxies, certificates, pip's and cargo's network configuration), never a key of ours.
const INSTALL_PASSED: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

/// Prefixes of the package tools' configuration variables an install keeps.
const INSTALL_PREFIXES: &[&str] = &["PIP_", "CARGO_NET_", "CARGO_HTTP_"];

/// The environment of an install, from agent-ls's own `vars`: what a test gets (without the
/// user's `test.env_allow`, which is for the tests) and the package tools' settings.
fn install_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let vars: Vec<(String, String)> = vars.collect();
    let mut env = filtered_env(vars.iter().cloned(), &[]);
    env.extend(vars.into_iter().filter(|(name, _)| {
        INSTALL_PASSED.contains(&name.as_str())
            || INSTALL_PREFIXES.iter().any(|p| name.starts_with(p))
    }));
    env
}

/// Why a command did not succeed.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("cannot start it: {0}")]
    Start(String),
    /// Its exit code and the last lines of its stderr.
    #[error("exit status {0}: {1}")]
    Exited(i32, String),
    #[error("killed by a signal: {0}")]
    Signaled(String),
    #[error("it took over {0}s")]
    TimedOut(u64),
    #[error("cancelled")]
    Cancelled,
}

/// Runs `argv` in `cwd` with exactly `env`, as its own process group: a timeout or a cancel
/// ends the command and whatever it started (pip's build, cargo's index update) too.
async fn run_in(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<(), Failed> {
    let limits = Limits {
        timeout,
        grace: Duration::from_secs(2),
        output_cap: 16 * 1024,
    };
    let finished = process::run(argv, cwd, env, &limits, cancel)
        .await
        .map_err(|e| Failed::Start(e.to_string()))?;
    let tail = || {
        let err = finished.stderr.text();
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    };
    match finished.end {
        RunEnd::Exited { code: 0 } => Ok(()),
        RunEnd::Exited { code } => Err(Failed::Exited(code, tail())),
        RunEnd::Signaled => Err(Failed::Signaled(tail())),
        RunEnd::TimedOut => Err(Failed::TimedOut(timeout.as_secs())),
        RunEnd::Cancelled => Err(Failed::Cancelled),
        RunEnd::Limit { .. } => Err(Failed::Signaled(tail())),
    }
}

/// Whether a Cargo.toml's dependencies or dev-dependencies (its workspace's too) name
/// `library`.
fn cargo_has(text: &str, library: &str) -> bool {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return false;
    };
    let names = |t: &toml::Table, key: &str| {
        t.get(key)
            .and_then(toml::Value::as_table)
            .is_some_and(|d| d.contains_key(library))
    };
    names(&table, "dev-dependencies")
        || names(&table, "dependencies")
        || table
            .get("workspace")
            .and_then(toml::Value::as_table)
            .is_some_and(|w| names(w, "dependencies"))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn proptest_counts_in_dev_dependencies_dependencies_or_the_workspace_s() {
        assert!(cargo_has(
            "[dev-dependencies]\nproptest = \"1\"\n",
            "proptest"
        ));
        assert!(cargo_has(
            "[dependencies.proptest]\nversion = \"1\"\n",
            "proptest"
        ));
        assert!(cargo_has(
            "[workspace.dependencies]\nproptest = \"1\"\n",
            "proptest"
        ));
        assert!(!cargo_has("[dependencies]\nserde = \"1\"\n", "proptest"));
        assert!(!cargo_has("not toml [", "proptest"));
    }

    /// The install runs from outside the workspace, so nothing in it names the workspace
    /// but the manifest's absolute path; pip runs isolated.
    #[test]
    fn an_install_command_is_fixed_and_names_the_workspace_by_absolute_paths_only() {
        let root = Path::new("/ws");
        let pip = install_command(root, Path::new("/ws/.venv/bin/python"), "hypothesis");
        assert_eq!(
            pip.unwrap(),
            [
                "/ws/.venv/bin/python",
                "-I",
                "-m",
                "pip",
                "install",
                "hypothesis"
            ]
        );
        let cargo = install_command(root, Path::new("python3"), "proptest");
        assert_eq!(
            cargo.unwrap(),
            [
                "cargo",
                "add",
                "--dev",
                "proptest",
                "--manifest-path",
                "/ws/Cargo.toml"
            ]
        );
        assert!(install_command(root, Path::new("python3"), "quickcheck").is_err());
    }

    #[test]
    fn an_install_gets_the_package_tools_settings_and_no_keys() {
        let vars = [
            ("PATH", "/bin"),
            ("HOME", "/home/u"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("PIP_INDEX_URL", "https://mirror/simple"),
            ("CARGO_NET_OFFLINE", "true"),
            ("OPENAI_API_KEY", "sk-x"),
            ("GH_TOKEN", "ghp-x"),
            ("AGENT_LS_MEMORY__URL", "postgres://u:p@db/q"),
            ("CARGO_REGISTRY_TOKEN", "t"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()));
        let mut kept: Vec<String> = install_env(vars.into_iter())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        kept.sort();
        assert_eq!(
            kept,
            [
                "CARGO_NET_OFFLINE",
                "HOME",
                "HTTPS_PROXY",
                "PATH",
                "PIP_INDEX_URL"
            ]
        );
    }

    /// A relative Python in the test command is the workspace's; the install, which runs
    /// elsewhere, names it absolutely.
    #[test]
    fn a_relative_python_is_the_workspace_s() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.test.command = [".venv/bin/python", "-m", "pytest"]
            .map(String::from)
            .to_vec();
        // A program inside the workspace runs only when listed by its exact path.
        config.test.allowlist = vec![".venv/bin/python -m pytest".into()];
        assert_eq!(
            python_of(dir.path(), &config),
            dir.path().join(".venv/bin/python")
        );
        config.test.command = ["python3", "-m", "pytest"].map(String::from).to_vec();
        config.test.allowlist = vec!["python3 -m pytest".into()];
        assert_eq!(python_of(dir.path(), &config), PathBuf::from("python3"));
    }

    /// A cancelled install ends what the install started too, not only its first process.
    #[tokio::test]
    async fn cancelling_an_install_ends_its_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "sleep 300 & echo $! > {0}.tmp && mv {0}.tmp {0} && wait",
            pid_file.display()
        );
        let argv = ["sh".to_string(), "-c".into(), script];
        let env = install_env(std::env::vars());
        let cancel = CancellationToken::new();
        let install = run_in(
            &argv,
            Path::new(INSTALL_CWD),
            &env,
            INSTALL_TIMEOUT,
            &cancel,
        );
        let started = Instant::now();
        let waiting = async {
            loop {
                if let Ok(text) = std::fs::read_to_string(&pid_file) {
                    break text.trim().parse::<i32>().expect("a pid");
                }
                assert!(started.elapsed() < Duration::from_secs(20), "never started");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let (ended, pid) = tokio::join!(install, async {
            let pid = waiting.await;
            cancel.cancel();
            pid
        });
        assert!(matches!(ended, Err(Failed::Cancelled)), "{ended:?}");
        let running = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let cancelled = Instant::now();
        while running(pid) {
            assert!(
                cancelled.elapsed() < Duration::from_secs(5),
                "process {pid}, which the install started, outlived the cancel"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
