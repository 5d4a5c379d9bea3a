//! Instruction-sampling hardware a host may have for EV67 profile-me, and
//! pure decoders from its raw sample bytes to the per-instruction facts the
//! `PF67_PM_*` statistics need. No I/O here except [`SamplingHardware::probe`].
//!
//! - AMD IBS op sampling: a `PERF_SAMPLE_RAW` record of the `ibs_op` PMU is
//!   `u32 caps` followed by the IBS op registers as `u64`s, in MSR order:
//!   `IBS_OP_CTL`, `IBS_OP_RIP`, `IBS_OP_DATA`, `IBS_OP_DATA2`,
//!   `IBS_OP_DATA3`, `IBS_DC_LINADDR`, `IBS_DC_PHYSADDR`, then optional
//!   `IBS_BR_TARGET` / `IBS_OPDATA4` as `caps` says (Linux
//!   `arch/x86/events/amd/ibs.c`, `struct perf_ibs_data`). Bit positions are
//!   those of the AMD PPRs (Family 10h onwards; `asm/amd-ibs.h`).
//! - Intel PEBS: the facts come from `PERF_SAMPLE_DATA_SRC`, the
//!   `perf_mem_data_src` word the kernel fills from the PEBS record.

use std::path::Path;

/// One per-instruction fact a profile-me statistic is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpMeasure {
    /// 1 if the op is a taken branch (IBS `IbsOpBrnTaken`).
    TakenBranch,
    /// 1 if the op is a mispredicted branch (IBS `IbsOpBrnMisp`).
    Mispredict,
    /// Cycles from tag to retire (IBS `IbsTagToRetCtr`): time in flight.
    InFlightCycles,
    /// Cycles from completion to retire (IBS `IbsCompToRetCtr`): retire delay.
    RetireDelay,
    /// 1 if the data access missed the first-level DTLB.
    DtlbMiss,
    /// 1 if the data access missed every TLB level (a page-table walk).
    DtlbWalk,
    /// 1 if the data access was misaligned (IBS `IbsDcMisAcc`).
    Misaligned,
}

/// What the host offers for sampling instructions with per-op detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SamplingHardware {
    /// AMD IBS op sampling: the `ibs_op` PMU exists.
    pub ibs_op: bool,
    /// Intel PEBS: the core PMU supports `precise_ip` (`caps/max_precise`
    /// above 0) and the host has no IBS (AMD's precise modes are IBS).
    pub pebs: bool,
}

impl SamplingHardware {
    /// Probes `/sys/bus/event_source/devices`.
    pub fn probe() -> Self {
        Self::probe_at(Path::new("/sys/bus/event_source/devices"))
    }

    /// Probes a sysfs `event_source/devices` directory (tests pass a fake one).
    pub fn probe_at(devices: &Path) -> Self {
        let ibs_op = devices.join("ibs_op").exists();
        let max_precise = ["cpu", "cpu_core"]
            .iter()
            .filter_map(|pmu| {
                std::fs::read_to_string(devices.join(pmu).join("caps/max_precise")).ok()
            })
            .filter_map(|text| text.trim().parse::<u32>().ok())
            .max()
            .unwrap_or(0);
        let found = SamplingHardware {
            ibs_op,
            pebs: !ibs_op && max_precise > 0,
        };
        tracing::debug!(?found, max_precise, "instruction-sampling hardware");
        found
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    #[error("IBS op sample of {len} bytes; need at least {need}")]
    TooShort { len: usize, need: usize },
    #[error("IBS op sample without IbsOpVal: the hardware did not latch an op")]
    NotValid,
}

/// The IBS op registers of one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IbsOpSample {
    pub caps: u32,
    pub op_ctl: u64,
    pub op_rip: u64,
    pub op_data: u64,
    pub op_data2: u64,
    pub op_data3: u64,
}

/// `IBS_OP_CTL` bit 18: IbsOpVal.
const OP_CTL_VAL: u64 = 1 << 18;
/// `IBS_OP_DATA` fields.
const OP_DATA_BRN_TAKEN: u32 = 35;
const OP_DATA_BRN_MISP: u32 = 36;
const OP_DATA_BRN_RET: u32 = 37;
const OP_DATA_RIP_INVALID: u32 = 38;
/// `IBS_OP_DATA3` fields.
const OP_DATA3_LD: u32 = 0;
const OP_DATA3_ST: u32 = 1;
const OP_DATA3_L1TLB_MISS: u32 = 2;
const OP_DATA3_L2TLB_MISS: u32 = 3;
const OP_DATA3_MIS_ACC: u32 = 8;

const fn bit(word: u64, n: u32) -> u64 {
    (word >> n) & 1
}

impl IbsOpSample {
    /// The registers needed here (caps + 5 of the 7 always present).
    pub const MIN_LEN: usize = 4 + 5 * 8;

    /// Decodes the bytes of a `PERF_SAMPLE_RAW` record of the `ibs_op` PMU
    /// (native byte order; trailing registers and padding are ignored).
    pub fn parse(raw: &[u8]) -> Result<Self, SampleError> {
        if raw.len() < Self::MIN_LEN {
            return Err(SampleError::TooShort {
                len: raw.len(),
                need: Self::MIN_LEN,
            });
        }
        let reg = |i: usize| {
            let at = 4 + 8 * i;
            u64::from_ne_bytes(raw[at..at + 8].try_into().expect("8 bytes"))
        };
        let sample = IbsOpSample {
            caps: u32::from_ne_bytes(raw[..4].try_into().expect("4 bytes")),
            op_ctl: reg(0),
            op_rip: reg(1),
            op_data: reg(2),
            op_data2: reg(3),
            op_data3: reg(4),
        };
        if sample.op_ctl & OP_CTL_VAL == 0 {
            return Err(SampleError::NotValid);
        }
        Ok(sample)
    }

    /// The sampled op's address, unless the hardware flagged it invalid.
    pub fn rip(&self) -> Option<u64> {
        (bit(self.op_data, OP_DATA_RIP_INVALID) == 0).then_some(self.op_rip)
    }

    fn memory_op(&self) -> bool {
        bit(self.op_data3, OP_DATA3_LD) | bit(self.op_data3, OP_DATA3_ST) != 0
    }

    /// The value `measure` contributes for this op.
    pub fn measure(&self, measure: OpMeasure) -> u64 {
        match measure {
            OpMeasure::TakenBranch => {
                bit(self.op_data, OP_DATA_BRN_RET) & bit(self.op_data, OP_DATA_BRN_TAKEN)
            }
            OpMeasure::Mispredict => {
                bit(self.op_data, OP_DATA_BRN_RET) & bit(self.op_data, OP_DATA_BRN_MISP)
            }
            OpMeasure::InFlightCycles => (self.op_data >> 16) & 0xFFFF,
            OpMeasure::RetireDelay => self.op_data & 0xFFFF,
            OpMeasure::DtlbMiss => {
                u64::from(self.memory_op()) & bit(self.op_data3, OP_DATA3_L1TLB_MISS)
            }
            OpMeasure::DtlbWalk => {
                u64::from(self.memory_op()) & bit(self.op_data3, OP_DATA3_L2TLB_MISS)
            }
            OpMeasure::Misaligned => {
                u64::from(self.memory_op()) & bit(self.op_data3, OP_DATA3_MIS_ACC)
            }
        }
    }
}

/// The `perf_mem_data_src` word of a PEBS sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PebsSample {
    pub data_src: u64,
}

/// `perf_mem_data_src` fields (`include/uapi/linux/perf_event.h`).
const MEM_OP_SHIFT: u32 = 0;
const MEM_OP_LOAD: u64 = 0x02;
const MEM_OP_STORE: u64 = 0x04;
const MEM_TLB_SHIFT: u32 = 26;
const MEM_TLB_HIT: u64 = 0x02;
const MEM_TLB_MISS: u64 = 0x04;
const MEM_TLB_L2: u64 = 0x10;

impl PebsSample {
    /// The value `measure` contributes for this sample; `None` for facts PEBS
    /// does not report.
    pub fn measure(&self, measure: OpMeasure) -> Option<u64> {
        let op = (self.data_src >> MEM_OP_SHIFT) & 0x1F;
        let tlb = (self.data_src >> MEM_TLB_SHIFT) & 0x7F;
        let memory = op & (MEM_OP_LOAD | MEM_OP_STORE) != 0;
        match measure {
            // A first-level DTLB miss: MISS, or a hit only in the second level.
            OpMeasure::DtlbMiss => Some(u64::from(
                memory
                    && (tlb & MEM_TLB_MISS != 0
                        || tlb & (MEM_TLB_HIT | MEM_TLB_L2) == MEM_TLB_HIT | MEM_TLB_L2),
            )),
            // Missed every level: the walker ran.
            OpMeasure::DtlbWalk => Some(u64::from(
                memory && tlb & MEM_TLB_MISS != 0 && tlb & MEM_TLB_HIT == 0,
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw IBS op record as the kernel lays it out: caps, then 7 registers.
    fn ibs_record(caps: u32, regs: [u64; 7]) -> Vec<u8> {
        let mut raw = caps.to_ne_bytes().to_vec();
        for r in regs {
            raw.extend_from_slice(&r.to_ne_bytes());
        }
        raw
    }

    const VAL: u64 = 1 << 18;

    #[test]
    fn decodes_branch_bits_and_retire_counters() {
        // A retired, taken, mispredicted branch: tag-to-retire 300 cycles,
        // completion-to-retire 12.
        let op_data = 12 | 300 << 16 | 1 << 35 | 1 << 36 | 1 << 37;
        let raw = ibs_record(0x1ff, [VAL | 0x1000, 0x4011a0, op_data, 0, 0, 0, 0]);
        assert_eq!(raw.len(), 60, "caps + 7 registers, as perf_ibs_data");
        let s = IbsOpSample::parse(&raw).unwrap();
        assert_eq!(s.rip(), Some(0x4011a0));
        assert_eq!(s.measure(OpMeasure::TakenBranch), 1);
        assert_eq!(s.measure(OpMeasure::Mispredict), 1);
        assert_eq!(s.measure(OpMeasure::InFlightCycles), 300);
        assert_eq!(s.measure(OpMeasure::RetireDelay), 12);
        assert_eq!(s.measure(OpMeasure::DtlbMiss), 0, "not a memory op");
    }

    #[test]
    fn decodes_data_access_bits() {
        // A load (ld_op) that missed L1 and L2 DTLB and was misaligned.
        let data3 = 1 | 1 << 2 | 1 << 3 | 1 << 8;
        let raw = ibs_record(0x7ff, [VAL, 0x1000, 0, 0, data3, 0xdead0, 0x1dead0]);
        let s = IbsOpSample::parse(&raw).unwrap();
        assert_eq!(s.measure(OpMeasure::DtlbMiss), 1);
        assert_eq!(s.measure(OpMeasure::DtlbWalk), 1);
        assert_eq!(s.measure(OpMeasure::Misaligned), 1);
        assert_eq!(s.measure(OpMeasure::TakenBranch), 0);
        // The same bits on a non-memory op mean nothing.
        let raw = ibs_record(0x7ff, [VAL, 0x1000, 0, 0, data3 & !1, 0, 0]);
        assert_eq!(
            IbsOpSample::parse(&raw)
                .unwrap()
                .measure(OpMeasure::DtlbMiss),
            0
        );
        // A taken but not retired-branch bit pattern is no taken branch.
        let raw = ibs_record(0, [VAL, 0, 1 << 35, 0, 0, 0, 0]);
        assert_eq!(
            IbsOpSample::parse(&raw)
                .unwrap()
                .measure(OpMeasure::TakenBranch),
            0
        );
    }

    #[test]
    fn rejects_short_and_invalid_records_and_flags_bad_rips() {
        assert_eq!(
            IbsOpSample::parse(&[0; 20]).unwrap_err(),
            SampleError::TooShort { len: 20, need: 44 }
        );
        let raw = ibs_record(0, [0, 0x1000, 0, 0, 0, 0, 0]);
        assert_eq!(IbsOpSample::parse(&raw).unwrap_err(), SampleError::NotValid);
        let raw = ibs_record(0, [VAL, 0x1000, 1 << 38, 0, 0, 0, 0]);
        assert_eq!(IbsOpSample::parse(&raw).unwrap().rip(), None);
        // Longer records (BrTarget, OpData4, padding) decode the same.
        let mut raw = ibs_record(1 << 5, [VAL, 0x2000, 0, 0, 0, 0, 0]);
        raw.extend_from_slice(&0xffff_u64.to_ne_bytes());
        assert_eq!(IbsOpSample::parse(&raw).unwrap().rip(), Some(0x2000));
    }

    #[test]
    fn decodes_pebs_data_source_tlb_bits() {
        let src = |op: u64, tlb: u64| PebsSample {
            data_src: op | tlb << 26,
        };
        // Load, TLB L1 | L2 | MISS | walker: missed everywhere.
        let walk = src(MEM_OP_LOAD, 0x04 | 0x08 | 0x10 | 0x20);
        assert_eq!(walk.measure(OpMeasure::DtlbMiss), Some(1));
        assert_eq!(walk.measure(OpMeasure::DtlbWalk), Some(1));
        // Store that hit in the second-level TLB: an L1 miss, no walk.
        let stlb = src(MEM_OP_STORE, 0x02 | 0x10);
        assert_eq!(stlb.measure(OpMeasure::DtlbMiss), Some(1));
        assert_eq!(stlb.measure(OpMeasure::DtlbWalk), Some(0));
        // L1 hit.
        let hit = src(MEM_OP_LOAD, 0x02 | 0x08);
        assert_eq!(hit.measure(OpMeasure::DtlbMiss), Some(0));
        assert_eq!(hit.measure(OpMeasure::Mispredict), None);
        // Not a memory op (PERF_MEM_OP_NA).
        assert_eq!(src(1, 0x04).measure(OpMeasure::DtlbMiss), Some(0));
    }

    #[test]
    fn probe_reads_a_sysfs_tree() {
        let dir = std::env::temp_dir().join(format!("pfmd-probe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("cpu/caps")).unwrap();
        assert_eq!(
            SamplingHardware::probe_at(&dir),
            SamplingHardware::default()
        );
        std::fs::write(dir.join("cpu/caps/max_precise"), "3\n").unwrap();
        assert!(SamplingHardware::probe_at(&dir).pebs);
        std::fs::create_dir_all(dir.join("ibs_op")).unwrap();
        assert_eq!(
            SamplingHardware::probe_at(&dir),
            SamplingHardware {
                ibs_op: true,
                pebs: false
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
