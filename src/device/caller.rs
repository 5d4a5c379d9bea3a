//! Who is calling: the thread id the transport reports, and what `/proc`
//! says about that thread. Never taken from an ioctl argument (contract §8).

use crate::ioctl::DeviceError;
use std::sync::OnceLock;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// The credentials of a calling thread, from `/proc/<tid>/status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// The process the thread belongs to.
    pub tgid: i32,
    pub euid: u32,
    pub egid: u32,
    pub groups: Vec<u32>,
    pub cap_effective: u64,
    /// The CPUs the thread may run on (its affinity mask).
    pub cpus_allowed: Vec<u32>,
}

impl Credentials {
    /// Root, CAP_PERFMON or CAP_SYS_ADMIN: what the kernel itself trusts with
    /// system-wide and kernel counting.
    pub fn perf_privileged(&self) -> bool {
        self.euid == 0
            || self.cap_effective & (1 << CAP_PERFMON) != 0
            || self.cap_effective & (1 << CAP_SYS_ADMIN) != 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.egid == gid || self.groups.contains(&gid)
    }

    /// Parses the text of `/proc/<tid>/status`.
    pub fn parse_status(text: &str) -> Option<Credentials> {
        let mut creds = Credentials::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let second = |v: &str| v.split_whitespace().nth(1).and_then(|s| s.parse().ok());
            match key {
                "Tgid" => {
                    creds.tgid = value.parse().ok()?;
                    seen += 1;
                }
                "Uid" => {
                    creds.euid = second(value)?;
                    seen += 1;
                }
                "Gid" => {
                    creds.egid = second(value)?;
                    seen += 1;
                }
                "Groups" => {
                    creds.groups = value
                        .split_whitespace()
                        .filter_map(|g| g.parse().ok())
                        .collect()
                }
                "CapEff" => {
                    creds.cap_effective = u64::from_str_radix(value, 16).ok()?;
                    seen += 1;
                }
                "Cpus_allowed_list" => {
                    creds.cpus_allowed = parse_cpu_list(value)?;
                    seen += 1;
                }
                _ => {}
            }
        }
        (seen == 5).then_some(creds)
    }
}

/// Parses a kernel CPU list such as `0-3,6,8-9`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// A request's caller. Credentials are read from `/proc` only when a request
/// needs them, so the common ioctls cost no `/proc` read.
#[derive(Debug)]
pub struct Caller {
    tid: i32,
    credentials: OnceLock<Result<Credentials, DeviceError>>,
}

impl Caller {
    pub fn from_tid(tid: i32) -> Self {
        Caller {
            tid,
            credentials: OnceLock::new(),
        }
    }

    /// A caller with known credentials (tests, and transports that have them).
    pub fn with_credentials(tid: i32, credentials: Credentials) -> Self {
        Caller {
            tid,
            credentials: OnceLock::from(Ok(credentials)),
        }
    }

    pub fn tid(&self) -> i32 {
        self.tid
    }

    pub fn credentials(&self) -> Result<&Credentials, DeviceError> {
        self.credentials
            .get_or_init(|| {
                let path = format!("/proc/{}/status", self.tid);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    DeviceError::Host(format!("{path}: {e}"), nix::errno::Errno::ESRCH)
                })?;
                Credentials::parse_status(&text).ok_or_else(|| {
                    DeviceError::Host(format!("{path}: unreadable"), nix::errno::Errno::ESRCH)
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// What callers may count, after the host's `perf_event_paranoid` (contract §8).
#[derive(Debug, Clone, Default)]
pub struct SecurityPolicy {
    /// Members of this group may do what CAP_PERFMON allows (`--allow-group`).
    pub allow_gid: Option<u32>,
    /// Fixed paranoid level for tests; `None` reads the host's each time.
    pub paranoid_override: Option<i32>,
}

impl SecurityPolicy {
    pub fn paranoid(&self) -> i32 {
        self.paranoid_override.unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(2)
        })
    }

    fn trusted(&self, c: &Credentials) -> bool {
        c.perf_privileged() || self.allow_gid.is_some_and(|g| c.in_group(g))
    }

    /// System-wide counting (LOGALL) and kernel PC profiling.
    pub fn may_count_system_wide(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 0
    }

    /// User-mode counting of the caller's own threads (LOGSELECT).
    pub fn may_count_own_user(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 2
    }

    /// Kernel-mode counting of the caller's own threads.
    pub fn may_count_own_kernel(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tcat\nTgid:\t41\nPid:\t42\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t24 27 100\nCapEff:\t0000004000000000\nCpus_allowed_list:\t0-2,5\n";

    #[test]
    fn parses_proc_status() {
        let c = Credentials::parse_status(STATUS).unwrap();
        assert_eq!((c.tgid, c.euid, c.egid), (41, 1000, 100));
        assert_eq!(c.groups, vec![24, 27, 100]);
        assert_eq!(c.cpus_allowed, vec![0, 1, 2, 5]);
        assert!(c.perf_privileged(), "CapEff bit 38 is CAP_PERFMON");
        assert!(Credentials::parse_status("Name: x\n").is_none());
    }

    #[test]
    fn paranoid_levels_gate_what_callers_may_count() {
        let user = Credentials {
            euid: 1000,
            egid: 1000,
            ..Credentials::default()
        };
        let at = |level, gid| SecurityPolicy {
            allow_gid: gid,
            paranoid_override: Some(level),
        };
        assert!(!at(2, None).may_count_system_wide(&user));
        assert!(at(2, None).may_count_own_user(&user));
        assert!(!at(2, None).may_count_own_kernel(&user));
        assert!(at(1, None).may_count_own_kernel(&user));
        assert!(at(0, None).may_count_system_wide(&user));
        assert!(!at(3, None).may_count_own_user(&user));
        assert!(
            at(2, Some(1000)).may_count_system_wide(&user),
            "--allow-group"
        );
        let root = Credentials::default();
        assert!(at(3, None).may_count_system_wide(&root));
    }

    #[test]
    fn reads_own_credentials() {
        let me = Caller::from_tid(nix::unistd::gettid().as_raw());
        let c = me.credentials().unwrap();
        assert_eq!(c.tgid, std::process::id() as i32);
        assert!(!c.cpus_allowed.is_empty());
        assert!(Caller::from_tid(i32::MAX).credentials().is_err());
    }
}
