//! Resource limits for the commands the sandbox helper runs: how many processes, how much
//! memory, CPU time and the largest file. They are rlimits, set in the helper so that the
//! command and all it starts inherit them, and, where agent-ls can make a control group of its
//! own (root, or a delegated cgroup v2 subtree), a group capping processes and memory, which
//! counts the whole tree where an rlimit counts one process. A limit the run hit is named by
//! the helper on stderr (`sandbox::limit_line`) so that the run reads as stopped, not failed.

use std::fmt;

use serde::Serialize;

/// One resource a limit applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitKind {
    Processes,
    MemoryMb,
    CpuSecs,
    FileMb,
}

impl LimitKind {
    const ALL: [LimitKind; 4] = [
        LimitKind::Processes,
        LimitKind::MemoryMb,
        LimitKind::CpuSecs,
        LimitKind::FileMb,
    ];

    /// The `[sandbox]` setting that holds it.
    pub fn setting(self) -> &'static str {
        match self {
            LimitKind::Processes => "sandbox.max_processes",
            LimitKind::MemoryMb => "sandbox.max_memory_mb",
            LimitKind::CpuSecs => "sandbox.max_cpu_secs",
            LimitKind::FileMb => "sandbox.max_file_mb",
        }
    }

    /// Its word on the helper's command line and in its `limit` line.
    pub fn word(self) -> &'static str {
        match self {
            LimitKind::Processes => "processes",
            LimitKind::MemoryMb => "memory",
            LimitKind::CpuSecs => "cpu",
            LimitKind::FileMb => "file",
        }
    }

    pub fn from_word(word: &str) -> Option<LimitKind> {
        LimitKind::ALL.into_iter().find(|k| k.word() == word)
    }
}

/// A limit a run hit: which, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Limit {
    pub kind: LimitKind,
    pub max: u64,
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, max) = (self.kind.setting(), thousands(self.max));
        match self.kind {
            LimitKind::Processes => {
                write!(f, "the tests started more than {max} processes ({what})")
            }
            LimitKind::MemoryMb => {
                write!(f, "the tests used more than {max} MB of memory ({what})")
            }
            LimitKind::CpuSecs => write!(
                f,
                "a test process used more than {max} s of CPU time ({what})"
            ),
            LimitKind::FileMb => write!(f, "the tests wrote a file larger than {max} MB ({what})"),
        }
    }
}

/// `4096` as `4,096`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The limits the helper applies; 0 is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    pub processes: u64,
    pub memory_mb: u64,
    pub cpu_secs: u64,
    pub file_mb: u64,
}

impl Limits {
    fn get(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::Processes => self.processes,
            LimitKind::MemoryMb => self.memory_mb,
            LimitKind::CpuSecs => self.cpu_secs,
            LimitKind::FileMb => self.file_mb,
        }
    }

    /// `--limit WORD=N` arguments for the helper.
    pub fn args(&self) -> Vec<String> {
        LimitKind::ALL
            .into_iter()
            .filter(|k| self.get(*k) > 0)
            .flat_map(|k| {
                [
                    "--limit".to_string(),
                    format!("{}={}", k.word(), self.get(k)),
                ]
            })
            .collect()
    }

    /// Reads one `WORD=N` of `--limit`.
    pub fn set(&mut self, arg: &str) -> bool {
        let Some((word, n)) = arg.split_once('=') else {
            return false;
        };
        let (Some(kind), Ok(n)) = (LimitKind::from_word(word), n.parse::<u64>()) else {
            return false;
        };
        match kind {
            LimitKind::Processes => self.processes = n,
            LimitKind::MemoryMb => self.memory_mb = n,
            LimitKind::CpuSecs => self.cpu_secs = n,
            LimitKind::FileMb => self.file_mb = n,
        }
        true
    }

    pub fn limit(&self, kind: LimitKind) -> Limit {
        Limit {
            kind,
            max: self.get(kind),
        }
    }
}

/// Why a limit could not be applied, so nothing runs.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("cannot set {what}: {source}")]
    Rlimit {
        what: &'static str,
        source: nix::Error,
    },
}

/// Sets the rlimits on this process, so on all it starts: RLIMIT_DATA for memory (the heap
/// and private mappings, not the address space that runtimes such as V8 and Go reserve),
/// RLIMIT_CPU (SIGXCPU at the limit, SIGKILL a second later), RLIMIT_FSIZE (SIGXFSZ), and
/// RLIMIT_NPROC, which the kernel counts per user and never enforces for root (the control
/// group caps processes there). `run_as`: the uid the command will run as (`sandbox.run_as`),
/// whose processes RLIMIT_NPROC counts then.
pub fn apply_rlimits(limits: &Limits, run_as: Option<u32>) -> Result<(), LimitError> {
    use nix::sys::resource::{Resource, setrlimit};
    let mb = 1024 * 1024;
    let set = |what: &'static str, resource: Resource, soft: u64, hard: u64| {
        setrlimit(resource, soft, hard).map_err(|source| LimitError::Rlimit { what, source })
    };
    if limits.memory_mb > 0 {
        let bytes = limits.memory_mb * mb;
        set("RLIMIT_DATA", Resource::RLIMIT_DATA, bytes, bytes)?;
    }
    if limits.cpu_secs > 0 {
        let s = limits.cpu_secs;
        set("RLIMIT_CPU", Resource::RLIMIT_CPU, s, s + 1)?;
    }
    if limits.file_mb > 0 {
        let bytes = limits.file_mb * mb;
        set("RLIMIT_FSIZE", Resource::RLIMIT_FSIZE, bytes, bytes)?;
    }
    let uid = run_as.unwrap_or_else(my_uid);
    if limits.processes > 0 && uid != 0 {
        // The count is the user's, other processes of theirs included: the helper's own
        // count of them is added so that the cap is the command's.
        let others = user_processes(uid);
        let n = limits.processes + others;
        set("RLIMIT_NPROC", Resource::RLIMIT_NPROC, n, n)?;
    }
    Ok(())
}

/// This process's real user id (the owner of its /proc entry).
fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

/// How many processes user `me` has now (what RLIMIT_NPROC counts besides the command's).
fn user_processes(me: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                    == Some(me)
            })
        })
        .count() as u64
}

/// What a process's end says of the limits: SIGXCPU is the CPU limit, SIGXFSZ the file size.
pub fn limit_of_signal(signal: i32, limits: &Limits) -> Option<Limit> {
    let kind = match nix::sys::signal::Signal::try_from(signal).ok()? {
        nix::sys::signal::Signal::SIGXCPU => LimitKind::CpuSecs,
        nix::sys::signal::Signal::SIGXFSZ => LimitKind::FileMb,
        _ => return None,
    };
    (limits.get(kind) > 0).then(|| limits.limit(kind))
}

/// What the command's output says of the limits, when no signal did: a program that handles
/// the failure itself prints the system's words for it (a refused fork, a refused
/// allocation, a write past the largest file).
pub fn limit_of_output(output: &str, limits: &Limits) -> Option<Limit> {
    let says = |words: &[&str]| words.iter().any(|w| output.contains(w));
    let fork = says(&[
        "fork: Resource temporarily unavailable",
        "fork: retry",
        "BlockingIOError: [Errno 11]",
        "Cannot fork",
        "can't fork",
    ]);
    let memory = says(&[
        "MemoryError",
        "Cannot allocate memory",
        "memory allocation of",
        "std::bad_alloc",
        "out of memory",
        "Out of memory",
    ]);
    let file = says(&["File too large", "EFBIG"]);
    [
        (fork, LimitKind::Processes),
        (memory, LimitKind::MemoryMb),
        (file, LimitKind::FileMb),
    ]
    .into_iter()
    .find(|(said, kind)| *said && limits.get(*kind) > 0)
    .map(|(_, kind)| limits.limit(kind))
}

/// A control group the helper made for one command, or `None` where it cannot make one
/// (not root and no delegated cgroup v2 subtree), which leaves the rlimits.
pub struct Group {
    cgroup: cgroups_rs::Cgroup,
    limits: Limits,
}

impl Group {
    /// Makes a group capping processes and memory and moves this process into it, so the
    /// command it starts is in it too.
    pub fn join(limits: &Limits) -> Option<Group> {
        use cgroups_rs::cgroup_builder::CgroupBuilder;
        use cgroups_rs::{CgroupPid, MaxValue};
        if limits.processes == 0 && limits.memory_mb == 0 {
            return None;
        }
        let hierarchy = cgroups_rs::hierarchies::auto();
        let (name, controllers) = group_path(std::process::id())?;
        let memory = controllers.iter().any(|c| c == "memory");
        let mut builder = CgroupBuilder::new(&name).set_specified_controllers(controllers);
        if limits.processes > 0 {
            // One more for the helper itself.
            let max = MaxValue::Value(limits.processes as i64 + 1);
            builder = builder.pid().maximum_number_of_processes(max).done();
        }
        if limits.memory_mb > 0 && memory {
            let bytes = (limits.memory_mb * 1024 * 1024) as i64;
            builder = builder.memory().memory_hard_limit(bytes).done();
        }
        let cgroup = builder.build(hierarchy).ok()?;
        let pid = CgroupPid::from(std::process::id() as u64);
        if cgroup.add_task_by_tgid(pid).is_err() {
            let _ = cgroup.delete();
            return None;
        }
        Some(Group {
            cgroup,
            limits: *limits,
        })
    }

    /// The limit the group saw hit: a fork refused at the process cap, or memory over its cap.
    pub fn hit(&self) -> Option<Limit> {
        use cgroups_rs::memory::MemController;
        use cgroups_rs::pid::PidController;
        let forks_refused = self
            .cgroup
            .controller_of::<PidController>()
            .and_then(|p| p.get_pid_events().ok())
            .unwrap_or(0);
        if forks_refused > 0 && self.limits.processes > 0 {
            return Some(self.limits.limit(LimitKind::Processes));
        }
        let memory = self.cgroup.controller_of::<MemController>()?.memory_stat();
        (self.limits.memory_mb > 0 && (memory.fail_cnt > 0 || memory.oom_control.oom_kill > 0))
            .then(|| self.limits.limit(LimitKind::MemoryMb))
    }
}

/// For `agent-ls doctor`: which mechanism enforces the limits here, and what is not
/// enforced and why. Makes (and removes) a trial group to know whether one can be made.
pub fn describe(limits: &Limits) -> String {
    let v2 = cgroups_rs::hierarchies::is_cgroup2_unified_mode();
    let version = if v2 { "v2" } else { "v1" };
    let trial = Limits {
        processes: limits.processes.max(1),
        ..*limits
    };
    // Made and left at once, from a thread's process that has only just joined it.
    let base = group_path(std::process::id());
    let with_memory = base
        .as_ref()
        .is_some_and(|(_, controllers)| controllers.iter().any(|c| c == "memory"));
    let grouped = Group::join(&trial).is_some();
    if grouped && let Some((name, controllers)) = base {
        let parent = std::path::Path::new(&name)
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let back = cgroups_rs::Cgroup::load_with_specified_controllers(
            cgroups_rs::hierarchies::auto(),
            parent,
            controllers,
        );
        let _ = back.add_task_by_tgid(cgroups_rs::CgroupPid::from(std::process::id() as u64));
        remove_group(std::process::id());
    }
    let root = my_uid() == 0;
    let mut out = vec![format!(
        "rlimits: memory {} MB per process (RLIMIT_DATA), CPU {} s per process (RLIMIT_CPU), files {} MB (RLIMIT_FSIZE)",
        limits.memory_mb, limits.cpu_secs, limits.file_mb
    )];
    if grouped && with_memory {
        out.push(format!(
            "a cgroup {version} group per run caps the whole tree at {} processes and {} MB",
            limits.processes, limits.memory_mb
        ));
    } else if grouped {
        out.push(format!(
            "a cgroup {version} group per run caps the whole tree at {} processes; memory is per process, not per tree (the memory controller is mounted in another group than pids)",
            limits.processes
        ));
    } else if root {
        out.push(format!(
            "no cgroup group can be made here (cgroup {version}): the process cap is NOT enforced, since the kernel does not apply RLIMIT_NPROC to root"
        ));
    } else {
        out.push(format!(
            "no cgroup group can be made here (cgroup {version}, no delegated subtree): processes capped by RLIMIT_NPROC at {} more than the user has; memory is per process, not per tree",
            limits.processes
        ));
    }
    out.push("not enforced: how much the workspace may grow (no per-folder quota; sandbox.max_file_mb bounds each file)".into());
    out.join("; ")
}

/// Where the group of the helper with process id `helper` goes, and with which controllers:
/// below the group this process is in (so the user's or the container's own limits still
/// hold), pids and, where its memory group is the same one (cgroup v1 mounts each controller
/// apart), memory. Parents' groups are those of agent-ls, which the helper starts in.
fn group_path(helper: u32) -> Option<(String, Vec<String>)> {
    let paths = cgroups_rs::cgroup::get_cgroups_relative_paths().ok()?;
    let (base, controllers) = if cgroups_rs::hierarchies::is_cgroup2_unified_mode() {
        (paths.get("")?.clone(), controllers())
    } else {
        let pids = paths.get("pids")?.clone();
        let with_memory = paths.get("memory") == Some(&pids);
        let controllers = controllers()
            .into_iter()
            .filter(|c| c == "pids" || with_memory)
            .collect();
        (pids, controllers)
    };
    let base = base.trim_matches('/');
    let name = format!("agent-ls-{helper}");
    Some((
        if base.is_empty() {
            name
        } else {
            format!("{base}/{name}")
        },
        controllers,
    ))
}

/// Removes the group of the helper `helper` once it has ended (from agent-ls: the confined
/// helper cannot). Nothing happens where it made none.
pub fn remove_group(helper: u32) {
    let Some((name, controllers)) = group_path(helper) else {
        return;
    };
    let hierarchy = cgroups_rs::hierarchies::auto();
    let cgroup = cgroups_rs::Cgroup::load_with_specified_controllers(hierarchy, name, controllers);
    if cgroup.exists() {
        let _ = cgroup.delete();
    }
}

/// Only the controllers the limits need: a cgroup v1 cpuset group starts with no CPUs, and
/// a process cannot join it.
fn controllers() -> Vec<String> {
    vec!["pids".into(), "memory".into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_go_through_the_helpers_command_line_and_back_as_named() {
        let limits = Limits {
            processes: 64,
            memory_mb: 4096,
            cpu_secs: 0,
            file_mb: 1,
        };
        let args = limits.args();
        let mut read = Limits::default();
        for pair in args.chunks(2) {
            assert_eq!(pair[0], "--limit");
            assert!(read.set(&pair[1]));
        }
        assert_eq!(read, limits);
        assert_eq!(
            limits.limit(LimitKind::MemoryMb).to_string(),
            "the tests used more than 4,096 MB of memory (sandbox.max_memory_mb)"
        );
        assert_eq!(
            limit_of_output("OSError: [Errno 27] File too large", &limits),
            Some(limits.limit(LimitKind::FileMb))
        );
        // A limit that is off is never the reason.
        assert_eq!(limit_of_signal(libc::SIGXCPU, &limits), None);
    }
}
