//! `#[repr(C)]` mirrors of the structures in `include/sys/pfcntr.h` (docs/device.md
//! §4). All fields are `unsigned long` (LP64). `tests/header_abi.rs` checks
//! sizes and offsets against the C header.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `PCNTSETITEMS` item bits.
pub const PFM_COUNTERS: u64 = 1;
pub const PFM_IPL: u64 = 2;
pub const PFM_PROFILING: u64 = 4;
pub const PFM_ITEMS_MASK: u64 = PFM_COUNTERS | PFM_IPL | PFM_PROFILING;
pub const PFM_PROFME_MODE_MASK: u64 = 0xff00;
pub const PFM_PROFME_MODE_SHIFT: u32 = 8;

/// Open-mode bits re-encoded onto Linux flags (docs/device.md §2).
pub const PCNTOPENONE: i32 = libc::O_DSYNC;
pub const PCNTOPENEACH: i32 = libc::O_APPEND;
pub const PCNTOPENALL: i32 = libc::O_DSYNC | libc::O_APPEND;
pub const PCNTOPENMASK: i32 = libc::O_DSYNC | libc::O_APPEND;

/// `PMCTRS_ALL_CPUS`: the cpu field value meaning every CPU.
pub const PMCTRS_ALL_CPUS: u64 = 0xff;

/// `PCNTGETINFO` constants (ours).
pub const PFM_INFO_VERSION: u64 = 1;
pub const PFM_INFO_MAX_COUNTERS: usize = 3;
pub const PFM_FIDELITY_NONE: u64 = 0;
pub const PFM_INFO_SHARED: u64 = 1;
pub const PFM_INFO_LOGSELECT: u64 = 2;
pub const PFM_INFO_ENABLED: u64 = 4;
pub const PFM_INFO_USER_ONLY: u64 = 8;
/// The request reached pfmd over a FUSE io_uring queue of the caller's CPU
/// (set by the transport, not the device).
pub const PFM_INFO_URING: u64 = 16;
pub const PFM_MODE_ONE: u64 = 1;
pub const PFM_MODE_EACH: u64 = 2;
pub const PFM_MODE_ALL: u64 = 3;

/// `struct iccsr`: the EV4 ICCSR image `PCNTSETMUX` takes, one 64-bit word.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub struct Iccsr(pub u64);

impl Iccsr {
    const fn field(self, shift: u32, bits: u32) -> u64 {
        (self.0 >> shift) & ((1 << bits) - 1)
    }
    pub const fn pc1(self) -> u64 {
        self.field(0, 1)
    }
    pub const fn ign0(self) -> u64 {
        self.field(1, 2)
    }
    pub const fn pc0(self) -> u64 {
        self.field(3, 1)
    }
    pub const fn ign1(self) -> u64 {
        self.field(4, 4)
    }
    pub const fn mux0(self) -> u64 {
        self.field(8, 4)
    }
    pub const fn ign2(self) -> u64 {
        self.field(12, 20)
    }
    pub const fn mux1(self) -> u64 {
        self.field(32, 3)
    }
    pub const fn disable(self) -> u64 {
        self.field(35, 2)
    }
    pub const fn ign3(self) -> u64 {
        self.field(37, 27)
    }
    /// Builds a word from its meaningful fields (tests and examples).
    pub const fn new(mux0: u64, mux1: u64, pc0: u64, pc1: u64, disable: u64) -> Self {
        Iccsr(
            (pc1 & 1)
                | ((pc0 & 1) << 3)
                | ((mux0 & 0xf) << 8)
                | ((mux1 & 7) << 32)
                | ((disable & 3) << 35),
        )
    }
}

/// `struct pfcntrs` (EV4 order).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PfCntrs {
    pub pf_cntr0: u64,
    pub pf_cntr1: u64,
    pub pr_cycle: u64,
}

/// `struct pfcntrs_ev5`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PfCntrsEv5 {
    pub pr_cycle: u64,
    pub pf_cntr0: u64,
    pub pf_cntr1: u64,
    pub pf_cntr2: u64,
}

/// `struct pfcntrs_ev6`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PfCntrsEv6 {
    pub pr_cycle: u64,
    pub pf_cntr0: u64,
    pub pf_cntr1: u64,
}

/// `struct pfipls`: the IPL histogram of one CPU.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PfIpls {
    pub ipl: [u64; PFIPL_ENTRIES],
}

/// Entries of `pfipls.ipl`: IPL 0 to 5, one unused, idle, user.
pub const PFIPL_ENTRIES: usize = 9;
/// Kernel mode at IPL 0 (idle included: idle is a part of IPL 0).
pub const PFIPL_KERNEL: usize = 0;
/// The Alpha's device-interrupt IPL. Linux samples do not tell it, so
/// pfmd leaves it 0 (its kernel samples are all [`PFIPL_KERNEL`]'s).
pub const PFIPL_DEVICE: usize = 4;
/// The idle task: a part of [`PFIPL_KERNEL`]'s count, also counted here.
pub const PFIPL_IDLE: usize = 7;
/// User mode.
pub const PFIPL_USER: usize = 8;

/// `struct addr_range`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AddrRange {
    pub start: u64,
    pub end: u64,
}

/// `addr_range_t`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct AddrRangeT {
    pub start: u64,
    pub end: u64,
    pub stride: u64,
    pub res0: u64,
}

/// `union pmctrs_ev5`: `sel:3, pad:5, cpu:8, c2:14, pad:2, c1:16, c0:16`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub struct PmctrsEv5(pub u64);

impl PmctrsEv5 {
    pub const fn select(self) -> u64 {
        self.0 & 0x7
    }
    pub const fn cpu(self) -> u64 {
        (self.0 >> 8) & 0xff
    }
    pub const fn cntr2(self) -> u64 {
        (self.0 >> 16) & 0x3fff
    }
    pub const fn cntr1(self) -> u64 {
        (self.0 >> 32) & 0xffff
    }
    pub const fn cntr0(self) -> u64 {
        (self.0 >> 48) & 0xffff
    }
    pub const fn new(select: u64, cpu: u64, c0: u64, c1: u64, c2: u64) -> Self {
        PmctrsEv5(
            (select & 7)
                | ((cpu & 0xff) << 8)
                | ((c2 & 0x3fff) << 16)
                | ((c1 & 0xffff) << 32)
                | ((c0 & 0xffff) << 48),
        )
    }
}

/// `union pmctrs_ev6`: `sel:2, pad:4, c1:20, pad:2, c0:20, pad:8, cpu:8`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(transparent)]
pub struct PmctrsEv6(pub u64);

impl PmctrsEv6 {
    pub const fn select(self) -> u64 {
        self.0 & 0x3
    }
    pub const fn cntr1(self) -> u64 {
        (self.0 >> 6) & 0xfffff
    }
    pub const fn cntr0(self) -> u64 {
        (self.0 >> 28) & 0xfffff
    }
    pub const fn cpu(self) -> u64 {
        (self.0 >> 56) & 0xff
    }
    pub const fn new(select: u64, cpu: u64, c0: u64, c1: u64) -> Self {
        PmctrsEv6(
            (select & 3) | ((c1 & 0xfffff) << 6) | ((c0 & 0xfffff) << 28) | ((cpu & 0xff) << 56),
        )
    }
}

/// `struct pfm_info` (ours): what `PCNTGETINFO` returns.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct PfmInfo {
    pub pi_version: u64,
    pub pi_family: u64,
    pub pi_impl: u64,
    pub pi_ncpus: u64,
    pub pi_ncounters: u64,
    pub pi_open_mode: u64,
    pub pi_items: u64,
    pub pi_flags: u64,
    pub pi_cpu_khz: u64,
    pub pi_width: [u64; PFM_INFO_MAX_COUNTERS],
    pub pi_fidelity: [u64; PFM_INFO_MAX_COUNTERS],
    pub pi_period: [u64; PFM_INFO_MAX_COUNTERS],
    pub pi_sample_period: [u64; PFM_INFO_MAX_COUNTERS],
    pub pi_lost_samples: u64,
    pub pi_throttled: u64,
    /// CPUs online now (an EACH array still has `pi_ncpus` elements).
    pub pi_online: u64,
    /// Times the open's host events were opened anew on PME threads that
    /// earlier host events of the open followed: what those threads had
    /// created is no longer counted from then on.
    pub pi_reopened: u64,
    pub pi_reserved: [u64; 6],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iccsr_fields_round_trip() {
        let w = Iccsr::new(0xa, 0x3, 1, 0, 2);
        assert_eq!(
            (w.mux0(), w.mux1(), w.pc0(), w.pc1(), w.disable()),
            (0xa, 3, 1, 0, 2)
        );
        assert_eq!(w.ign0() | w.ign1() | w.ign2() | w.ign3(), 0);
        assert_eq!(Iccsr(1 << 1).ign0(), 1);
        assert_eq!(Iccsr(1 << 63).ign3(), 1 << 26);
    }

    #[test]
    fn pmctrs_fields_round_trip() {
        let v5 = PmctrsEv5::new(5, 0xff, 0xabcd, 0x1234, 0x3fff);
        assert_eq!(
            (v5.select(), v5.cpu(), v5.cntr0(), v5.cntr1(), v5.cntr2()),
            (5, 0xff, 0xabcd, 0x1234, 0x3fff)
        );
        let v6 = PmctrsEv6::new(3, 7, 0xfffff, 0x12345);
        assert_eq!(
            (v6.select(), v6.cpu(), v6.cntr0(), v6.cntr1()),
            (3, 7, 0xfffff, 0x12345)
        );
    }
}
