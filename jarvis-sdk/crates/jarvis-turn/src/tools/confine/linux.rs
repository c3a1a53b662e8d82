//! The Linux half of confinement: capabilities, Landlock and seccomp,
//! applied to the calling thread (see the module above for what they
//! promise).

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Confinement, Reach, SYSTEM_READ};

/// The Landlock ABI whose rules make confinement full here: 6 (Linux
/// 6.12) has every right used (files, device ioctls, TCP, scopes); 9 (Linux
/// 7.1) adds Unix socket files, used when the kernel has it.
const BASE_ABI: ABI = ABI::V6;
/// The ABI that also confines connections to Unix socket files.
const UNIX_SOCKET_ABI: ABI = ABI::V9;

/// Directories under `/etc` that hold secrets: listed entry by entry, the
/// secrets left out.
const SECRET_PARENTS: [&str; 4] = ["/etc", "/etc/ssh", "/etc/ssl", "/etc/security"];

/// Whether `path` (under one of [`SECRET_PARENTS`]) is a secret no program
/// may read.
fn is_secret(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    match path.parent().and_then(Path::to_str) {
        Some("/etc") => matches!(
            name,
            "shadow" | "shadow-" | "gshadow" | "gshadow-" | "sudoers" | "sudoers.d"
        ),
        Some("/etc/ssh") => name.starts_with("ssh_host_") && name.ends_with("_key"),
        Some("/etc/ssl") => name == "private",
        Some("/etc/security") => name == "opasswd",
        _ => false,
    }
}

/// What the probe found about this kernel.
#[derive(Debug, Clone)]
pub(super) struct Probe {
    landlock: LandlockStatus,
    seccomp: Result<(), String>,
}

/// The Landlock ABI the rulesets ask for on this kernel.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target {
    abi: ABI,
    effective: Option<ABI>,
}

impl Probe {
    pub(super) fn target(&self) -> Target {
        let effective = match self.landlock {
            LandlockStatus::Available { effective_abi, .. } => Some(effective_abi),
            _ => None,
        };
        let abi = match effective {
            Some(abi) if abi >= UNIX_SOCKET_ABI => UNIX_SOCKET_ABI,
            _ => BASE_ABI,
        };
        Target { abi, effective }
    }

    pub(super) fn confinement(&self) -> Confinement {
        let mut gaps = Vec::new();
        match self.target().effective {
            None => gaps.push(lacks_landlock()),
            Some(abi) if abi < BASE_ABI => gaps.push(old_landlock(abi)),
            Some(_) => {}
        }
        if let Err(error) = &self.seccomp {
            gaps.push(format!(
                "kernel lacks seccomp ({error}), so the network stays reachable"
            ));
        }
        Confinement::lacking(gaps)
    }
}

fn lacks_landlock() -> String {
    "kernel lacks Landlock".to_owned()
}

fn old_landlock(abi: ABI) -> String {
    format!(
        "the kernel's Landlock ABI {} enforces only part of the rules (ABI {} is needed for all)",
        abi as i32, BASE_ABI as i32
    )
}

/// Finds out, on a throwaway thread, what Landlock and seccomp can do here.
pub(super) fn probe() -> &'static Probe {
    static PROBE: std::sync::OnceLock<Probe> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        std::thread::Builder::new()
            .name("jarvis-confine-probe".into())
            .spawn(|| {
                let landlock = Ruleset::default()
                    .handle_access(AccessFs::from_all(ABI::V1))
                    .and_then(Ruleset::create)
                    .and_then(RulesetCreated::restrict_self)
                    .map(|status| status.landlock)
                    .unwrap_or(LandlockStatus::NotImplemented);
                let seccomp = seccomp_filter(&[io_uring_setup()])
                    .and_then(|filter| seccompiler::apply_filter(&filter).map_err(|e| e.to_string()));
                Probe { landlock, seccomp }
            })
            .ok()
            .and_then(|thread| thread.join().ok())
            .unwrap_or(Probe {
                landlock: LandlockStatus::NotImplemented,
                seccomp: Err("the probe could not run".into()),
            })
    })
}

/// Restricts the calling thread (and so every process it starts from now
/// on) to `reach`. Never fails: what could not be enforced is reported.
pub(super) fn confine_this_thread(reach: &Reach, target: Target) -> Confinement {
    let mut gaps = Vec::new();
    if let Err(error) = drop_capabilities() {
        gaps.push(format!("the capabilities could not be dropped ({error})"));
    }
    match landlock(reach, target) {
        Ok(status) => {
            if !status.no_new_privs {
                gaps.push("no_new_privs could not be set".to_owned());
            }
            match status.ruleset {
                RulesetStatus::FullyEnforced => {}
                RulesetStatus::PartiallyEnforced => gaps.push(match target.effective {
                    Some(abi) => old_landlock(abi),
                    None => "Landlock enforces only part of the rules".to_owned(),
                }),
                RulesetStatus::NotEnforced => gaps.push(lacks_landlock()),
            }
        }
        Err(error) => gaps.push(format!("the Landlock ruleset failed ({error})")),
    }
    if !reach.network {
        let applied = seccomp_filter(&[socket(), io_uring_setup()])
            .and_then(|filter| seccompiler::apply_filter(&filter).map_err(|e| e.to_string()));
        if let Err(error) = applied {
            gaps.push(format!(
                "kernel lacks seccomp ({error}), so the network stays reachable"
            ));
        }
    }
    Confinement::lacking(gaps)
}

/// Empties the thread's capability sets: with `no_new_privs`, a program
/// it starts gets none back, even as root.
fn drop_capabilities() -> std::io::Result<()> {
    use rustix::thread::{CapabilitySet, CapabilitySets, set_capabilities};
    set_capabilities(
        None,
        CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(std::io::Error::from)
}

/// Builds and applies the Landlock ruleset for `reach`.
fn landlock(reach: &Reach, target: Target) -> Result<landlock::RestrictionStatus, landlock::RulesetError> {
    let abi = target.abi;
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::from_all(abi))?;
    if !reach.network {
        ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
    }
    let mut rules: Vec<(PathBuf, landlock::BitFlags<AccessFs>)> = vec![(reach.sandbox.clone(), all)];
    rules.extend(SYSTEM_READ.iter().map(|p| (PathBuf::from(p), read)));
    rules.extend(etc_without_secrets().into_iter().map(|p| (p, read)));
    rules.push((PathBuf::from("/proc"), AccessFs::ReadFile | AccessFs::ReadDir));
    rules.push((
        PathBuf::from("/dev/null"),
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev,
    ));
    for device in ["/dev/zero", "/dev/random", "/dev/urandom"] {
        rules.push((PathBuf::from(device), AccessFs::ReadFile.into()));
    }
    rules.extend(reach.read.iter().map(|p| (p.clone(), read)));
    rules.extend(reach.write.iter().map(|p| (p.clone(), all)));
    let mut created = ruleset.create()?;
    for (path, access) in rules {
        // Paths that do not exist (no `/lib32` here) are left out.
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(&path) else {
            continue;
        };
        // Directory-only rights mean nothing on a file.
        let access = if meta.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        if !access.is_empty() {
            created = created.add_rule(PathBeneath::new(fd, access))?;
        }
    }
    created.restrict_self()
}

/// `/etc`, as the entries to allow: every entry, with the directories that
/// hold secrets listed entry by entry and the secrets left out.
fn etc_without_secrets() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![PathBuf::from("/etc")];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if is_secret(&path) {
                continue;
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && SECRET_PARENTS.iter().any(|p| Path::new(p) == path) {
                pending.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A system call refused unconditionally.
struct Refused(i64);

fn socket() -> Refused {
    Refused(libc::SYS_socket)
}

fn io_uring_setup() -> Refused {
    Refused(libc::SYS_io_uring_setup)
}

/// A seccomp filter refusing `calls` with `EACCES` and allowing everything
/// else. On x86-64 the x32 numbers of the same calls are refused too.
fn seccomp_filter(calls: &[Refused]) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|_| {
        format!(
            "no seccomp filter for the {} architecture",
            std::env::consts::ARCH
        )
    })?;
    let mut rules = BTreeMap::new();
    for Refused(nr) in calls {
        rules.insert(*nr, Vec::new());
        if cfg!(target_arch = "x86_64") {
            // x32 system calls carry this bit and would otherwise pass.
            rules.insert(*nr | 0x4000_0000, Vec::new());
        }
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_etc_are_left_out() {
        for secret in [
            "/etc/shadow",
            "/etc/gshadow-",
            "/etc/sudoers.d",
            "/etc/ssh/ssh_host_ed25519_key",
            "/etc/ssl/private",
            "/etc/security/opasswd",
        ] {
            assert!(is_secret(Path::new(secret)), "{secret}");
        }
        for open in [
            "/etc/passwd",
            "/etc/ssh/ssh_host_ed25519_key.pub",
            "/etc/ssh/ssh_config",
            "/etc/ssl/certs",
            "/etc/hosts",
        ] {
            assert!(!is_secret(Path::new(open)), "{open}");
        }
        let etc = etc_without_secrets();
        assert!(etc.iter().all(|p| !is_secret(p)));
        assert!(!etc.contains(&PathBuf::from("/etc/shadow")));
        if Path::new("/etc/passwd").exists() {
            assert!(etc.contains(&PathBuf::from("/etc/passwd")));
        }
    }

    #[test]
    fn filters_build_for_this_architecture() {
        let filter = seccomp_filter(&[socket(), io_uring_setup()]).unwrap();
        assert!(filter.len() > 4);
    }
}
