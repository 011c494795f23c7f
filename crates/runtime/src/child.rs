//! How every process agent-ls starts for a test run, a routed command or an MCP server begins:
//! with an empty signal mask and every signal at its default disposition.
//!
//! A child inherits both across `exec`. The sandbox helper blocks SIGINT, SIGTERM and SIGCHLD
//! to read them from a signalfd, and Rust's runtime ignores SIGPIPE; a test started with those
//! would not die of `terminate()`, nor of a broken pipe, and an assertion on its signal state
//! would fail only under agent-ls. The standard library's `Command` does not undo either here,
//! so each spawn of ours asks for it.

use std::io;

use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};

/// Makes `command` start with a clean signal state.
pub fn start_clean(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: `reset_signals` runs between fork and exec and makes only async-signal-safe
    // system calls (sigprocmask, sigaction); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(reset_signals);
    }
}

/// `start_clean` for tokio's `Command`.
pub fn start_clean_async(command: &mut tokio::process::Command) {
    // SAFETY: as in `start_clean`.
    unsafe {
        command.pre_exec(reset_signals);
    }
}

/// In the child, before exec: nothing blocked, nothing ignored.
fn reset_signals() -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    for s in Signal::iterator() {
        if matches!(s, Signal::SIGKILL | Signal::SIGSTOP) {
            continue;
        }
        // SAFETY: SIG_DFL installs no handler of ours; a signal that cannot be reset is left
        // as it is, which is what exec would do.
        let _ = unsafe { signal(s, SigHandler::SigDfl) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal state of a child started clean from a parent that blocks and ignores.
    #[test]
    fn a_child_starts_with_nothing_blocked_or_ignored() {
        let status_of = |clean: bool| {
            // Blocked and ignored on a thread of our own, as the sandbox helper does, so the
            // test binary's other threads are untouched.
            std::thread::spawn(move || {
                let mut mask = SigSet::empty();
                mask.add(Signal::SIGTERM);
                mask.add(Signal::SIGINT);
                nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
                    .expect("block");
                let mut command = std::process::Command::new("cat");
                command.arg("/proc/self/status");
                if clean {
                    start_clean(&mut command);
                }
                let out = command.output().expect("cat runs");
                String::from_utf8_lossy(&out.stdout).into_owned()
            })
            .join()
            .expect("thread")
        };
        let field = |status: &str, name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| u64::from_str_radix(v.trim(), 16).expect("hex"))
                .expect("field present")
        };
        let sigterm_bit = 1 << (Signal::SIGTERM as u64 - 1);
        let dirty = status_of(false);
        assert_ne!(
            field(&dirty, "SigBlk:") & sigterm_bit,
            0,
            "the mask leaks without it"
        );
        let clean = status_of(true);
        assert_eq!(field(&clean, "SigBlk:"), 0, "{clean}");
        // SIGPIPE, which Rust's runtime ignores, is back at its default.
        let sigpipe_bit = 1 << (Signal::SIGPIPE as u64 - 1);
        assert_eq!(field(&clean, "SigIgn:") & sigpipe_bit, 0, "{clean}");
    }
}
