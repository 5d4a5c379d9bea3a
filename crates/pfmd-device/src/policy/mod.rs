//! Who may do what through the device: the caller's credentials as `/proc`
//! shows them, judged by the host's own perf_event rules (docs/device.md §8).
//! Every privilege check of the daemon goes through [`SecurityPolicy`].

mod credentials;

pub use credentials::{Caller, CallerError, Credentials, parse_cpu_list, same_process};

use crate::backend::ThreadIdentity;

/// What callers may count, after the host's `perf_event_paranoid` (docs/device.md §8).
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

    /// Privileged as the kernel sees it (CAP_PERFMON, CAP_SYS_ADMIN) from
    /// the initial user namespace only, so nobody gains anything by
    /// creating a namespace; or a member of `--allow-group`, in any
    /// namespace: `/proc` shows the daemon the caller's groups on the host,
    /// which a namespace of its own cannot add to.
    pub fn trusted(&self, c: &Credentials) -> bool {
        (c.initial_user_namespace && c.perf_privileged())
            || self.allow_gid.is_some_and(|g| c.in_group(g))
    }

    /// May share the hardware counters with another perf user that holds
    /// them ("resets the busy status", docs/device.md §2): uid 0 or a
    /// trusted caller.
    pub fn may_reset_busy(&self, c: &Credentials) -> bool {
        c.host_root() || self.trusted(c)
    }

    /// The EV5 256-event periods, which can load the system heavily.
    pub fn may_use_short_periods(&self, c: &Credentials) -> bool {
        self.trusted(c)
    }

    /// System-wide counting (LOGALL) and kernel PC profiling.
    pub fn may_count_system_wide(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 0
    }

    /// User-mode counting of the caller's own threads (LOGSELECT).
    pub fn may_count_own_user(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 2
    }

    /// Host events on thread `tid`, as `perf_event_open(2)` allows them on
    /// a task: to a trusted caller, to a thread of the same process, or
    /// with ptrace read access (`__ptrace_may_access`): the thread's real,
    /// effective and saved uids and gids are all the caller's real ones, it
    /// is dumpable (its `/proc` files are not root's) and it holds no
    /// capability the caller does not. Root's threads are watched by
    /// trusted callers only.
    pub fn may_watch_thread(&self, c: &Credentials, tid: i32, t: &ThreadIdentity) -> bool {
        self.trusted(c)
            || same_process(c.tgid, tid)
            || (t.owner == (c.uid, c.gid)
                && t.owner.0 != 0
                && t.uids == [c.uid; 3]
                && t.gids == [c.gid; 3]
                && t.cap_permitted & !c.cap_permitted == 0)
    }

    /// Kernel-mode counting of the caller's own threads.
    pub fn may_count_own_kernel(&self, c: &Credentials) -> bool {
        self.trusted(c) || self.paranoid() <= 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's ptrace read rule, not only the thread's owner: a setuid
    /// program that set its effective ids back to the user's and made
    /// itself dumpable keeps root as its saved uid, and is not the user's
    /// to watch; nor is a thread with capabilities the user lacks.
    #[test]
    fn a_thread_is_watched_as_ptrace_would_allow() {
        let user = Credentials {
            tgid: 5_000_000,
            uid: 1000,
            gid: 1000,
            euid: 1000,
            egid: 1000,
            initial_user_namespace: true,
            ..Credentials::default()
        };
        let policy = SecurityPolicy {
            allow_gid: None,
            paranoid_override: Some(2),
        };
        let own = ThreadIdentity {
            birth: 1,
            owner: (1000, 1000),
            uids: [1000; 3],
            gids: [1000; 3],
            cap_permitted: 0,
        };
        // Thread numbers past pid_max: none is the caller's process's.
        assert!(policy.may_watch_thread(&user, 5_000_001, &own));
        for (what, thread) in [
            (
                "not dumpable",
                ThreadIdentity {
                    owner: (0, 0),
                    ..own
                },
            ),
            (
                "saved uid root",
                ThreadIdentity {
                    uids: [1000, 1000, 0],
                    ..own
                },
            ),
            (
                "saved gid other",
                ThreadIdentity {
                    gids: [1000, 1000, 5],
                    ..own
                },
            ),
            (
                "a capability",
                ThreadIdentity {
                    cap_permitted: 1 << 13,
                    ..own
                },
            ),
            (
                "another user",
                ThreadIdentity {
                    owner: (1001, 1000),
                    uids: [1001; 3],
                    ..own
                },
            ),
        ] {
            assert!(
                !policy.may_watch_thread(&user, 5_000_001, &thread),
                "{what}"
            );
        }
        assert!(
            policy.may_watch_thread(
                &user,
                user.tgid,
                &ThreadIdentity {
                    owner: (0, 0),
                    ..own
                }
            ),
            "its own process, always"
        );
    }

    #[test]
    fn paranoid_levels_gate_what_callers_may_count() {
        let user = Credentials {
            euid: 1000,
            egid: 1000,
            initial_user_namespace: true,
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
        let root = Credentials {
            initial_user_namespace: true,
            cap_effective: 1 << 21, // CAP_SYS_ADMIN
            ..Credentials::default()
        };
        assert!(at(3, None).may_count_system_wide(&root));
        let root_without_capabilities = Credentials {
            cap_effective: 0,
            ..root.clone()
        };
        assert!(!at(2, None).may_count_system_wide(&root_without_capabilities));
        assert!(at(2, None).may_reset_busy(&root_without_capabilities));
        // Root of a namespace nobody (65534, in group 4) made: /proc shows
        // the daemon its ids on the host.
        let namespaced_root = Credentials {
            initial_user_namespace: false,
            cap_effective: u64::MAX,
            euid: 65534,
            egid: 65534,
            groups: vec![4],
            ..root
        };
        assert!(
            !at(2, None).may_count_system_wide(&namespaced_root),
            "root of its own user namespace is not root here"
        );
        assert!(!at(2, Some(0)).may_use_short_periods(&namespaced_root));
        assert!(
            at(2, Some(4)).may_use_short_periods(&namespaced_root),
            "its group on the host still counts"
        );
    }
}
