//! EV67 profile-me statistics (docs/device.md §5.4): the `PF67_PM_*` value
//! that rides in bits 8..15 of the `PCNTSETITEMS` word, what each means, and
//! whether a Linux host can measure it.
//!
//! Profile-me samples instructions uniformly and records what happened to
//! each. `RETIRE`, `FREQ` and `VALID` are 1 per sampled instruction, so plain
//! IP samples give them exactly. The others need an instruction-sampling
//! unit that reports per-instruction facts (AMD IBS op sampling, Intel PEBS)
//! and pfmd drives no such unit: they are refused with `EOPNOTSUPP` naming
//! the statistic and what it would take, never filled from plain IP samples.

use crate::ModelError;

/// How a statistic can be had on a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// 1 per sampled instruction: plain IP samples.
    Ip,
    /// A per-instruction fact only an instruction-sampling unit reports;
    /// the text names the units that would do.
    Unit(&'static str),
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
const IBS: Source = Source::Unit("AMD IBS op sampling");
const IBS_OR_PEBS: Source = Source::Unit("AMD IBS op sampling or Intel PEBS");

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
        IBS,
    ),
    stat(
        "PF67_PM_CBR_TAKEN_PER_RET",
        5,
        "cbr_taken statistic x 100 / retired",
        true,
        IBS,
    ),
    stat(
        "PF67_PM_CYCLES",
        6,
        "approximate cycles the execution was in flight",
        false,
        IBS,
    ),
    stat(
        "PF67_PM_CYCLES_PER_RET",
        7,
        "cycles statistic / retired",
        true,
        IBS,
    ),
    stat(
        "PF67_PM_DELAY",
        8,
        "approximate retire delay of the profiled execution",
        false,
        IBS,
    ),
    stat(
        "PF67_PM_DELAY_PER_RET",
        9,
        "delay statistic x 100 / retired",
        true,
        IBS,
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
        IBS_OR_PEBS,
    ),
    stat(
        "PF67_PM_DTB_MISS_PER_RET",
        12,
        "dtb_miss statistic x 100 / retired",
        true,
        IBS_OR_PEBS,
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
        IBS_OR_PEBS,
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
        IBS,
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
        IBS,
    ),
    stat(
        "PF67_PM_MISPREDICT_PER_RET",
        34,
        "mispredict statistic x 100 / retired",
        true,
        IBS,
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

/// The `PF67_PM_*` value of a `PCNTSETITEMS` word.
pub fn statistic_of_items(items: u64) -> u64 {
    pfm_abi::Items::profile_me(items)
}

/// The statistic `value` selects, if pfmd can measure it: `None` for
/// `PF67_PM_DISABLED`; `EINVAL` past `PF67_PM_VALID`; `EOPNOTSUPP` naming the
/// statistic and what it would take for every statistic that plain IP
/// samples cannot give (docs/device.md §5.4).
pub fn plan(value: u64) -> Result<Option<&'static Statistic>, ModelError> {
    let statistic = usize::try_from(value)
        .ok()
        .and_then(|v| STATISTICS.get(v))
        .ok_or_else(|| {
            ModelError::invalid(format!(
                "profile-me statistic {value} is past PF67_PM_VALID ({})",
                STATISTICS.len() - 1
            ))
        })?;
    if value == 0 {
        return Ok(None);
    }
    match statistic.source {
        Source::Ip => Ok(Some(statistic)),
        Source::Unit(unit) => Err(ModelError::NotSupported(format!(
            "{}: needs {unit}, which pfmd does not drive; only PF67_PM_RETIRE, PF67_PM_FREQ and PF67_PM_VALID are measured",
            statistic.name
        ))),
        Source::Nowhere(why) => Err(ModelError::NotSupported(format!(
            "{}: {why}",
            statistic.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn retire_freq_valid_are_measured_from_ip_samples() {
        for name in ["PF67_PM_RETIRE", "PF67_PM_FREQ", "PF67_PM_VALID"] {
            assert_eq!(plan(value(name)).unwrap().unwrap().name, name);
        }
        assert!(plan(0).unwrap().is_none(), "DISABLED");
        assert!(matches!(plan(44), Err(ModelError::Invalid(_))));
    }

    #[test]
    fn the_rest_is_refused_by_name_never_measured_from_ip_samples() {
        for s in &STATISTICS[1..] {
            match (s.source, plan(s.value as u64)) {
                (Source::Ip, Ok(Some(_))) => {}
                (Source::Unit(_) | Source::Nowhere(_), Err(ModelError::NotSupported(why))) => {
                    assert!(why.contains(s.name), "{why}")
                }
                (source, other) => panic!("{}: {source:?} gave {other:?}", s.name),
            }
        }
    }
}
