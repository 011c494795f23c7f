//! Runs a test command as its own process group: a timeout and cancellation that end the whole
//! group (SIGTERM, a grace period, SIGKILL), pipes drained to the end with only the head and
//! the tail kept, and no wait on a grandchild that holds a pipe open.

use std::collections::VecDeque;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunEnd {
    Exited {
        code: i32,
    },
    /// Killed by a signal it did not get from us.
    Signaled,
    TimedOut,
    Cancelled,
    /// Stopped by one of the sandbox's limits (`sandbox.max_*`), which the helper named.
    Limit {
        limit: crate::trust::limits::Limit,
    },
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub timeout: Duration,
    pub grace: Duration,
    /// Bytes kept from the start of each stream, and as many from its end.
    pub output_cap: usize,
}

/// One stream's output: the first and last `cap` bytes, and how much there was in all.
#[derive(Debug, Default)]
pub struct Capped {
    cap: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Capped {
    fn new(cap: usize) -> Self {
        Capped {
            cap,
            ..Capped::default()
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.cap.saturating_sub(self.head.len());
        let to_head = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..to_head]);
        bytes = &bytes[to_head..];
        if bytes.len() >= self.cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// The kept text, with a marker where the middle was dropped.
    pub fn text(&self) -> String {
        let head = String::from_utf8_lossy(&self.head);
        let dropped = self.total - self.head.len() as u64 - self.tail.len() as u64;
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let tail = String::from_utf8_lossy(&tail);
        if dropped == 0 {
            format!("{head}{tail}")
        } else {
            format!("{head}\n[... {dropped} bytes of output omitted ...]\n{tail}")
        }
    }
}

#[derive(Debug)]
pub struct Finished {
    pub end: RunEnd,
    pub duration: Duration,
    pub stdout: Capped,
    pub stderr: Capped,
}

/// Runs `argv` in `cwd` with exactly `env`, until it exits, `limits.timeout` passes, or
/// `cancel` fires. Whatever happens, the process group is gone when this returns.
pub async fn run(
    argv: &[String],
    cwd: &Path,
    env: &[(String, String)],
    limits: &Limits,
    cancel: &CancellationToken,
) -> std::io::Result<Finished> {
    let started = Instant::now();
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let mut command = Command::new(program);
    crate::child::start_clean_async(&mut command);
    let mut child = command
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pgid = child.id().map(|id| Pid::from_raw(id as i32));
    // Ends the group if this future is dropped before the run ends (a cancelled MCP call, a
    // front end shutting down), as a cancel would.
    let mut guard = GroupGuard {
        pgid,
        grace: limits.grace,
    };
    let stdout = Arc::new(Mutex::new(Capped::new(limits.output_cap)));
    let stderr = Arc::new(Mutex::new(Capped::new(limits.output_cap)));
    let readers = [
        child
            .stdout
            .take()
            .map(|p| tokio::spawn(drain(p, stdout.clone()))),
        child
            .stderr
            .take()
            .map(|p| tokio::spawn(drain(p, stderr.clone()))),
    ];

    let helper = child.id();
    let end = tokio::select! {
        status = child.wait() => status_end(status?),
        _ = tokio::time::sleep(limits.timeout) => {
            stop_group(&mut child, pgid, limits.grace).await;
            RunEnd::TimedOut
        }
        _ = cancel.cancelled() => {
            stop_group(&mut child, pgid, limits.grace).await;
            RunEnd::Cancelled
        }
    };
    // Background processes the tests started would keep the pipes open and outlive the run.
    if let Some(pgid) = guard.pgid.take() {
        let _ = killpg(pgid, Signal::SIGKILL);
    }
    // The control group the helper made (as root) is empty now; the helper, confined, could
    // not remove it itself.
    if let Some(pid) = helper {
        crate::trust::limits::remove_group(pid);
    }
    drain_ends(readers).await;
    let take =
        |c: &Arc<Mutex<Capped>>| std::mem::take(&mut *c.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Finished {
        end,
        duration: started.elapsed(),
        stdout: take(&stdout),
        stderr: take(&stderr),
    })
}

/// Waits for the pipe readers; a process that left the group could still hold a pipe, so not
/// for long.
async fn drain_ends(readers: [Option<tokio::task::JoinHandle<()>>; 2]) {
    for reader in readers.into_iter().flatten() {
        let abort = reader.abort_handle();
        if tokio::time::timeout(Duration::from_secs(2), reader)
            .await
            .is_err()
        {
            abort.abort();
        }
    }
}

fn status_end(status: std::process::ExitStatus) -> RunEnd {
    match status.code() {
        Some(code) => RunEnd::Exited { code },
        None => RunEnd::Signaled,
    }
}

/// The process group of a run that has not ended yet. Dropped with it still set, it sends the
/// group SIGTERM (the sandbox helper, its leader, then ends every descendant, those that left
/// the group included) and SIGKILL after the grace period, from a thread of its own since a
/// drop cannot wait.
struct GroupGuard {
    pgid: Option<Pid>,
    grace: Duration,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        let Some(pgid) = self.pgid.take() else {
            return;
        };
        if killpg(pgid, Signal::SIGTERM).is_err() {
            return; // the group is gone already
        }
        let grace = self.grace;
        std::thread::spawn(move || {
            std::thread::sleep(grace);
            let _ = killpg(pgid, Signal::SIGKILL);
        });
    }
}

/// SIGTERM to the group, a grace period for the leader to exit, then SIGKILL.
async fn stop_group(child: &mut tokio::process::Child, pgid: Option<Pid>, grace: Duration) {
    if let Some(pgid) = pgid {
        let _ = killpg(pgid, Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        if let Some(pgid) = pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        let _ = child.wait().await;
    }
}

/// Reads a pipe to its end, keeping head and tail; reading on past the cap keeps a chatty
/// process from blocking on a full pipe.
async fn drain(mut pipe: impl AsyncRead + Unpin, into: Arc<Mutex<Capped>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => into
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(&buf[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose future is dropped mid-run (a cancelled MCP call, a front end shutting
    /// down) leaves no process behind.
    #[tokio::test]
    async fn dropping_a_run_ends_its_group() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("pid");
        // The leader waits on a child of its own, as a test runner does: ending only the
        // leader would leave the child running.
        let script = format!(
            "sleep 300 & echo $! > {0}.tmp && mv {0}.tmp {0} && wait",
            pid_file.display()
        );
        let argv = ["sh".to_string(), "-c".into(), script];
        let env = [(
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        )];
        let limits = Limits {
            timeout: Duration::from_secs(60),
            grace: Duration::from_millis(200),
            output_cap: 1024,
        };
        let cancel = CancellationToken::new();
        let run = run(&argv, dir.path(), &env, &limits, &cancel);
        let started = Instant::now();
        let pid: i32 = tokio::select! {
            _ = run => panic!("the run ended by itself"),
            pid = async {
                loop {
                    if let Ok(text) = std::fs::read_to_string(&pid_file) {
                        break text.trim().parse().expect("a pid");
                    }
                    assert!(started.elapsed() < Duration::from_secs(20), "never started");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            } => pid,
        };
        // The run's future is dropped by the select above.
        let dropped = Instant::now();
        let running = |pid: i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        while running(pid) {
            assert!(
                dropped.elapsed() < Duration::from_secs(5),
                "process {pid} outlived its dropped run"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn capped_keeps_head_and_tail() {
        let mut c = Capped::new(4);
        c.push(b"abcdefgh");
        c.push(b"ij");
        assert_eq!(c.total(), 10);
        assert_eq!(c.text(), "abcd\n[... 2 bytes of output omitted ...]\nghij");
        let mut small = Capped::new(10);
        small.push(b"hello");
        assert_eq!(small.text(), "hello");
    }
}
