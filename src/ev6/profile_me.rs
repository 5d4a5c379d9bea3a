//! EV67 profile-me statistics (contract §5.4): the `PF67_PM_*` value that
//! rides in bits 8..15 of the `PCNTSETITEMS` word, what each means (seed
//! 002), and how a Linux host can measure it.
//!
//! Profile-me samples instructions uniformly and records what happened to
//! each. On a host: `RETIRE`, `FREQ` and `VALID` are 1 per sampled
//! instruction, so plain IP samples give them exactly. Other statistics
//! need an instruction-sampling unit that reports per-instruction facts:
//! AMD IBS op sampling (branch taken/mispredicted, tag-to-retire and
//! completion-to-retire cycles, DTLB misses, misaligned accesses) or Intel
//! PEBS (the data-source TLB bits of sampled memory operations). Whatever
//! neither has is refused with `EOPNOTSUPP` naming the statistic. The
//! decoding of the samples themselves is in [`super::sampling`].

use super::sampling::{OpMeasure, SamplingHardware};
use crate::ioctl::DeviceError;
use crate::ioctl::abi::{PFM_PROFME_MODE_MASK, PFM_PROFME_MODE_SHIFT};

/// How a statistic can be had on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// 1 per sampled instruction: plain IP samples.
    Ip,
    /// A per-instruction fact that IBS op sampling (and, where `pebs`, PEBS)
    /// reports.
    Op { measure: OpMeasure, pebs: bool },
    /// No sampling facility of a Linux host records it.
    Nowhere(&'static str),
}

#[derive(Debug)]
pub struct Statistic {
    /// `PF67_PM_*` name.
    pub name: &'static str,
    /// The enum value (index in [`STATISTICS`]).
    pub value: u8,
    pub description: &'static str,
    /// `*_PER_RET`: the driver returns (statistic, retired) pairs.
    pub per_ret: bool,
    pub source: Source,
}

const ABORTED: &str = "IBS and PEBS record only instructions that retire; an aborted or killed execution is never sampled";
const NO_TRAP: &str = "no host sampling unit records this trap per instruction";
const INFLIGHT: &str = "counts events of other instructions while the sampled one is in flight; neither IBS nor PEBS reports that window";
const FETCH: &str =
    "an instruction-fetch event: IBS op sampling and PEBS do not report it per instruction";

const fn stat(
    name: &'static str,
    value: u8,
    description: &'static str,
    per_ret: bool,
    source: Source,
) -> Statistic {
    Statistic {
        name,
        value,
        description,
        per_ret,
        source,
    }
}
const fn ibs(measure: OpMeasure) -> Source {
    Source::Op {
        measure,
        pebs: false,
    }
}
const fn ibs_or_pebs(measure: OpMeasure) -> Source {
    Source::Op {
        measure,
        pebs: true,
    }
}

/// Every statistic, indexed by its enum value (header order).
pub static STATISTICS: [Statistic; 44] = [
    stat(
        "PF67_PM_DISABLED",
        0,
        "no profile-me statistic",
        false,
        Source::Ip,
    ),
    stat(
        "PF67_PM_ABORT",
        1,
        "the profiled execution is aborted",
        false,
        Source::Nowhere(ABORTED),
    ),
    stat(
        "PF67_PM_ABORT_PER_RET",
        2,
        "abort statistic x 100 / retired",
        true,
        Source::Nowhere(ABORTED),
    ),
    stat(
        "PF67_PM_ARITH_TRAP",
        3,
        "the profiled execution causes an arithmetic trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_CBR_TAKEN",
        4,
        "the profiled execution is a taken conditional branch",
        false,
        ibs(OpMeasure::TakenBranch),
    ),
    stat(
        "PF67_PM_CBR_TAKEN_PER_RET",
        5,
        "cbr_taken statistic x 100 / retired",
        true,
        ibs(OpMeasure::TakenBranch),
    ),
    stat(
        "PF67_PM_CYCLES",
        6,
        "approximate cycles the execution was in flight",
        false,
        ibs(OpMeasure::InFlightCycles),
    ),
    stat(
        "PF67_PM_CYCLES_PER_RET",
        7,
        "cycles statistic / retired",
        true,
        ibs(OpMeasure::InFlightCycles),
    ),
    stat(
        "PF67_PM_DELAY",
        8,
        "approximate retire delay of the profiled execution",
        false,
        ibs(OpMeasure::RetireDelay),
    ),
    stat(
        "PF67_PM_DELAY_PER_RET",
        9,
        "delay statistic x 100 / retired",
        true,
        ibs(OpMeasure::RetireDelay),
    ),
    stat(
        "PF67_PM_DSTREAM_FAULT",
        10,
        "the profiled execution causes a D-stream fault",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_DTB_MISS",
        11,
        "the profiled execution causes a DTB single miss",
        false,
        ibs_or_pebs(OpMeasure::DtlbMiss),
    ),
    stat(
        "PF67_PM_DTB_MISS_PER_RET",
        12,
        "dtb_miss statistic x 100 / retired",
        true,
        ibs_or_pebs(OpMeasure::DtlbMiss),
    ),
    stat(
        "PF67_PM_DTB_MISS3",
        13,
        "DTB double miss with 3-level page tables",
        false,
        Source::Nowhere("the host's page tables have 4 or more levels: see PF67_PM_DTB_MISS4"),
    ),
    stat(
        "PF67_PM_DTB_MISS4",
        14,
        "DTB double miss with 4-level page tables",
        false,
        ibs_or_pebs(OpMeasure::DtlbWalk),
    ),
    stat(
        "PF67_PM_EARLY_KILL",
        15,
        "the profiled execution is killed early in the pipeline",
        false,
        Source::Nowhere(ABORTED),
    ),
    stat(
        "PF67_PM_EARLY_KILL_PER_RET",
        16,
        "early_kill statistic x 100 / retired",
        true,
        Source::Nowhere(ABORTED),
    ),
    stat(
        "PF67_PM_FP_DISABLED",
        17,
        "the profiled execution causes a floating-point-disabled trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_FREQ",
        18,
        "as retired; uprofile/kprofile average it within basic blocks into execution frequencies",
        false,
        Source::Ip,
    ),
    stat(
        "PF67_PM_ICACHE_MISS",
        19,
        "the profiled execution was not yet prefetched into the Icache",
        false,
        Source::Nowhere(FETCH),
    ),
    stat(
        "PF67_PM_ICACHE_MISS_PER_RET",
        20,
        "icache_miss statistic x 100 / retired",
        true,
        Source::Nowhere(FETCH),
    ),
    stat(
        "PF67_PM_ICACHE_PARITY",
        21,
        "the profiled execution met an Icache parity error",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_INFLT_BCACHE_MISS",
        22,
        "approximate Bcache misses during the profiled execution",
        false,
        Source::Nowhere(INFLIGHT),
    ),
    stat(
        "PF67_PM_INFLT_REPLAYS",
        23,
        "approximate replay traps during the profiled execution",
        false,
        Source::Nowhere(INFLIGHT),
    ),
    stat(
        "PF67_PM_INFLT_RETIRES",
        24,
        "approximate instruction retires during the profiled execution",
        false,
        Source::Nowhere(INFLIGHT),
    ),
    stat(
        "PF67_PM_INTERRUPT",
        25,
        "the profiled execution is pre-empted by an interrupt",
        false,
        Source::Nowhere(ABORTED),
    ),
    stat(
        "PF67_PM_ISTREAM_ACCVIO",
        26,
        "the profiled execution causes an I-stream access violation",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_ITB_MISS",
        27,
        "the profiled execution causes an ITB miss",
        false,
        Source::Nowhere(FETCH),
    ),
    stat(
        "PF67_PM_LDST_ALIGN_TRAP",
        28,
        "the profiled execution causes an unaligned load or store",
        false,
        ibs(OpMeasure::Misaligned),
    ),
    stat(
        "PF67_PM_LDST_ORDER_TRAP",
        29,
        "the profiled execution causes a load-store order trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_MAP_STALL",
        30,
        "the profiled execution stalled before it was mapped",
        false,
        Source::Nowhere(
            "front-end stalls of one instruction are not reported by IBS op sampling or PEBS",
        ),
    ),
    stat(
        "PF67_PM_MAP_STALL_PER_RET",
        31,
        "map_stall statistic x 100 / retired",
        true,
        Source::Nowhere(
            "front-end stalls of one instruction are not reported by IBS op sampling or PEBS",
        ),
    ),
    stat(
        "PF67_PM_MCHK_TRAP",
        32,
        "the profiled execution causes a machine-check trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_MISPREDICT",
        33,
        "the profiled execution is mispredicted",
        false,
        ibs(OpMeasure::Mispredict),
    ),
    stat(
        "PF67_PM_MISPREDICT_PER_RET",
        34,
        "mispredict statistic x 100 / retired",
        true,
        ibs(OpMeasure::Mispredict),
    ),
    stat(
        "PF67_PM_MT_FPCR_TRAP",
        35,
        "the profiled execution traps writing the FP control register",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_OPCDEC_TRAP",
        36,
        "the profiled execution causes a reserved-opcode trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_REPLAY_TRAP",
        37,
        "the profiled execution causes a replay trap",
        false,
        Source::Nowhere("IBS and PEBS do not report pipeline replays per instruction"),
    ),
    stat(
        "PF67_PM_REPLAY_TRAP_PER_RET",
        38,
        "replay_trap statistic x 100 / retired",
        true,
        Source::Nowhere("IBS and PEBS do not report pipeline replays per instruction"),
    ),
    stat(
        "PF67_PM_RESET",
        39,
        "the profiled execution causes a reset trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_RETIRE",
        40,
        "the profiled execution retires",
        false,
        Source::Ip,
    ),
    stat(
        "PF67_PM_TRAP",
        41,
        "the profiled execution causes a trap",
        false,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_TRAP_PER_RET",
        42,
        "trap statistic x 100 / retired",
        true,
        Source::Nowhere(NO_TRAP),
    ),
    stat(
        "PF67_PM_VALID",
        43,
        "the profiled execution is valid",
        false,
        Source::Ip,
    ),
];

/// How the sampler will measure the selected statistic on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Plain IP samples (any host).
    Ip,
    /// AMD IBS op samples, decoded by [`super::sampling::IbsOpSample`].
    Ibs(OpMeasure),
    /// Intel PEBS samples, decoded by [`super::sampling::PebsSample`].
    Pebs(OpMeasure),
}

/// A profile-me statistic the host can measure, and how.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub statistic: &'static Statistic,
    pub method: Method,
}

/// The `PF67_PM_*` value of a `PCNTSETITEMS` word.
pub fn statistic_of_items(items: u64) -> u64 {
    (items & PFM_PROFME_MODE_MASK) >> PFM_PROFME_MODE_SHIFT
}

/// What the sampler needs for `value` on a host with `hardware`: `None` for
/// `PF67_PM_DISABLED`; `EINVAL` past `PF67_PM_VALID`; `EOPNOTSUPP` naming the
/// statistic where the host cannot measure it (contract §5.4).
pub fn plan(value: u64, hardware: &SamplingHardware) -> Result<Option<Plan>, DeviceError> {
    let statistic = usize::try_from(value)
        .ok()
        .and_then(|v| STATISTICS.get(v))
        .ok_or_else(|| {
            DeviceError::invalid(format!(
                "profile-me statistic {value} is past PF67_PM_VALID ({})",
                STATISTICS.len() - 1
            ))
        })?;
    if value == 0 {
        return Ok(None);
    }
    let method = match statistic.source {
        Source::Ip => Method::Ip,
        Source::Op { measure, .. } if hardware.ibs_op => Method::Ibs(measure),
        Source::Op {
            measure,
            pebs: true,
        } if hardware.pebs => Method::Pebs(measure),
        Source::Op { pebs, .. } => {
            return Err(DeviceError::NotSupported(format!(
                "{}: needs {} instruction sampling, which this host does not have",
                statistic.name,
                if pebs {
                    "AMD IBS op or Intel PEBS"
                } else {
                    "AMD IBS op"
                }
            )));
        }
        Source::Nowhere(why) => {
            return Err(DeviceError::NotSupported(format!(
                "{}: {why}",
                statistic.name
            )));
        }
    };
    Ok(Some(Plan { statistic, method }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::errno::Errno;

    const NONE: SamplingHardware = SamplingHardware {
        ibs_op: false,
        pebs: false,
    };
    const IBS: SamplingHardware = SamplingHardware {
        ibs_op: true,
        pebs: false,
    };
    const PEBS: SamplingHardware = SamplingHardware {
        ibs_op: false,
        pebs: true,
    };

    fn value(name: &str) -> u64 {
        STATISTICS.iter().find(|s| s.name == name).unwrap().value as u64
    }

    #[test]
    fn table_is_in_header_order() {
        for (i, s) in STATISTICS.iter().enumerate() {
            assert_eq!(s.value as usize, i, "{}", s.name);
            assert_eq!(s.per_ret, s.name.ends_with("_PER_RET"), "{}", s.name);
        }
        assert_eq!(value("PF67_PM_FREQ"), 18);
        assert_eq!(value("PF67_PM_RETIRE"), 40);
        assert_eq!(value("PF67_PM_VALID"), 43);
        assert_eq!(statistic_of_items(0x2801), 40);
    }

    #[test]
    fn retire_freq_valid_need_nothing_but_ip_samples() {
        for name in ["PF67_PM_RETIRE", "PF67_PM_FREQ", "PF67_PM_VALID"] {
            let p = plan(value(name), &NONE).unwrap().unwrap();
            assert_eq!(p.method, Method::Ip, "{name}");
        }
        assert!(plan(0, &NONE).unwrap().is_none(), "DISABLED");
        assert_eq!(plan(44, &IBS).unwrap_err().errno(), Errno::EINVAL);
    }

    #[test]
    fn the_rest_maps_onto_ibs_or_pebs_or_is_refused_by_name() {
        let e = plan(value("PF67_PM_MISPREDICT"), &NONE).unwrap_err();
        assert_eq!(e.errno(), Errno::EOPNOTSUPP);
        assert!(e.to_string().contains("PF67_PM_MISPREDICT"));
        assert_eq!(
            plan(value("PF67_PM_MISPREDICT"), &IBS)
                .unwrap()
                .unwrap()
                .method,
            Method::Ibs(OpMeasure::Mispredict)
        );
        assert_eq!(
            plan(value("PF67_PM_MISPREDICT"), &PEBS)
                .unwrap_err()
                .errno(),
            Errno::EOPNOTSUPP,
            "PEBS has no per-instruction mispredict bit"
        );
        assert_eq!(
            plan(value("PF67_PM_DTB_MISS"), &PEBS)
                .unwrap()
                .unwrap()
                .method,
            Method::Pebs(OpMeasure::DtlbMiss)
        );
        let abort = plan(value("PF67_PM_ABORT"), &IBS).unwrap_err();
        assert_eq!(abort.errno(), Errno::EOPNOTSUPP);
        assert!(abort.to_string().contains("PF67_PM_ABORT"));
        // Every statistic is either measurable somewhere or refused, never silently zero.
        for s in &STATISTICS[1..] {
            let any = [NONE, IBS, PEBS].map(|hw| plan(s.value as u64, &hw).is_ok());
            match s.source {
                Source::Ip => assert_eq!(any, [true; 3]),
                Source::Op { pebs, .. } => assert_eq!(any, [false, true, pebs]),
                Source::Nowhere(_) => assert_eq!(any, [false; 3]),
            }
        }
    }
}
