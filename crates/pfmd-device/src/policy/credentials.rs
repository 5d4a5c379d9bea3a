//! Who is calling: the thread id the transport reports, and what `/proc`
//! says about that thread. Never taken from an ioctl argument
//! (docs/device.md §8).

use std::sync::OnceLock;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

/// The credentials of a calling thread, from `/proc/<tid>/status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// The process the thread belongs to.
    pub tgid: i32,
    /// Real uid and gid: what the kernel compares with a thread's owner
    /// before it lets a caller watch it.
    pub uid: u32,
    pub gid: u32,
    pub euid: u32,
    pub egid: u32,
    /// The filesystem uid: the one a FUSE or CUSE request header names.
    pub fsuid: u32,
    pub groups: Vec<u32>,
    pub cap_effective: u64,
    /// Permitted capabilities: a thread with more is not the caller's to
    /// watch (the kernel's ptrace rule).
    pub cap_permitted: u64,
    /// The CPUs the thread may run on (its affinity mask).
    pub cpus_allowed: Vec<u32>,
    /// The thread lives in the initial user namespace. Capabilities held
    /// in any other namespace give nothing on the host: the kernel counts
    /// CAP_PERFMON and CAP_SYS_ADMIN for perf in the initial one only.
    pub initial_user_namespace: bool,
}

impl Credentials {
    /// CAP_PERFMON or CAP_SYS_ADMIN in the initial user namespace: what the
    /// kernel itself trusts with system-wide and kernel counting
    /// (`perfmon_capable()`). Capabilities, not uid 0: root that dropped
    /// them is refused by the kernel, and so here.
    pub fn perf_privileged(&self) -> bool {
        self.initial_user_namespace
            && (self.cap_effective & (1 << CAP_PERFMON) != 0
                || self.cap_effective & (1 << CAP_SYS_ADMIN) != 0)
    }

    /// uid 0 of the host (docs/device.md §2 lets it reset the busy status).
    /// Root of a user namespace of its own is its real uid here (`euid` as
    /// `/proc` shows it to pfmd is already the host's uid).
    pub fn host_root(&self) -> bool {
        self.initial_user_namespace && self.euid == 0
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
            let nth = |v: &str, n| v.split_whitespace().nth(n).and_then(|s| s.parse().ok());
            match key {
                "Tgid" => {
                    creds.tgid = value.parse().ok()?;
                    seen += 1;
                }
                "Uid" => {
                    (creds.uid, creds.euid, creds.fsuid) =
                        (nth(value, 0)?, nth(value, 1)?, nth(value, 3)?);
                    seen += 1;
                }
                "Gid" => {
                    (creds.gid, creds.egid) = (nth(value, 0)?, nth(value, 1)?);
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
                "CapPrm" => {
                    creds.cap_permitted = u64::from_str_radix(value, 16).ok()?;
                    seen += 1;
                }
                "Cpus_allowed_list" => {
                    creds.cpus_allowed = parse_cpu_list(value)?;
                    seen += 1;
                }
                _ => {}
            }
        }
        (seen == 6).then_some(creds)
    }
}

/// The user namespace a thread lives in, as the `/proc/<tid>/ns/user` link
/// names it (`user:[4026531837]`).
/// Whether thread `tid` belongs to process `tgid`. Only looks the name
/// `/proc/<tgid>/task/<tid>` up, which takes none of the locks a thread in
/// `execve` holds (reading its files would: see `Device::flush`).
pub fn same_process(tgid: i32, tid: i32) -> bool {
    tid == tgid
        || (tgid > 0
            && tid > 0
            && std::fs::symlink_metadata(format!("/proc/{tgid}/task/{tid}")).is_ok())
}

fn user_namespace(pid: i32) -> std::io::Result<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/user"))
}

/// The initial user namespace as `/proc` names it. The kernel gives it a
/// fixed inode number (`PROC_USER_INIT_INO`, 0xEFFFFFFD), so no other
/// process (pid 1 may be unreadable in a container) has to be asked.
const INITIAL_USER_NAMESPACE: &str = "user:[4026531837]";

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

/// Why a caller's credentials could not be read (the thread is gone, or
/// `/proc` says something we do not understand): the request is refused
/// with `ESRCH`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {why}")]
pub struct CallerError {
    pub path: String,
    pub why: String,
}

/// A request's context: the calling thread, and what the channel it came
/// through says of itself. Credentials are read from `/proc` only when a
/// request needs them, so the common ioctls cost no `/proc` read.
#[derive(Debug)]
pub struct Caller {
    tid: i32,
    /// The filesystem uid the kernel put in the request header, when the
    /// channel has one: for logs and per-user bounds, never for privilege.
    header_uid: Option<u32>,
    /// `PFM_INFO_*` bits the channel reports in `PCNTGETINFO`.
    channel_flags: u64,
    credentials: OnceLock<Result<Credentials, CallerError>>,
}

impl Caller {
    pub fn from_tid(tid: i32) -> Self {
        Caller {
            tid,
            header_uid: None,
            channel_flags: 0,
            credentials: OnceLock::new(),
        }
    }

    /// A caller as a FUSE/CUSE request header names it, through a channel
    /// with these `PFM_INFO_*` flags.
    pub fn from_request(tid: i32, uid: u32, channel_flags: u64) -> Self {
        Caller {
            header_uid: Some(uid),
            channel_flags,
            ..Caller::from_tid(tid)
        }
    }

    /// A caller with known credentials (tests, and transports that have them).
    pub fn with_credentials(tid: i32, credentials: Credentials) -> Self {
        Caller {
            credentials: OnceLock::from(Ok(credentials)),
            ..Caller::from_tid(tid)
        }
    }

    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// The uid for logs and budgets: the credentials' if read, else the
    /// request header's.
    pub fn uid_hint(&self) -> Option<u32> {
        self.known_credentials().map(|c| c.euid).or(self.header_uid)
    }

    pub fn channel_flags(&self) -> u64 {
        self.channel_flags
    }

    /// Whether the thread may run on `cpu` alone now: from the credentials
    /// when this request read them, else asked of the kernel
    /// (`sched_getaffinity`, no `/proc` read); `None` when it cannot be
    /// told (the thread is gone).
    pub fn bound_to(&self, cpu: u32) -> Option<bool> {
        if let Some(creds) = self.known_credentials() {
            return Some(creds.cpus_allowed == [cpu]);
        }
        let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(self.tid)).ok()?;
        let mut only = nix::sched::CpuSet::new();
        only.set(cpu as usize).ok()?;
        Some(allowed == only)
    }

    /// The credentials if a request already read them.
    pub fn known_credentials(&self) -> Option<&Credentials> {
        self.credentials.get().and_then(|r| r.as_ref().ok())
    }

    pub fn credentials(&self) -> Result<&Credentials, CallerError> {
        self.credentials
            .get_or_init(|| {
                let path = format!("/proc/{}/status", self.tid);
                let text = std::fs::read_to_string(&path).map_err(|e| CallerError {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
                let mut creds = Credentials::parse_status(&text).ok_or_else(|| CallerError {
                    path: path.clone(),
                    why: "unreadable".into(),
                })?;
                // Unknown namespaces count as foreign: no capability is
                // trusted that cannot be shown to be the host's.
                creds.initial_user_namespace = user_namespace(self.tid)
                    .is_ok_and(|ns| ns.as_os_str() == INITIAL_USER_NAMESPACE);
                // A request served later (by its open's worker) may find its
                // caller gone and the tid reused: a thread that is not the
                // request's user is not its caller.
                if self.header_uid.is_some_and(|uid| uid != creds.fsuid) {
                    return Err(CallerError {
                        path,
                        why: "not the calling thread (its filesystem uid is not the request's: \
                              the caller is gone and its thread id reused)"
                            .into(),
                    });
                }
                Ok(creds)
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tcat\nTgid:\t41\nPid:\t42\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t24 27 100\nCapPrm:\t0000004000000000\nCapEff:\t0000004000000000\nCpus_allowed_list:\t0-2,5\n";

    #[test]
    fn parses_proc_status() {
        let c = Credentials::parse_status(STATUS).unwrap();
        assert_eq!((c.tgid, c.euid, c.egid, c.fsuid), (41, 1000, 100, 1000));
        assert_eq!(c.groups, vec![24, 27, 100]);
        assert_eq!(c.cpus_allowed, vec![0, 1, 2, 5]);
        assert!(
            !c.perf_privileged(),
            "no capability counts until the namespace is known"
        );
        let host = Credentials {
            initial_user_namespace: true,
            ..c.clone()
        };
        assert!(host.perf_privileged(), "CapEff bit 38 is CAP_PERFMON");
        let root_without_caps = Credentials {
            euid: 0,
            cap_effective: 0,
            ..host.clone()
        };
        assert!(
            !root_without_caps.perf_privileged() && root_without_caps.host_root(),
            "uid 0 without capabilities is not privileged for perf"
        );
        assert!(Credentials::parse_status("Name: x\n").is_none());
    }

    #[test]
    fn tells_a_thread_of_the_process_from_another_process() {
        let me = std::process::id() as i32;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = stop_rx.recv();
        });
        let sibling = tid_rx.recv().unwrap();
        let parent = nix::unistd::getppid().as_raw();
        assert!(same_process(me, me));
        assert!(same_process(me, sibling), "a live sibling thread");
        assert!(
            !same_process(me, parent),
            "the parent process is not a thread of this one"
        );
        assert!(!same_process(me, 1), "pid 1 is not a thread of the test");
        stop_tx.send(()).unwrap();
        thread.join().unwrap();
    }

    #[test]
    fn reads_own_credentials() {
        let me = Caller::from_tid(nix::unistd::gettid().as_raw());
        let c = me.credentials().unwrap();
        assert_eq!(c.tgid, std::process::id() as i32);
        assert!(!c.cpus_allowed.is_empty());
        assert!(c.initial_user_namespace, "the test runs on the host");
        assert!(Caller::from_tid(i32::MAX).credentials().is_err());
    }

    /// A request whose header names another user than the thread now has
    /// (its caller died and the tid was reused) is not that thread's.
    #[test]
    fn a_thread_of_another_user_than_the_request_is_not_its_caller() {
        let tid = nix::unistd::gettid().as_raw();
        let fsuid = Caller::from_tid(tid).credentials().unwrap().fsuid;
        assert!(Caller::from_request(tid, fsuid, 0).credentials().is_ok());
        let e = Caller::from_request(tid, fsuid ^ 1, 0)
            .credentials()
            .unwrap_err();
        assert!(e.why.contains("not the calling thread"), "{e}");
    }
}
