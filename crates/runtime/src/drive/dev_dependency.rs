//! The tester's property tests need their library (`Effect::DevDependency`): Hypothesis in
//! the Python the tests run with, proptest among the Cargo.toml's dependencies. When it is
//! missing it is installed as a dev dependency with the project's own tools
//! (`python -m pip install hypothesis`, `cargo add --dev proptest`), and only once the user
//! approved that very command (`Shell::approve_install`; `agent-ls run --yes` approves).
//! The install needs the network and writes outside the workspace (the virtual environment,
//! cargo's registry), so it runs outside the test sandbox, like the user's own command would.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Shell;
use crate::config::Config;
use crate::tests_run;

/// How long an install may take (a download and, for pip, a build).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);

/// Makes sure the project has `library`: `Ok` when it is there or was installed, else why
/// not (for the tester).
pub(super) async fn ensure(
    root: &Path,
    config: &Config,
    cancel: &CancellationToken,
    library: &str,
    shell: &mut impl Shell,
) -> Result<(), String> {
    let python = python_of(root, config);
    if present(root, &python, library).await? {
        return Ok(());
    }
    let argv: Vec<String> = match library {
        "hypothesis" => [python.as_str(), "-m", "pip", "install", "hypothesis"]
            .map(str::to_string)
            .to_vec(),
        "proptest" => ["cargo", "add", "--dev", "proptest"]
            .map(str::to_string)
            .to_vec(),
        other => return Err(format!("no property-test library is known as {other}")),
    };
    let command = argv.join(" ");
    if !config.tester.install {
        return Err(format!(
            "{library} is not installed, and tester.install = false allows no install \
             (`{command}`)"
        ));
    }
    if !shell.approve_install(library, &argv).await {
        return Err(format!(
            "{library} is not installed, and installing it as a dev dependency (`{command}`) \
             was not approved"
        ));
    }
    shell.progress(&format!("installing {library}: {command}"));
    run(root, &argv, cancel)
        .await
        .map_err(|why| format!("installing {library} (`{command}`) failed: {why}"))?;
    if present(root, &python, library).await? {
        shell.progress(&format!("{library} is installed as a dev dependency"));
        Ok(())
    } else {
        Err(format!("`{command}` ran, but {library} is still not there"))
    }
}

/// The Python the tests run with: the test command's own when it names one (a virtual
/// environment's), else `python3`.
fn python_of(root: &Path, config: &Config) -> String {
    let argv = tests_run::prepare(root, &config.test)
        .map(|c| c.argv)
        .unwrap_or_default();
    argv.into_iter()
        .find(|a| {
            Path::new(a)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python"))
        })
        .unwrap_or_else(|| "python3".into())
}

/// Whether the project has `library` now.
async fn present(root: &Path, python: &str, library: &str) -> Result<bool, String> {
    match library {
        // Isolated (-I): the workspace's own files are not on the path, so nothing of the
        // project runs, and a file named like the library does not count.
        "hypothesis" => {
            let status = tokio::process::Command::new(python)
                .args(["-I", "-c", "import hypothesis"])
                .current_dir(root)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .map_err(|e| format!("cannot run {python}: {e}"))?;
            Ok(status.success())
        }
        "proptest" => {
            let text = std::fs::read_to_string(root.join("Cargo.toml"))
                .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
            Ok(cargo_has(&text, library))
        }
        _ => Ok(false),
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

/// Runs an approved install command in `root`, with the user's environment.
async fn run(root: &Path, argv: &[String], cancel: &CancellationToken) -> Result<(), String> {
    let (program, args) = argv.split_first().ok_or("an empty command")?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::child::start_clean_async(&mut command);
    let child = command.spawn().map_err(|e| e.to_string())?;
    let output = tokio::select! {
        out = child.wait_with_output() => out.map_err(|e| e.to_string())?,
        _ = tokio::time::sleep(INSTALL_TIMEOUT) => {
            return Err(format!("it took over {}s", INSTALL_TIMEOUT.as_secs()));
        }
        _ = cancel.cancelled() => return Err("cancelled".into()),
    };
    if output.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    Err(format!(
        "{}: {}",
        output.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

#[cfg(test)]
mod tests {
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
}
