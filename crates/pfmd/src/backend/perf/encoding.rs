//! [`HostEvent`] → `perf_event_attr` event selection (`type`, `config`,
//! `config1`). The constants come from `perf-event2`'s typed events, which
//! are built on the kernel UAPI bindings of `perf-event-open-sys2`; nothing
//! here is a hand-copied number.

use perf_event::Builder;
use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware, Raw, Software};
use pfm_model::HostEvent;

const fn cache(which: CacheId, operation: CacheOp, result: CacheResult) -> Cache {
    Cache {
        which,
        operation,
        result,
    }
}

/// A `perf-event2` builder whose attr selects `event`, with the crate's
/// defaults for everything else (disabled, user only, current process, any
/// CPU). Callers set the rest.
pub(crate) fn builder(event: &HostEvent) -> Builder<'static> {
    use CacheId as C;
    use CacheOp as Op;
    use CacheResult as R;
    match *event {
        HostEvent::Cycles => Builder::new(Hardware::CPU_CYCLES),
        HostEvent::Instructions => Builder::new(Hardware::INSTRUCTIONS),
        HostEvent::BranchInstructions => Builder::new(Hardware::BRANCH_INSTRUCTIONS),
        HostEvent::BranchMisses => Builder::new(Hardware::BRANCH_MISSES),
        HostEvent::StalledCyclesFrontend => Builder::new(Hardware::STALLED_CYCLES_FRONTEND),
        HostEvent::StalledCyclesBackend => Builder::new(Hardware::STALLED_CYCLES_BACKEND),
        HostEvent::CacheReferences => Builder::new(Hardware::CACHE_REFERENCES),
        HostEvent::CacheMisses => Builder::new(Hardware::CACHE_MISSES),
        HostEvent::L1dReadAccess => Builder::new(cache(C::L1D, Op::READ, R::ACCESS)),
        HostEvent::L1dReadMiss => Builder::new(cache(C::L1D, Op::READ, R::MISS)),
        HostEvent::L1dWriteAccess => Builder::new(cache(C::L1D, Op::WRITE, R::ACCESS)),
        HostEvent::L1iReadMiss => Builder::new(cache(C::L1I, Op::READ, R::MISS)),
        HostEvent::LlcReadAccess => Builder::new(cache(C::LL, Op::READ, R::ACCESS)),
        HostEvent::LlcReadMiss => Builder::new(cache(C::LL, Op::READ, R::MISS)),
        HostEvent::LlcWriteAccess => Builder::new(cache(C::LL, Op::WRITE, R::ACCESS)),
        HostEvent::LlcWriteMiss => Builder::new(cache(C::LL, Op::WRITE, R::MISS)),
        HostEvent::DtlbReadMiss => Builder::new(cache(C::DTLB, Op::READ, R::MISS)),
        HostEvent::ItlbReadMiss => Builder::new(cache(C::ITLB, Op::READ, R::MISS)),
        HostEvent::CpuClock => Builder::new(Software::CPU_CLOCK),
        HostEvent::TaskClock => Builder::new(Software::TASK_CLOCK),
        HostEvent::PageFaults => Builder::new(Software::PAGE_FAULTS),
        HostEvent::ContextSwitches => Builder::new(Software::CONTEXT_SWITCHES),
        HostEvent::CpuMigrations => Builder::new(Software::CPU_MIGRATIONS),
        HostEvent::AlignmentFaults => Builder::new(Software::ALIGNMENT_FAULTS),
        HostEvent::Raw {
            kind,
            config,
            config1,
        } => {
            // `Raw` selects PERF_TYPE_RAW; a site binding names its own PMU
            // type (a dynamic PMU's number from sysfs, or a generic type).
            let mut builder = Builder::new(Raw::new(config).config1(config1));
            builder.attrs_mut().type_ = kind;
            builder
        }
    }
}

/// `(attr.type, attr.config, attr.config1)` for `event`: what
/// `pfmd --print-event-map` writes and the site event map reads back.
pub fn encoding(event: &HostEvent) -> (u32, u64, u64) {
    let builder = builder(event);
    let attrs = builder.attrs();
    (attrs.type_, attrs.config, attrs.config1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The kernel UAPI (include/uapi/linux/perf_event.h), written out here on
    // purpose so the table is checked against the ABI and not against itself.
    const HARDWARE: u32 = 0;
    const SOFTWARE: u32 = 1;
    const HW_CACHE: u32 = 3;
    const L1D: u64 = 0;
    const L1I: u64 = 1;
    const LL: u64 = 2;
    const DTLB: u64 = 3;
    const ITLB: u64 = 4;
    const READ: u64 = 0;
    const WRITE: u64 = 1;
    const ACCESS: u64 = 0;
    const MISS: u64 = 1;

    fn hw_cache(which: u64, op: u64, result: u64) -> (u32, u64, u64) {
        (HW_CACHE, which | (op << 8) | (result << 16), 0)
    }

    #[test]
    fn table_matches_the_kernel_abi() {
        let expected = [
            (HostEvent::Cycles, (HARDWARE, 0, 0)),
            (HostEvent::Instructions, (HARDWARE, 1, 0)),
            (HostEvent::CacheReferences, (HARDWARE, 2, 0)),
            (HostEvent::CacheMisses, (HARDWARE, 3, 0)),
            (HostEvent::BranchInstructions, (HARDWARE, 4, 0)),
            (HostEvent::BranchMisses, (HARDWARE, 5, 0)),
            (HostEvent::StalledCyclesFrontend, (HARDWARE, 7, 0)),
            (HostEvent::StalledCyclesBackend, (HARDWARE, 8, 0)),
            (HostEvent::L1dReadAccess, hw_cache(L1D, READ, ACCESS)),
            (HostEvent::L1dReadMiss, hw_cache(L1D, READ, MISS)),
            (HostEvent::L1dWriteAccess, hw_cache(L1D, WRITE, ACCESS)),
            (HostEvent::L1iReadMiss, hw_cache(L1I, READ, MISS)),
            (HostEvent::LlcReadAccess, hw_cache(LL, READ, ACCESS)),
            (HostEvent::LlcReadMiss, hw_cache(LL, READ, MISS)),
            (HostEvent::LlcWriteAccess, hw_cache(LL, WRITE, ACCESS)),
            (HostEvent::LlcWriteMiss, hw_cache(LL, WRITE, MISS)),
            (HostEvent::DtlbReadMiss, hw_cache(DTLB, READ, MISS)),
            (HostEvent::ItlbReadMiss, hw_cache(ITLB, READ, MISS)),
            (HostEvent::CpuClock, (SOFTWARE, 0, 0)),
            (HostEvent::TaskClock, (SOFTWARE, 1, 0)),
            (HostEvent::PageFaults, (SOFTWARE, 2, 0)),
            (HostEvent::ContextSwitches, (SOFTWARE, 3, 0)),
            (HostEvent::CpuMigrations, (SOFTWARE, 4, 0)),
            (HostEvent::AlignmentFaults, (SOFTWARE, 7, 0)),
        ];
        assert_eq!(expected.len(), HostEvent::NAMED.len(), "every named event");
        for (event, want) in expected {
            assert_eq!(encoding(&event), want, "{event}");
        }
        // The example from the brief, spelled out.
        assert_eq!(encoding(&HostEvent::L1dReadMiss), (3, 0x1_0000, 0));
    }

    #[test]
    fn named_encodings_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for event in HostEvent::NAMED {
            assert!(seen.insert(encoding(&event)), "{event} collides");
        }
    }

    #[test]
    fn raw_events_keep_type_config_and_config1() {
        let raw = HostEvent::Raw {
            kind: 4,
            config: 0x1_00c0,
            config1: 0xdead_beef_0000,
        };
        assert_eq!(encoding(&raw), (4, 0x1_00c0, 0xdead_beef_0000));
        let dynamic = HostEvent::Raw {
            kind: 11,
            config: 7,
            config1: 0,
        };
        assert_eq!(encoding(&dynamic), (11, 7, 0));
    }
}
