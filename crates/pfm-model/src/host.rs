use std::fmt;

/// A host event in neutral terms. Event tables are written in this vocabulary;
/// `backend` alone knows how each becomes a `perf_event_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostEvent {
    Cycles,
    Instructions,
    BranchInstructions,
    BranchMisses,
    StalledCyclesFrontend,
    StalledCyclesBackend,
    CacheReferences,
    CacheMisses,
    L1dReadAccess,
    L1dReadMiss,
    L1dWriteAccess,
    L1iReadMiss,
    LlcReadAccess,
    LlcReadMiss,
    LlcWriteAccess,
    LlcWriteMiss,
    DtlbReadMiss,
    ItlbReadMiss,
    /// Nanoseconds of CPU time (per CPU: wall time on that CPU; per thread: the
    /// thread's run time). The cycle-counter stand-in on hosts without a PMU.
    CpuClock,
    TaskClock,
    PageFaults,
    ContextSwitches,
    CpuMigrations,
    AlignmentFaults,
    /// A raw host event bound by the site event map (docs/device.md §7).
    Raw {
        kind: u32,
        config: u64,
        config1: u64,
    },
}

impl HostEvent {
    /// Every named (non-raw) event, in probe order.
    pub const NAMED: [HostEvent; 24] = [
        Self::Cycles,
        Self::Instructions,
        Self::BranchInstructions,
        Self::BranchMisses,
        Self::StalledCyclesFrontend,
        Self::StalledCyclesBackend,
        Self::CacheReferences,
        Self::CacheMisses,
        Self::L1dReadAccess,
        Self::L1dReadMiss,
        Self::L1dWriteAccess,
        Self::L1iReadMiss,
        Self::LlcReadAccess,
        Self::LlcReadMiss,
        Self::LlcWriteAccess,
        Self::LlcWriteMiss,
        Self::DtlbReadMiss,
        Self::ItlbReadMiss,
        Self::CpuClock,
        Self::TaskClock,
        Self::PageFaults,
        Self::ContextSwitches,
        Self::CpuMigrations,
        Self::AlignmentFaults,
    ];

    /// The name `perf list` uses for it, so users can check with `perf stat`.
    pub fn perf_name(&self) -> String {
        let name = match self {
            Self::Cycles => "cycles",
            Self::Instructions => "instructions",
            Self::BranchInstructions => "branch-instructions",
            Self::BranchMisses => "branch-misses",
            Self::StalledCyclesFrontend => "stalled-cycles-frontend",
            Self::StalledCyclesBackend => "stalled-cycles-backend",
            Self::CacheReferences => "cache-references",
            Self::CacheMisses => "cache-misses",
            Self::L1dReadAccess => "L1-dcache-loads",
            Self::L1dReadMiss => "L1-dcache-load-misses",
            Self::L1dWriteAccess => "L1-dcache-stores",
            Self::L1iReadMiss => "L1-icache-load-misses",
            Self::LlcReadAccess => "LLC-loads",
            Self::LlcReadMiss => "LLC-load-misses",
            Self::LlcWriteAccess => "LLC-stores",
            Self::LlcWriteMiss => "LLC-store-misses",
            Self::DtlbReadMiss => "dTLB-load-misses",
            Self::ItlbReadMiss => "iTLB-load-misses",
            Self::CpuClock => "cpu-clock",
            Self::TaskClock => "task-clock",
            Self::PageFaults => "page-faults",
            Self::ContextSwitches => "context-switches",
            Self::CpuMigrations => "cpu-migrations",
            Self::AlignmentFaults => "alignment-faults",
            Self::Raw {
                kind,
                config,
                config1,
            } => return format!("raw(type={kind},config={config:#x},config1={config1:#x})"),
        };
        name.to_string()
    }

    /// True for events the kernel implements in software: they never compete
    /// for hardware counters, so they never make the device busy.
    pub fn is_software(&self) -> bool {
        matches!(
            self,
            Self::CpuClock
                | Self::TaskClock
                | Self::PageFaults
                | Self::ContextSwitches
                | Self::CpuMigrations
                | Self::AlignmentFaults
        )
    }
}

impl fmt::Display for HostEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.perf_name())
    }
}
