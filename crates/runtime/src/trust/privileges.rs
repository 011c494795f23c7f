//! What the sandbox helper gives up before it starts a command, beyond Landlock: every
//! capability (bounding, ambient, inheritable, permitted, effective) and the right to gain
//! any (`no_new_privs`), so that root's command is an ordinary process that cannot read
//! agent-ls's environment or memory; and, unless the network is allowed, UDP and raw sockets,
//! refused by a seccomp filter since Landlock's network rules cover only TCP.

/// Why the helper could not give something up, so nothing runs.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    #[error("cannot drop capabilities: {0}")]
    Caps(#[from] caps::errors::CapsError),
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(nix::Error),
    #[error("cannot install the seccomp filter that refuses UDP and raw sockets: {0}")]
    Seccomp(#[from] seccompiler::Error),
    #[error("cannot build the seccomp filter that refuses UDP and raw sockets: {0}")]
    SeccompRule(#[from] seccompiler::BackendError),
    #[error("seccomp does not know this architecture ({0})")]
    Arch(String),
    #[error("sandbox.run_as: no user `{0}` on this machine")]
    NoUser(String),
    #[error("sandbox.run_as = \"{0}\" needs agent-ls to run as root, and it does not")]
    NotRoot(String),
    #[error("sandbox.run_as: `{0}` is root; name an unprivileged user")]
    RunAsRoot(String),
    #[error("cannot become `{user}` (sandbox.run_as): {source}")]
    Switch { user: String, source: nix::Error },
}

/// The user `name` names (a user name or a numeric uid) for `sandbox.run_as`, or `None`
/// where no switch is needed: not root, and `name` is this very user. Refused: a user that
/// does not exist, root itself, and another user when agent-ls is not root.
pub fn user(name: &str) -> Result<Option<nix::unistd::User>, PrivilegeError> {
    use nix::unistd::{Uid, User, getuid};
    let found = match name.parse::<u32>() {
        Ok(uid) => User::from_uid(Uid::from_raw(uid)),
        Err(_) => User::from_name(name),
    }
    .ok()
    .flatten()
    .ok_or_else(|| PrivilegeError::NoUser(name.into()))?;
    if found.uid.is_root() {
        return Err(PrivilegeError::RunAsRoot(name.into()));
    }
    match (getuid().is_root(), found.uid == getuid()) {
        (true, _) => Ok(Some(found)),
        (false, true) => Ok(None),
        (false, false) => Err(PrivilegeError::NotRoot(name.into())),
    }
}

/// Drops every capability of this thread (so of the command it starts) and sets
/// `no_new_privs`, so that neither a setuid program nor file capabilities give any back; as
/// root with `sandbox.run_as`, becomes `user` first (no supplementary group kept).
pub fn drop_all(user: Option<&nix::unistd::User>) -> Result<(), PrivilegeError> {
    use caps::{CapSet, Capability};
    nix::sys::prctl::set_no_new_privs().map_err(PrivilegeError::NoNewPrivs)?;
    // The bounding set can be lowered only with CAP_SETPCAP; without it, there is nothing
    // an exec could raise anyway (no_new_privs).
    if caps::has_cap(None, CapSet::Effective, Capability::CAP_SETPCAP)? {
        caps::clear(None, CapSet::Bounding)?;
    }
    if let Some(u) = user {
        let switch = |source| PrivilegeError::Switch {
            user: u.name.clone(),
            source,
        };
        // Groups first: once the uid is not root, the groups cannot change.
        nix::unistd::setgroups(&[]).map_err(switch)?;
        nix::unistd::setresgid(u.gid, u.gid, u.gid).map_err(switch)?;
        nix::unistd::setresuid(u.uid, u.uid, u.uid).map_err(switch)?;
    }
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set)?;
    }
    Ok(())
}

/// Installs a seccomp filter refusing (EPERM) sockets of the IPv4, IPv6 and packet families
/// that are not streams: UDP, ICMP and raw sockets. Unix sockets and TCP (which Landlock
/// rules) are untouched.
pub fn refuse_datagrams() -> Result<(), PrivilegeError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| PrivilegeError::Arch(std::env::consts::ARCH.into()))?;
    let family =
        |f: i32| SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, f as u64);
    // The type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC ride above them.
    let kind = |t: i32| {
        SeccompCondition::new(
            1,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(0xf),
            t as u64,
        )
    };
    let mut rules = Vec::new();
    for f in [libc::AF_INET, libc::AF_INET6] {
        for t in [libc::SOCK_DGRAM, libc::SOCK_RAW] {
            rules.push(SeccompRule::new(vec![family(f)?, kind(t)?])?);
        }
    }
    rules.push(SeccompRule::new(vec![family(libc::AF_PACKET)?])?);
    let filter = SeccompFilter::new(
        [(libc::SYS_socket, rules)].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )?;
    let program: seccompiler::BpfProgram = filter.try_into()?;
    seccompiler::apply_filter(&program)?;
    Ok(())
}
