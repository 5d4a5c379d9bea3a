//! What the daemon lets its callers use, in all and per user: profile
//! memory, perf descriptors and perf ring memory (docs/device.md §8). pfmd
//! runs as root, so the kernel's own per-user limits (`perf_event_mlock_kb`,
//! RLIMIT_NOFILE of the caller) do not apply to what it opens on a caller's
//! behalf; these do. A charge is held by what it pays for and refunded when
//! that is dropped.

use super::DeviceError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The resources budgeted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// Profile buckets, counted twice: the buckets and the copy-on-write
    /// snapshot a `read(2)` may keep of them.
    ProfileBytes,
    /// perf_event descriptors (counting groups' events and samplers).
    PerfDescriptors,
    /// perf ring-buffer memory of samplers.
    RingBytes,
}

const RESOURCES: usize = 3;

impl Resource {
    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Resource::ProfileBytes => "profile memory",
            Resource::PerfDescriptors => "perf descriptors",
            Resource::RingBytes => "perf ring memory",
        }
    }

    /// The errno past the budget: memory is `ENOMEM`; descriptors are a
    /// shared facility others are using, `EBUSY`.
    fn refusal(self, why: String) -> DeviceError {
        match self {
            Resource::ProfileBytes | Resource::RingBytes => DeviceError::NoMemory(why),
            Resource::PerfDescriptors => DeviceError::Busy(why),
        }
    }
}

/// The limits (`pfmd --budget-*` options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// In all, per resource.
    pub total: [u64; RESOURCES],
    /// Per user, per resource.
    pub per_user: [u64; RESOURCES],
    /// Threads one open may give the PME bit (`ENOSPC` past it).
    pub pme_threads_per_open: usize,
}

impl Limits {
    pub fn new(
        profile: (u64, u64),
        descriptors: (u64, u64),
        rings: (u64, u64),
        pme_threads_per_open: usize,
    ) -> Limits {
        Limits {
            total: [profile.0, descriptors.0, rings.0],
            per_user: [profile.1, descriptors.1, rings.1],
            pme_threads_per_open,
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::new(
            (1 << 30, 256 << 20),
            (4096, 1024),
            (256 << 20, 64 << 20),
            256,
        )
    }
}

#[derive(Debug, Default)]
struct Usage {
    total: [u64; RESOURCES],
    per_user: HashMap<u32, [u64; RESOURCES]>,
}

#[derive(Debug)]
struct Inner {
    limits: Limits,
    usage: Mutex<Usage>,
}

/// The daemon's budgets.
#[derive(Debug, Clone)]
pub struct Budgets(Arc<Inner>);

impl Budgets {
    pub fn new(limits: Limits) -> Budgets {
        Budgets(Arc::new(Inner {
            limits,
            usage: Mutex::default(),
        }))
    }

    pub fn limits(&self) -> &Limits {
        &self.0.limits
    }

    /// Takes `amount` of `resource` for `uid`, or refuses with the
    /// resource's errno naming the limit.
    pub fn charge(&self, uid: u32, resource: Resource, amount: u64) -> Result<Charge, DeviceError> {
        let i = resource.index();
        let limits = &self.0.limits;
        let mut usage = super::lock(&self.0.usage);
        let total = usage.total[i].saturating_add(amount);
        let mine = usage
            .per_user
            .get(&uid)
            .map_or(0, |u| u[i])
            .saturating_add(amount);
        if total > limits.total[i] {
            return Err(resource.refusal(format!(
                "{} of {amount} would exceed the daemon's budget of {} ({} in use)",
                resource.name(),
                limits.total[i],
                usage.total[i]
            )));
        }
        if mine > limits.per_user[i] {
            return Err(resource.refusal(format!(
                "{} of {amount} would exceed uid {uid}'s budget of {} ({} in use)",
                resource.name(),
                limits.per_user[i],
                mine - amount
            )));
        }
        usage.total[i] = total;
        usage.per_user.entry(uid).or_default()[i] = mine;
        Ok(Charge {
            budgets: self.clone(),
            uid,
            resource,
            amount,
        })
    }

    /// What is in use, in all.
    pub fn used(&self, resource: Resource) -> u64 {
        super::lock(&self.0.usage).total[resource.index()]
    }

    fn refund(&self, uid: u32, resource: Resource, amount: u64) {
        let i = resource.index();
        let mut usage = super::lock(&self.0.usage);
        usage.total[i] = usage.total[i].saturating_sub(amount);
        if let Some(mine) = usage.per_user.get_mut(&uid) {
            mine[i] = mine[i].saturating_sub(amount);
            if mine.iter().all(|&v| v == 0) {
                usage.per_user.remove(&uid);
            }
        }
    }
}

/// A granted amount; refunded on drop.
#[derive(Debug)]
pub struct Charge {
    budgets: Budgets,
    uid: u32,
    resource: Resource,
    amount: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budgets.refund(self.uid, self.resource, self.amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    #[test]
    fn charges_are_limited_in_all_and_per_user_and_refunded_on_drop() {
        let b = Budgets::new(Limits::new((100, 60), (10, 4), (1000, 1000), 8));
        let a = b.charge(1, Resource::ProfileBytes, 50).unwrap();
        assert_eq!(
            b.charge(1, Resource::ProfileBytes, 20).unwrap_err().errno(),
            Errno::ENOMEM,
            "uid 1 past its 60"
        );
        let c = b.charge(2, Resource::ProfileBytes, 50).unwrap();
        assert_eq!(
            b.charge(3, Resource::ProfileBytes, 1).unwrap_err().errno(),
            Errno::ENOMEM,
            "the daemon's 100 are taken"
        );
        drop(a);
        assert_eq!(b.used(Resource::ProfileBytes), 50);
        let _d = b.charge(3, Resource::ProfileBytes, 50).unwrap();
        drop(c);
        let e = b.charge(1, Resource::PerfDescriptors, 5).unwrap_err();
        assert_eq!(e.errno(), Errno::EBUSY);
        assert!(e.to_string().contains("uid 1"), "{e}");
    }
}
