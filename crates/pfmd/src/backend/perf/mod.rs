//! The Linux `perf_event_open` backend.
//!
//! Bindings: `perf-event2`'s [`perf_event::Builder`] exposes the whole
//! `perf_event_attr` (typed setters for pinned/inherit/exclude_*/read_format,
//! `attrs_mut` for the raw type), the pid/cpu/group_fd arguments, and safe
//! wrappers for the ENABLE/DISABLE/ID ioctls and group reads; it sits on the
//! kernel UAPI bindings of `perf-event-open-sys2`. Its one `unsafe` edge is
//! a sampler's fd ([`sampler`]): borrowed for epoll, and switched by the raw
//! ENABLE/DISABLE ioctl, because perf-event2's safe switch needs the sampler
//! itself, which the ring lock guards while the sampler thread parses.
//!
//! - [`PerfBackend::probe`] opens every named host event once at start and
//!   remembers why the ones that fail do; [`HostSupport::check`] answers from
//!   that table and opens raw events on demand (cached).
//! - [`Backend::open_group`] opens one group per (CPU, target); see
//!   [`group`] for how it is read.
//! - [`Backend::hardware_contended`] asks the kernel whether a pinned
//!   `cycles` event can run on the given CPUs.
//!
//! Kernel behaviour the device core relies on (each pinned by a test):
//!
//! - `Target::Thread` groups are inherited by the threads and processes the
//!   thread creates after the open; their counts fold into the group, also
//!   after they exit. Group reads (`PERF_FORMAT_GROUP`) of inherited groups
//!   work on Linux 6.18.
//! - After the counted thread exits, its groups stay readable with their
//!   final counts; enable/disable still succeed and change nothing.
//! - The mode filter reaches the kernel as `exclude_user/kernel/hv`: a
//!   user-only group counts no context switches (they happen in the kernel).
//!   `cpu-clock` and `task-clock` count time and ignore the mode filter.
//! - Counts are cumulative from the open: disable/enable pause and resume,
//!   nothing here resets them.

mod encoding;
mod group;
mod sampler;
#[cfg(test)]
mod tests;

pub use encoding::encoding;

use super::{
    Backend, BackendError, CountingGroup, GroupSpec, SampleSink, SamplerSpec, SamplingStream,
    Target, ThreadIdentity,
};
use group::{PerfGroup, ReadMode, errno_of};
use nix::errno::Errno;
use pfm_model::{HostEvent, HostSupport};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Whether the kernel accepts `PERF_FORMAT_GROUP` on inherited groups.
const GROUP_INHERIT_UNKNOWN: u8 = 0;
const GROUP_INHERIT_YES: u8 = 1;
const GROUP_INHERIT_NO: u8 = 2;

/// How long [`Backend::hardware_contended`] lets its pinned `cycles` run.
const CONTENTION_WINDOW: Duration = Duration::from_millis(1);

/// The host's perf events.
#[derive(Debug)]
pub struct PerfBackend {
    /// The start-up probe, in [`HostEvent::NAMED`] order.
    probed: Vec<(HostEvent, Result<(), String>)>,
    /// Raw events checked so far.
    raw: Mutex<HashMap<HostEvent, Result<(), String>>>,
    /// `GROUP_INHERIT_*`, learnt from the first group opened for a thread.
    group_read_with_inherit: AtomicU8,
    /// Tests force a read mode to exercise both.
    force_read_mode: Option<ReadMode>,
    /// The sampler thread, started with the first sampler.
    hub: std::sync::OnceLock<std::sync::Arc<sampler::Hub>>,
}

impl PerfBackend {
    /// Opens every named event once (counting, disabled) and logs which do.
    pub fn probe() -> PerfBackend {
        let probed: Vec<_> = HostEvent::NAMED
            .iter()
            .map(|event| (*event, try_open(event)))
            .collect();
        let opens: Vec<String> = probed
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(e, _)| e.perf_name())
            .collect();
        tracing::info!(
            "perf probe: {} of {} host events open: {}",
            opens.len(),
            probed.len(),
            if opens.is_empty() {
                "none".to_string()
            } else {
                opens.join(", ")
            }
        );
        if opens.is_empty() {
            tracing::warn!(
                "perf probe: not even software events open: is perf_event_open \
                 blocked (seccomp, perf_event_paranoid 3+)?"
            );
        }
        for (event, result) in &probed {
            if let Err(why) = result {
                tracing::debug!("perf probe: {event}: {why}");
            }
        }
        PerfBackend {
            probed,
            raw: Mutex::default(),
            group_read_with_inherit: AtomicU8::new(GROUP_INHERIT_UNKNOWN),
            force_read_mode: None,
            hub: std::sync::OnceLock::new(),
        }
    }

    fn read_mode(&self, spec: &GroupSpec) -> ReadMode {
        if let Some(mode) = self.force_read_mode {
            return mode;
        }
        match spec.target {
            Target::AllTasks => ReadMode::Group,
            Target::Thread(_) => {
                if self.group_read_with_inherit.load(Ordering::Relaxed) == GROUP_INHERIT_NO {
                    ReadMode::Individual
                } else {
                    ReadMode::Group
                }
            }
        }
    }
}

/// Opens `event` counting and disabled, first for this process on any CPU in
/// user mode (what any caller may do), then, for PMUs that only count per
/// CPU, for all tasks on the first online CPU. Ok if either opens.
fn try_open(event: &HostEvent) -> Result<(), String> {
    let per_task = encoding::builder(event).build();
    let Err(per_task) = per_task else {
        return Ok(());
    };
    let per_cpu = encoding::builder(event)
        .any_pid()
        .one_cpu(first_online_cpu())
        .exclude_kernel(false)
        .exclude_hv(false)
        .build();
    let Err(per_cpu) = per_cpu else {
        return Ok(());
    };
    let (a, b) = (errno_of(&per_task), errno_of(&per_cpu));
    if a == b {
        Err(describe(a))
    } else {
        Err(format!(
            "per task: {}; per CPU: {}",
            describe(a),
            describe(b)
        ))
    }
}

/// Why perf_event_open refused an event, in words.
fn describe(errno: Errno) -> String {
    match errno {
        Errno::ENOENT => "not supported by this host (ENOENT)".into(),
        Errno::EOPNOTSUPP => "not supported by this host's PMU (EOPNOTSUPP)".into(),
        Errno::ENODEV => "no such PMU on this host (ENODEV)".into(),
        Errno::EINVAL => "rejected by the kernel as invalid (EINVAL)".into(),
        Errno::EACCES | Errno::EPERM => format!("not permitted ({errno:?})"),
        other => format!("{} ({other:?})", other.desc()),
    }
}

fn first_online_cpu() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|text| {
            let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

impl HostSupport for PerfBackend {
    fn check(&self, event: &HostEvent) -> Result<(), String> {
        if let Some((_, result)) = self.probed.iter().find(|(e, _)| e == event) {
            return result.clone();
        }
        let mut raw = self.raw.lock().unwrap_or_else(|e| e.into_inner());
        raw.entry(*event)
            .or_insert_with(|| {
                let result = try_open(event);
                match &result {
                    Ok(()) => tracing::info!("perf: {event} opens"),
                    Err(why) => tracing::info!("perf: {event} does not open: {why}"),
                }
                result
            })
            .clone()
    }
}

impl Backend for PerfBackend {
    fn open_sampler(
        &self,
        spec: &SamplerSpec,
        sink: std::sync::Arc<dyn SampleSink>,
    ) -> Result<Box<dyn SamplingStream>, BackendError> {
        let hub = match self.hub.get() {
            Some(hub) => hub,
            None => {
                let started = sampler::Hub::start().map_err(|e| BackendError::Io {
                    op: "start the sampler thread",
                    errno: errno_of(&e),
                })?;
                self.hub.get_or_init(|| started)
            }
        };
        Ok(Box::new(hub.open(spec, sink)?))
    }

    fn sampler_ring_bytes(&self) -> u64 {
        sampler::RING_BYTES as u64 + 4096
    }

    fn max_sample_rate(&self) -> u64 {
        std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100_000)
    }

    fn open_group(&self, spec: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError> {
        let mode = self.read_mode(spec);
        let learning = self.force_read_mode.is_none()
            && matches!(spec.target, Target::Thread(_))
            && self.group_read_with_inherit.load(Ordering::Relaxed) == GROUP_INHERIT_UNKNOWN;
        match PerfGroup::open(spec, mode) {
            Ok(group) => {
                if learning {
                    self.group_read_with_inherit
                        .store(GROUP_INHERIT_YES, Ordering::Relaxed);
                }
                Ok(Box::new(group))
            }
            Err(BackendError::Open {
                errno: Errno::EINVAL,
                ..
            }) if learning => {
                // Kernels that refuse PERF_FORMAT_GROUP with inherit say EINVAL.
                let group = PerfGroup::open(spec, ReadMode::Individual)?;
                self.group_read_with_inherit
                    .store(GROUP_INHERIT_NO, Ordering::Relaxed);
                tracing::warn!(
                    "perf: this kernel refuses group reads of inherited groups; \
                     per-thread groups are read one event at a time (values of one \
                     read are not one snapshot)"
                );
                Ok(Box::new(group))
            }
            Err(e) => Err(e),
        }
    }

    fn hardware_contended(&self, cpus: &[u32]) -> bool {
        if self.check(&HostEvent::Cycles).is_err() {
            return false;
        }
        let mut counters = Vec::with_capacity(cpus.len());
        for &cpu in cpus {
            let built = encoding::builder(&HostEvent::Cycles)
                .any_pid()
                .one_cpu(cpu as usize)
                .pinned(true)
                .enabled(true)
                .build();
            match built {
                Ok(counter) => counters.push((cpu, counter)),
                Err(e) => crate::logging::once(
                    "contention-probe",
                    &format!(
                        "perf: cannot open a pinned cycles event on cpu {cpu} to look for \
                         other perf users: {}",
                        describe(errno_of(&e))
                    ),
                ),
            }
        }
        if counters.is_empty() {
            return false;
        }
        std::thread::sleep(CONTENTION_WINDOW);
        for (cpu, counter) in &mut counters {
            let contended = match counter.read_count_and_time() {
                Ok(reading) => reading.time_enabled > 0 && reading.time_running == 0,
                Err(e) => matches!(group::read_error(e), BackendError::Unschedulable),
            };
            if contended {
                tracing::debug!(
                    "perf: the hardware counters of cpu {cpu} are held by another perf user"
                );
                return true;
            }
        }
        false
    }

    fn thread_identity(&self, tid: i32) -> Option<ThreadIdentity> {
        use std::os::unix::fs::MetadataExt;
        // `/proc/<tid>` names any thread, not only a process's first. Its
        // files (not the directory) are owned as the kernel judges
        // dumpability (`task_dump_owner`).
        let process = procfs::process::Process::new(tid).ok()?;
        let stat = process.stat().ok()?;
        let status = process.status().ok()?;
        let files = std::fs::metadata(format!("/proc/{tid}/stat")).ok()?;
        (stat.state != 'Z' && stat.state != 'X').then_some(ThreadIdentity {
            birth: stat.starttime,
            owner: (files.uid(), files.gid()),
            uids: [status.ruid, status.euid, status.suid],
            gids: [status.rgid, status.egid, status.sgid],
            cap_permitted: status.capprm,
        })
    }
}

/// The CPU clock in kHz as the cycle counter sees it: cycles per nanosecond
/// of this thread's own CPU time over a short busy loop, or `None` where
/// the host has no cycle counter. For hosts that publish no clock (arm64's
/// /proc/cpuinfo has none).
pub fn measure_clock_khz() -> Option<u64> {
    let open = |event: HostEvent| {
        let mut counter = encoding::builder(&event).build().ok()?;
        counter.enable().ok()?;
        Some(counter)
    };
    let mut cycles = open(HostEvent::Cycles)?;
    let mut task = open(HostEvent::TaskClock)?;
    let (c0, t0) = (cycles.read().ok()?, task.read().ok()?);
    // About 20 ms of CPU time: long enough that the reads' own cost is
    // noise, short enough not to delay the start.
    let mut spin = 0u64;
    while task.read().ok()?.saturating_sub(t0) < 20_000_000 {
        for i in 0..10_000u64 {
            spin = std::hint::black_box(spin.wrapping_add(i));
        }
    }
    let (c1, t1) = (cycles.read().ok()?, task.read().ok()?);
    let ns = t1.saturating_sub(t0);
    let counted = c1.saturating_sub(c0);
    (ns > 0 && counted > 0).then(|| (counted as u128 * 1_000_000 / ns as u128) as u64)
}
