//! The sandbox every command runs in (test runs, routed commands). A command is started
//! through a helper, our own binary run as `agent-ls sandbox-run`, which confines itself with
//! Landlock before it starts the command, so the command and everything it starts inherit the
//! rules: read anywhere but the denied folders; write only the workspace, the temp folder and
//! the configured tool caches; no TCP connect or bind unless the network is allowed. The
//! helper is also a child subreaper: a process the command puts in a session of its own
//! (`setsid`) stays its descendant, and it ends the whole tree when the command ends or is
//! stopped. Where Landlock is missing it fails closed, saying why.
//!
//! IO but for its configuration section (`SandboxConfig`, `[sandbox]`), which lives here so
//! that the configuration depends on the sandbox and not the other way round.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::limits::{self, Group, Limits};

/// How commands (test runs, routed commands) are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Landlock: writes only to the workspace, the temp folder and `writable`; no TCP unless
    /// `network`. Where the kernel has no Landlock, commands do not run.
    Landlock,
    /// No sandbox (the user file only).
    Off,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Allow TCP connect and bind.
    pub network: bool,
    /// Folders besides the workspace and the temp folder that commands may write (tool caches);
    /// `~` is the home folder.
    pub writable: Vec<String>,
    /// Folders commands may not read, even inside the workspace or a writable folder.
    pub deny_read: Vec<String>,
    /// How many processes a command's tree may have at once (0: no limit).
    pub max_processes: u64,
    /// How much memory it may use, in MB (0: no limit). By default half the RAM, at most
    /// 8,192.
    pub max_memory_mb: u64,
    /// How much CPU time each of its processes may use, in seconds (0: no limit).
    pub max_cpu_secs: u64,
    /// The largest file it may write, in MB (0: no limit).
    pub max_file_mb: u64,
    /// As root: the unprivileged user (a name or a uid) commands run as; empty runs them as
    /// uid 0 without capabilities.
    pub run_as: String,
}

/// Half the RAM, at most 8 GB: what a test may use on a laptop without taking it down.
fn default_memory_mb() -> u64 {
    let total_kb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(16 * 1024 * 1024);
    (total_kb / 1024 / 2).min(8192)
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::Landlock,
            network: false,
            writable: [
                "~/.cargo",
                "~/.rustup",
                "~/.cache",
                "~/go",
                "~/.npm",
                "~/.local/share/virtualenvs",
            ]
            .map(String::from)
            .to_vec(),
            deny_read: [
                "~/.ssh",
                "~/.gnupg",
                "~/.aws",
                "~/.netrc",
                "~/.config/agent-ls",
                "~/.local/state/agent-ls",
            ]
            .map(String::from)
            .to_vec(),
            max_processes: 512,
            max_memory_mb: default_memory_mb(),
            max_cpu_secs: 600,
            max_file_mb: 1024,
            run_as: String::new(),
        }
    }
}

/// The hidden subcommand of our binary that confines itself and runs a command.
pub const SUBCOMMAND: &str = "sandbox-run";
/// The helper's exit code when it could not set the sandbox up; its stderr says why.
pub const REFUSED: i32 = 125;
/// The first words of the helper's own messages on stderr.
pub const MARK: &str = "agent-ls sandbox:";

/// The line the helper writes on stderr when the command hit `limit`.
pub fn limit_line(limit: limits::Limit) -> String {
    format!("{} limit {} {}", MARK, limit.kind.word(), limit.max)
}

/// The limit a helper's stderr names, if it named one.
pub fn limit_named(stderr: &str) -> Option<limits::Limit> {
    stderr.lines().find_map(|l| {
        let rest = l.strip_prefix(MARK)?.trim().strip_prefix("limit ")?;
        let (word, max) = rest.split_once(' ')?;
        Some(limits::Limit {
            kind: limits::LimitKind::from_word(word)?,
            max: max.trim().parse().ok()?,
        })
    })
}

/// Why `probe` found that no command can run confined.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("cannot start {program}: {source}")]
    Start {
        program: String,
        source: std::io::Error,
    },
    /// The helper refused: its own message.
    #[error("{0}")]
    Refused(String),
}

/// A helper command line that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0} needs a value")]
    NeedsValue(String),
    #[error("unknown argument {0}")]
    Unknown(String),
    #[error(
        "usage: agent-ls sandbox-run --workspace DIR [--write DIR]... [--deny-read DIR]... [--network] [--run-as USER] [--limit KIND=N]... -- COMMAND..."
    )]
    Usage,
}

/// Why the helper cannot confine itself, so nothing runs.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot set up Landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    #[error(
        "Landlock is built into this kernel but not enabled (add `landlock` to the lsm= boot parameter); commands do not run unsandboxed unless the user file sets sandbox.mode = \"off\""
    )]
    NotEnabled,
    #[error(
        "this kernel has no Landlock; commands do not run unsandboxed unless the user file sets sandbox.mode = \"off\""
    )]
    NotImplemented,
    #[error(
        "this kernel's Landlock (ABI {0}) cannot deny network access, which needs ABI 4; allow it with sandbox.network = true, or set sandbox.mode = \"off\" in the user file"
    )]
    NoNetworkRules(i32),
    #[error(
        "this kernel's Landlock (ABI {0}) cannot keep commands from truncating files outside the workspace, which needs ABI 3; commands do not run unsandboxed unless the user file sets sandbox.mode = \"off\""
    )]
    NoTruncateRules(i32),
    #[error(
        "Landlock rules were not enforced; commands do not run unsandboxed unless the user file sets sandbox.mode = \"off\""
    )]
    NotEnforced,
}

/// How commands are confined, resolved from the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub mode: SandboxMode,
    /// The binary that runs `sandbox-run` (ours).
    pub helper: PathBuf,
    pub network: bool,
    pub writable: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub limits: Limits,
    /// `sandbox.run_as`: the user root's commands run as (empty: uid 0, no capabilities).
    pub run_as: String,
}

/// `~` and `~/x` as the home folder.
fn expand(path: &str) -> Option<PathBuf> {
    match path.strip_prefix('~') {
        Some(rest) => {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(rest.trim_start_matches('/')))
        }
        None => Some(PathBuf::from(path)),
    }
}

/// agent-ls's own configuration and state folders where `XDG_CONFIG_HOME` and
/// `XDG_STATE_HOME` move them away from the `~/.config` and `~/.local/state` the default
/// `deny_read` names: the user file holds keys, whatever `deny_read` says.
fn own_folders() -> Vec<PathBuf> {
    ["XDG_CONFIG_HOME", "XDG_STATE_HOME"]
        .iter()
        .filter_map(std::env::var_os)
        .map(PathBuf::from)
        .filter(|base| base.is_absolute())
        .map(|base| base.join("agent-ls"))
        .collect()
}

/// Why this kernel offers no Landlock ABI: commands confined with it cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NoLandlock {
    /// The kernel has Landlock, but it is not among the enabled security modules (`lsm=`).
    #[error("Landlock is built into this kernel but not enabled")]
    Disabled,
    #[error("this kernel has no Landlock")]
    Missing,
}

/// The Landlock ABI this kernel offers, or why there is none.
pub fn landlock_abi() -> Result<i32, NoLandlock> {
    // The landlock crate keeps its own probe private, and this is one system call with no
    // pointer read: LANDLOCK_CREATE_RULESET_VERSION (1) with no attributes returns the ABI.
    // SAFETY: a null attribute pointer with size 0 is the documented form of this query.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    if v >= 1 {
        Ok(v as i32)
    } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP) {
        Err(NoLandlock::Disabled)
    } else {
        Err(NoLandlock::Missing)
    }
}

/// Logs, once per process, the ABI commands will be confined with.
fn log_abi(mode: SandboxMode) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| match (mode, landlock_abi()) {
        (SandboxMode::Off, _) => tracing::warn!("sandbox.mode is \"off\": commands run unconfined"),
        (_, Ok(abi)) => tracing::info!("commands run in a Landlock sandbox (kernel ABI {abi})"),
        (_, Err(why)) => tracing::warn!("{why}: commands will not run (sandbox.mode = \"off\" in the user file runs them unconfined)"),
    });
}

impl Sandbox {
    /// The sandbox the configuration asks for, run by this very binary.
    pub fn from_config(config: &SandboxConfig) -> Sandbox {
        log_abi(config.mode);
        Sandbox::with_helper(
            config,
            std::env::current_exe().unwrap_or_else(|_| PathBuf::from("agent-ls")),
        )
    }

    pub fn with_helper(config: &SandboxConfig, helper: PathBuf) -> Sandbox {
        Sandbox {
            mode: config.mode,
            helper,
            network: config.network,
            writable: config.writable.iter().filter_map(|p| expand(p)).collect(),
            deny_read: config
                .deny_read
                .iter()
                .filter_map(|p| expand(p))
                .chain(own_folders())
                .collect(),
            limits: Limits {
                processes: config.max_processes,
                memory_mb: config.max_memory_mb,
                cpu_secs: config.max_cpu_secs,
                file_mb: config.max_file_mb,
            },
            run_as: config.run_as.clone(),
        }
    }

    /// Runs a command under this sandbox for `agent-ls doctor`: what confines commands here,
    /// or why none can run.
    pub fn probe(&self, root: &Path) -> Result<String, ProbeError> {
        if self.mode == SandboxMode::Off {
            return Ok("sandbox.mode is \"off\": commands run unconfined".into());
        }
        let argv = self.wrap(
            root,
            &[
                self.helper.to_string_lossy().into_owned(),
                "--version".into(),
            ],
        );
        let start = |source| ProbeError::Start {
            program: argv[0].clone(),
            source,
        };
        let child = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(root)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(start)?;
        let helper = child.id();
        let out = child.wait_with_output().map_err(start)?;
        // The group the helper made, which it could not remove once confined.
        limits::remove_group(helper);
        if out.status.success() {
            let abi = landlock_abi().map_or_else(|e| e.to_string(), |a| format!("ABI {a}"));
            Ok(format!(
                "a command ran under Landlock ({abi}); network {}",
                if self.network { "allowed" } else { "denied" }
            ))
        } else {
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err(ProbeError::Refused(
                stderr
                    .lines()
                    .find_map(|l| l.strip_prefix(MARK))
                    .map_or_else(|| stderr.trim().to_string(), |l| l.trim().to_string()),
            ))
        }
    }

    /// For `agent-ls doctor`: how the limits and privileges are enforced here, and what is not.
    pub fn describe_limits(&self) -> String {
        if self.mode == SandboxMode::Off {
            return "sandbox.mode is \"off\": no limit is enforced".into();
        }
        format!(
            "{}; every capability dropped and no_new_privs set{}; UDP and raw sockets {}",
            limits::describe(&self.limits),
            as_root(&self.run_as),
            if self.network {
                "allowed (sandbox.network)"
            } else {
                "refused by seccomp"
            }
        )
    }
}

/// For `describe_limits`: who root's commands run as, and why not in a user namespace.
fn as_root(run_as: &str) -> String {
    let root =
        std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    match (root, run_as.is_empty()) {
        (false, _) => String::new(),
        (true, false) => format!(" (as root: commands run as {run_as}, sandbox.run_as)"),
        (true, true) => " (as root: commands run as uid 0 without capabilities, NOT as an unprivileged user: not in a user namespace, since an id mapped outside could neither write a root-owned workspace nor read root's toolchains; set sandbox.run_as to a user who can)".into(),
    }
}

impl Sandbox {
    /// The command line that runs `argv` in `root` under this sandbox.
    pub fn wrap(&self, root: &Path, argv: &[String]) -> Vec<String> {
        if self.mode == SandboxMode::Off {
            return argv.to_vec();
        }
        let mut out = vec![
            self.helper.to_string_lossy().into_owned(),
            SUBCOMMAND.to_string(),
            "--workspace".into(),
            root.to_string_lossy().into_owned(),
        ];
        for w in &self.writable {
            out.push("--write".into());
            out.push(w.to_string_lossy().into_owned());
        }
        for d in &self.deny_read {
            out.push("--deny-read".into());
            out.push(d.to_string_lossy().into_owned());
        }
        if self.network {
            out.push("--network".into());
        }
        if !self.run_as.is_empty() {
            out.push("--run-as".into());
            out.push(self.run_as.clone());
        }
        out.extend(self.limits.args());
        out.push("--".into());
        out.extend(argv.iter().cloned());
        out
    }
}

/// What the helper is told on its command line.
#[derive(Debug, Default)]
pub struct Policy {
    pub workspace: PathBuf,
    pub write: Vec<PathBuf>,
    pub deny_read: Vec<PathBuf>,
    pub network: bool,
    pub limits: Limits,
    /// The user to run as (root only), as `--run-as` names it.
    pub run_as: Option<String>,
    pub argv: Vec<String>,
}

impl Policy {
    /// Reads `--workspace DIR [--write DIR]... [--deny-read DIR]... [--network] -- ARGV...`.
    pub fn parse(args: &[String]) -> Result<Policy, PolicyError> {
        let mut p = Policy::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = || {
                it.next()
                    .map(PathBuf::from)
                    .ok_or_else(|| PolicyError::NeedsValue(a.clone()))
            };
            match a.as_str() {
                "--workspace" => p.workspace = value()?,
                "--write" => p.write.push(value()?),
                "--deny-read" => p.deny_read.push(value()?),
                "--network" => p.network = true,
                "--run-as" => p.run_as = Some(value()?.to_string_lossy().into_owned()),
                "--limit" => {
                    let v = it
                        .next()
                        .ok_or_else(|| PolicyError::NeedsValue(a.clone()))?;
                    if !p.limits.set(v) {
                        return Err(PolicyError::Unknown(format!("--limit {v}")));
                    }
                }
                "--" => {
                    p.argv = it.cloned().collect();
                    break;
                }
                other => return Err(PolicyError::Unknown(other.into())),
            }
        }
        if p.argv.is_empty() || p.workspace.as_os_str().is_empty() {
            return Err(PolicyError::Usage);
        }
        Ok(p)
    }
}

/// The helper's whole life: confine itself, run the command, end its tree, and exit with the
/// command's status (or `REFUSED`, saying why on stderr).
pub fn helper_main(args: &[String]) -> i32 {
    let policy = match Policy::parse(args) {
        Ok(p) => p,
        Err(why) => {
            eprintln!("{MARK} {why}");
            return REFUSED;
        }
    };
    // Orphans of the command (a `setsid` child whose parent left) become our children, so
    // they are still ours to end.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("{MARK} cannot become a child subreaper: {e}");
        return REFUSED;
    }
    // The group first: once confined, the helper can no longer write the cgroup files.
    let group = Group::join(&policy.limits);
    if let Err(why) = confine(&policy) {
        eprintln!("{MARK} {why}");
        return REFUSED;
    }
    if let Err(why) = give_up(&policy) {
        eprintln!("{MARK} {why}");
        return REFUSED;
    }
    supervise(&policy, group.as_ref())
}

/// Why the helper would not start a command: a limit or a privilege it could not give up.
#[derive(Debug, thiserror::Error)]
enum GiveUpError {
    #[error(transparent)]
    Limit(#[from] limits::LimitError),
    #[error(transparent)]
    Privilege(#[from] super::privileges::PrivilegeError),
}

/// After Landlock: the rlimits, every capability (and, as root with `sandbox.run_as`, root
/// itself), and (unless the network is allowed) UDP and raw sockets.
fn give_up(policy: &Policy) -> Result<(), GiveUpError> {
    let user = match &policy.run_as {
        Some(name) => super::privileges::user(name)?,
        None => None,
    };
    limits::apply_rlimits(&policy.limits, user.as_ref().map(|u| u.uid.as_raw()))?;
    super::privileges::drop_all(user.as_ref())?;
    if !policy.network {
        super::privileges::refuse_datagrams()?;
    }
    Ok(())
}

/// Applies the Landlock rules to this process (and so to all it starts), returning the ABI
/// the kernel gave. Fails closed: when the kernel cannot enforce them all, nothing runs.
fn confine(policy: &Policy) -> Result<String, ConfineError> {
    use landlock::{ABI, Access, AccessFs, BitFlags, PathBeneath, PathFd, RulesetCreatedAttr};
    let abi = ABI::V5;
    let mut created = ruleset(policy, abi)?;
    // A rule on a file takes only the rights a file can have, or the rule set counts as
    // partly enforced.
    let for_path = |path: &Path, rights: BitFlags<AccessFs>| {
        if path.is_dir() {
            rights
        } else {
            rights & AccessFs::from_file(abi)
        }
    };
    let readable = readable_roots(&policy.deny_read)
        .into_iter()
        .map(|p| (p, AccessFs::from_read(abi)));
    // A denied folder inside a writable one (the workspace, a cache): the writable folder is
    // allowed around it, its siblings whole and the folders on the way to it without reading
    // files (so none in the denied folder); their listing stays, which test runners need to
    // find tests, so the denied folder's names can be listed, not read.
    let (writable, on_the_way) = around(writable(policy), &policy.deny_read);
    let write_only = AccessFs::from_all(abi) & !AccessFs::from_read(abi) | AccessFs::ReadDir;
    let writable = writable
        .into_iter()
        .map(|p| (p, AccessFs::from_all(abi)))
        .chain(on_the_way.into_iter().map(|p| (p, write_only)));
    for (path, rights) in readable.chain(writable) {
        if let Ok(fd) = PathFd::new(&path) {
            let rights = for_path(&path, rights);
            created = created.add_rule(PathBeneath::new(fd, rights))?;
        }
    }
    enforced(created.restrict_self()?, policy)
}

/// The rule set before any path is allowed: every file access is handled (so denied unless a
/// rule allows it), and TCP too unless the policy allows the network.
fn ruleset(policy: &Policy, abi: landlock::ABI) -> Result<landlock::RulesetCreated, ConfineError> {
    use landlock::{ABI, Access, AccessFs, AccessNet, Ruleset, RulesetAttr, Scope};
    let mut ruleset = Ruleset::default().handle_access(AccessFs::from_all(abi))?;
    if !policy.network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    // A test may not signal processes outside its sandbox (the editor, the server) nor reach
    // their abstract Unix sockets (a desktop session's bus). ABI 6; older kernels go without.
    Ok(ruleset.scope(Scope::from_all(ABI::V6))?.create()?)
}

/// The paths a command may write: the workspace, the temporary folder, `sandbox.write`, and
/// the devices and shared folders programs expect to write.
fn writable(policy: &Policy) -> Vec<PathBuf> {
    let mut writable = vec![policy.workspace.clone(), std::env::temp_dir()];
    for w in &policy.write {
        // Landlock grants only a folder that exists, and on a fresh machine a tool's cache
        // (`~/.cache` for Go's build cache) does not yet: it is made now, as the tool would
        // have made it unconfined, so the first test run does not fail on it.
        if !w.exists() {
            let _ = std::fs::create_dir_all(w);
        }
    }
    writable.extend(policy.write.iter().cloned());
    writable.extend(
        [
            "/dev/null",
            "/dev/zero",
            "/dev/full",
            "/dev/random",
            "/dev/urandom",
            "/dev/tty",
            "/dev/ptmx",
            "/dev/pts",
            "/dev/shm",
            "/var/tmp",
        ]
        .map(PathBuf::from),
    );
    writable
}

/// Whether what the kernel enforced is enough to run under: the ABI it gave, or why not.
fn enforced(status: landlock::RestrictionStatus, policy: &Policy) -> Result<String, ConfineError> {
    use landlock::{LandlockStatus, RulesetStatus};
    let kernel = match status.landlock {
        LandlockStatus::Available { effective_abi, .. } => effective_abi as i32,
        LandlockStatus::NotEnabled => return Err(ConfineError::NotEnabled),
        LandlockStatus::NotImplemented => return Err(ConfineError::NotImplemented),
    };
    // ABI 4 enforces the network rules and the denial of truncating files outside the
    // writable folders; what later ABIs add (device ioctls, scopes) is taken where present.
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(kernel.to_string()),
        RulesetStatus::PartiallyEnforced if kernel >= 4 || (kernel == 3 && policy.network) => {
            Ok(kernel.to_string())
        }
        RulesetStatus::PartiallyEnforced if kernel == 3 => {
            Err(ConfineError::NoNetworkRules(kernel))
        }
        RulesetStatus::PartiallyEnforced => Err(ConfineError::NoTruncateRules(kernel)),
        RulesetStatus::NotEnforced => Err(ConfineError::NotEnforced),
    }
}

/// The folders to allow reading: everything under `/` but the denied paths, expressed as the
/// siblings along the way to each (Landlock only allows, so a denial is the absence of a rule).
fn readable_roots(deny: &[PathBuf]) -> Vec<PathBuf> {
    around(vec![PathBuf::from("/")], deny).0
}

/// `roots` with each denied path cut out: a root holding one is replaced by the siblings of
/// each folder on the way down to it. Returns those roots, and the folders on the way (the
/// replaced roots and their descendants that lead to a denied path).
fn around(roots: Vec<PathBuf>, deny: &[PathBuf]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let denied: Vec<PathBuf> = deny
        .iter()
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| d.parent().is_some())
        .collect();
    let mut roots: Vec<PathBuf> = roots
        .into_iter()
        .map(|r| r.canonicalize().unwrap_or(r))
        .collect();
    let mut on_the_way = Vec::new();
    for d in &denied {
        // A root that is itself denied is not allowed at all.
        roots.retain(|r| !r.starts_with(d));
        // Every root that holds it: the workspace sits in the temp folder, say.
        while let Some(at) = roots.iter().position(|r| d.starts_with(r) && d != r) {
            let root = roots.remove(at);
            let mut dir = root;
            for component in d
                .strip_prefix(&dir)
                .map(|p| p.to_path_buf())
                .unwrap_or_default()
                .components()
            {
                let next = dir.join(component);
                if let Ok(entries) = std::fs::read_dir(&dir) {
                    roots.extend(
                        entries
                            .flatten()
                            .map(|e| e.path())
                            .filter(|p| *p != next && !denied.contains(p)),
                    );
                }
                on_the_way.push(dir);
                dir = next;
            }
        }
    }
    (roots, on_the_way)
}

/// Runs the command and waits for it, ending every descendant when it ends or when we are
/// told to stop (SIGTERM, SIGINT, or agent-ls's own end: the command's tree gets SIGTERM,
/// then SIGKILL a second later). Returns the command's exit status as a shell would.
fn supervise(policy: &Policy, group: Option<&Group>) -> i32 {
    let signals = match listen() {
        Ok(s) => s,
        Err(why) => {
            eprintln!("{MARK} {why}");
            return REFUSED;
        }
    };
    match start(policy) {
        Ok(child) => {
            let (status, signal) = wait_tree(child, &signals);
            // A limit the command hit is named, so the run reads as stopped, not failed.
            let hit = group
                .and_then(Group::hit)
                .or_else(|| signal.and_then(|s| limits::limit_of_signal(s, &policy.limits)));
            if let Some(limit) = hit {
                eprintln!("{}", limit_line(limit));
            }
            status
        }
        Err(status) => status,
    }
}

/// Why the helper cannot watch over a command, so it starts none.
#[derive(Debug, thiserror::Error)]
enum Unwatched {
    #[error("cannot block signals: {0}")]
    Block(nix::Error),
    #[error("cannot ask to hear of agent-ls's end: {0}")]
    DeathSignal(nix::Error),
    #[error("agent-ls ended before the command started")]
    Orphaned,
    #[error("cannot watch signals: {0}")]
    SignalFd(nix::Error),
}

/// The descriptor the helper reads SIGTERM, SIGINT and SIGCHLD from, those signals blocked,
/// and SIGTERM asked for when agent-ls ends.
fn listen() -> Result<nix::sys::signalfd::SignalFd, Unwatched> {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        mask.add(s);
    }
    // Blocked here and read from a descriptor instead; the command starts with an empty mask
    // and default dispositions (`child::start_clean`), since exec keeps both.
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None).map_err(Unwatched::Block)?;
    // When agent-ls dies, even of SIGKILL, the kernel sends us SIGTERM, which ends the tree
    // below like any SIGTERM. (It is sent when the thread that started us ends; agent-ls
    // starts helpers from its runtime's threads, which live as long as the process.) A parent
    // gone before this line left us to init already: then nothing is started at all.
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).map_err(Unwatched::DeathSignal)?;
    if nix::unistd::getppid().as_raw() == 1 {
        return Err(Unwatched::Orphaned);
    }
    SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK).map_err(Unwatched::SignalFd)
}

/// Starts the command, or gives the status a shell gives a command that cannot start.
fn start(policy: &Policy) -> Result<std::process::Child, i32> {
    let Some((program, args)) = policy.argv.split_first() else {
        eprintln!("{MARK} no command to run");
        return Err(REFUSED);
    };
    let mut command = std::process::Command::new(program);
    command.args(args);
    // The signals blocked by `listen`, and SIGPIPE that Rust ignores, would be the command's
    // too.
    crate::child::start_clean(&mut command);
    command.spawn().map_err(|e| {
        eprintln!("{program}: {e}");
        if e.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        }
    })
}

/// Waits for the command, passing a stop on to its whole tree (SIGTERM, then SIGKILL a second
/// later) and reaping orphans meanwhile; ends the rest of the tree once the command ends.
/// The command's status as a shell gives it, and the first signal that a limit sends
/// (SIGXCPU, SIGXFSZ) that ended a process of the tree.
fn wait_tree(
    mut child: std::process::Child,
    signals: &nix::sys::signalfd::SignalFd,
) -> (i32, Option<i32>) {
    use nix::sys::signal::Signal;
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};
    let mut kill_at: Option<Instant> = None;
    let mut limit_signal = None;
    loop {
        let timeout = kill_at.map_or(nix::poll::PollTimeout::NONE, |at| {
            let left = at.saturating_duration_since(Instant::now());
            nix::poll::PollTimeout::try_from(left.as_millis().min(10_000) as i32)
                .unwrap_or(nix::poll::PollTimeout::ZERO)
        });
        let mut fds = [nix::poll::PollFd::new(
            std::os::fd::AsFd::as_fd(signals),
            nix::poll::PollFlags::POLLIN,
        )];
        let _ = nix::poll::poll(&mut fds, timeout);
        while let Ok(Some(info)) = signals.read_signal() {
            if info.ssi_signo == Signal::SIGTERM as u32 || info.ssi_signo == Signal::SIGINT as u32 {
                signal_tree(Signal::SIGTERM);
                kill_at.get_or_insert(Instant::now() + Duration::from_secs(1));
            }
        }
        if kill_at.is_some_and(|at| Instant::now() >= at) {
            signal_tree(Signal::SIGKILL);
        }
        // Reap whatever ended; the command's own end ends the rest.
        if let Ok(Some(status)) = child.try_wait() {
            signal_tree(Signal::SIGKILL);
            reap_all();
            let code = status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(9));
            return (
                code,
                status
                    .signal()
                    .filter(|s| is_limit_signal(*s))
                    .or(limit_signal),
            );
        }
        limit_signal = limit_signal.or(reap_others(child.id()));
    }
}

/// Sends `signal` to every descendant of this process.
fn signal_tree(signal: nix::sys::signal::Signal) {
    let me = std::process::id();
    for pid in descendants(me) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
    }
}

/// Every process below `root`, from the parent links in /proc.
fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // The field after the command name, which may hold spaces and parentheses.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
                parent_of.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parent_of {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// Reaps every ended child but `keep` (orphans that came to us as the subreaper); the
/// limit signal that ended one, if one did.
fn reap_others(keep: u32) -> Option<i32> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut limit = None;
    for pid in descendants(std::process::id()) {
        if pid == keep {
            continue;
        }
        // Not our child (a grandchild) is simply ECHILD.
        let status = waitpid(
            nix::unistd::Pid::from_raw(pid as i32),
            Some(WaitPidFlag::WNOHANG),
        );
        if let Ok(WaitStatus::Signaled(_, s, _)) = status
            && is_limit_signal(s as i32)
        {
            limit = Some(s as i32);
        }
    }
    limit
}

/// SIGXCPU and SIGXFSZ: what the kernel sends at the CPU time and file size limits.
fn is_limit_signal(signal: i32) -> bool {
    signal == libc::SIGXCPU || signal == libc::SIGXFSZ
}

/// Waits (a second at most) for every remaining child to end after the last SIGKILL.
fn reap_all() {
    use nix::sys::wait::{WaitPidFlag, waitpid};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    while std::time::Instant::now() < deadline {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) => {
                signal_tree(nix::sys::signal::Signal::SIGKILL);
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(_) => {}
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_reads_back_what_wrap_writes() {
        let s = Sandbox {
            mode: SandboxMode::Landlock,
            helper: "/bin/agent-ls".into(),
            network: true,
            writable: vec!["/c".into()],
            deny_read: vec!["/secret".into()],
            limits: Limits {
                processes: 64,
                ..Limits::default()
            },
            run_as: "nobody".into(),
        };
        let argv = s.wrap(Path::new("/ws"), &["cargo".into(), "test".into()]);
        assert_eq!(argv[1], SUBCOMMAND);
        let p = Policy::parse(&argv[2..]).unwrap();
        assert_eq!(p.workspace, PathBuf::from("/ws"));
        assert_eq!(p.write, [PathBuf::from("/c")]);
        assert_eq!(p.deny_read, [PathBuf::from("/secret")]);
        assert!(p.network);
        assert_eq!(p.limits.processes, 64);
        assert_eq!(p.run_as.as_deref(), Some("nobody"));
        let line = limit_line(p.limits.limit(limits::LimitKind::Processes));
        let named = limit_named(&format!("noise\n{line}\n")).unwrap();
        assert_eq!(named.max, 64);
        assert_eq!(p.argv, ["cargo", "test"]);
        let off = Sandbox {
            mode: SandboxMode::Off,
            ..s
        };
        assert_eq!(off.wrap(Path::new("/ws"), &["x".into()]), ["x"]);
    }

    #[test]
    fn denied_folders_are_left_out_of_the_readable_roots() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("home/me/.ssh");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::create_dir_all(dir.path().join("home/me/src")).unwrap();
        let roots = readable_roots(std::slice::from_ref(&secret));
        let secret = secret.canonicalize().unwrap();
        assert!(!roots.iter().any(|r| secret.starts_with(r)), "{roots:?}");
        let src = dir.path().join("home/me/src").canonicalize().unwrap();
        assert!(roots.iter().any(|r| src.starts_with(r)), "{roots:?}");
        // Inside a writable root: allowed around it, the way to it without reading.
        let home = dir.path().join("home").canonicalize().unwrap();
        let (writable, way) = around(vec![home.clone()], std::slice::from_ref(&secret));
        assert!(
            !writable.iter().any(|r| secret.starts_with(r)),
            "{writable:?}"
        );
        assert!(writable.iter().any(|r| src.starts_with(r)), "{writable:?}");
        assert_eq!(way, [home.clone(), home.join("me")]);
    }
}
