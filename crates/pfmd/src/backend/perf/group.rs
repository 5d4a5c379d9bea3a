//! One perf counting group: a leader and its members on one CPU for one
//! target, enabled, disabled and read as a unit.
//!
//! A read is one `read(2)` of the leader. For a CPU-wide group whose CPU is
//! not the reader's, the kernel runs the read on that CPU
//! (`smp_call_function_single`): an IPI, ~5 µs on the 2-vCPU VM of
//! docs/transport-speed.md against 0.3–0.4 µs for the reader's own CPU.
//! What perf offers instead was measured there (6.18) and is not used:
//! - the mmap'd user page (`perf_event_mmap_page`) of a CPU-wide `cpu-clock`
//!   group does not follow the count (its `offset` and times change only
//!   when the event is scheduled, which a CPU-wide event never is;
//!   `cap_user_time` 0, `index` 0), and `rdpmc` needs a hardware counter
//!   read on its own CPU;
//! - handing the read to a thread bound to the group's CPU costs a wake-up
//!   of that CPU, more than the IPI (7.8 µs p50 for two groups against
//!   5.9 µs read directly); a thread spinning there would be cheaper but
//!   would itself be counted by every `PCNTLOGALL` open of that CPU.
//!
//! So a group is read where the request is served: over FUSE io_uring that
//! is the caller's CPU, and a ONE-mode open (bound to the caller's CPU)
//! reads locally; ALL and EACH pay one IPI per other CPU.

use super::encoding;
use crate::backend::{BackendError, CountingGroup, GroupReading, GroupSpec, Target};
use nix::errno::Errno;
use perf_event::{Builder, Counter, ReadFormat};
use pfm_model::HostEvent;
use std::io;

/// How a group's values are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadMode {
    /// One `read(2)` of the leader with `PERF_FORMAT_GROUP`: every value and
    /// the times come from one snapshot taken with the group off the PMU.
    Group,
    /// One `read(2)` per event, times from the leader. The events still run
    /// as one group (scheduled together, enabled and disabled together), but
    /// the values are taken one after another, so while the group is enabled
    /// later values may include events that happened after earlier values
    /// were taken. Only used when the kernel refuses `PERF_FORMAT_GROUP` for
    /// the group.
    Individual,
}

/// The `read_format` every event of a group is opened with.
fn read_format(mode: ReadMode) -> ReadFormat {
    let times = ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING;
    match mode {
        // perf-event2 adds PERF_FORMAT_ID to GROUP on its own: values are
        // matched to counters by their kernel id.
        ReadMode::Group => times | ReadFormat::GROUP,
        ReadMode::Individual => times,
    }
}

/// Errno of an error from `perf-event2`. Errors that did not come from the
/// kernel (E2BIG is turned into `Unsupported`, a short or malformed read
/// into a parse error) are given the nearest errno.
pub(crate) fn errno_of(error: &io::Error) -> Errno {
    match error.raw_os_error() {
        Some(raw) => Errno::from_raw(raw),
        None => match error.kind() {
            io::ErrorKind::Unsupported => Errno::E2BIG,
            io::ErrorKind::UnexpectedEof => Errno::ENODATA,
            _ => Errno::EIO,
        },
    }
}

/// A read error: 0 bytes from the leader means the kernel put a pinned group
/// in error state because it could not be scheduled.
pub(crate) fn read_error(error: io::Error) -> BackendError {
    if error.kind() == io::ErrorKind::UnexpectedEof {
        BackendError::Unschedulable
    } else {
        BackendError::Io {
            op: "read",
            errno: errno_of(&error),
        }
    }
}

/// The attr of one event of a group.
fn event_builder(
    spec: &GroupSpec,
    event: &HostEvent,
    leader: bool,
    mode: ReadMode,
) -> Builder<'static> {
    let mut builder = encoding::builder(event);
    builder
        .one_cpu(spec.cpu as usize)
        .exclude_user(!spec.modes.user)
        .exclude_kernel(!spec.modes.kernel)
        .exclude_hv(!spec.modes.hypervisor)
        .read_format(read_format(mode));
    match spec.target {
        Target::AllTasks => {
            builder.any_pid();
        }
        Target::Thread(tid) => {
            builder.observe_pid(tid).inherit(true);
        }
    }
    if leader {
        // The group is created off: nothing counts until enable().
        builder.enabled(false).pinned(!spec.shared);
    } else {
        // Members are on and follow the leader, as perf(1) opens groups:
        // they count exactly when the leader does.
        builder.enabled(true);
    }
    builder
}

/// A live perf group.
#[derive(Debug)]
pub(crate) struct PerfGroup {
    /// Distinct events; `counters[0]` is the leader.
    counters: Vec<Counter>,
    /// For each event of the spec, its index in `counters`.
    slots: Vec<usize>,
    mode: ReadMode,
}

impl PerfGroup {
    /// Opens `spec` reading with `mode`. Duplicate events are opened once.
    pub(crate) fn open(spec: &GroupSpec, mode: ReadMode) -> Result<PerfGroup, BackendError> {
        let mut distinct: Vec<HostEvent> = Vec::new();
        let slots = spec
            .events
            .iter()
            .map(|event| match distinct.iter().position(|e| e == event) {
                Some(index) => index,
                None => {
                    distinct.push(*event);
                    distinct.len() - 1
                }
            })
            .collect();
        let Some((first, rest)) = distinct.split_first() else {
            return Err(BackendError::Io {
                op: "open an empty group",
                errno: Errno::EINVAL,
            });
        };
        let open_error = |event: &HostEvent, error: io::Error| BackendError::Open {
            event: *event,
            cpu: spec.cpu,
            errno: errno_of(&error),
        };
        let leader = event_builder(spec, first, true, mode)
            .build()
            .map_err(|e| open_error(first, e))?;
        let mut counters = vec![leader];
        for event in rest {
            let member = event_builder(spec, event, false, mode)
                .build_with_group(&mut counters[0])
                .map_err(|e| open_error(event, e))?;
            counters.push(member);
        }
        tracing::debug!(
            cpu = spec.cpu,
            target = ?spec.target,
            pinned = !spec.shared,
            ?mode,
            events = %distinct.iter().map(HostEvent::perf_name).collect::<Vec<_>>().join(","),
            "perf group opened"
        );
        Ok(PerfGroup {
            counters,
            slots,
            mode,
        })
    }

    /// Values of the distinct events, in `counters` order, and the times.
    fn read_counters(&mut self) -> Result<(Vec<u64>, u64, u64), BackendError> {
        match self.mode {
            ReadMode::Group => {
                let data = self.counters[0].read_group().map_err(read_error)?;
                let values = self
                    .counters
                    .iter()
                    .map(|counter| {
                        data.get(counter)
                            .map(|entry| entry.value())
                            .ok_or(BackendError::Io {
                                op: "read (a group member is missing from the group read)",
                                errno: Errno::EIO,
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let nanos = |d: Option<std::time::Duration>| {
                    d.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                };
                Ok((
                    values,
                    nanos(data.time_enabled()),
                    nanos(data.time_running()),
                ))
            }
            ReadMode::Individual => {
                let mut values = Vec::with_capacity(self.counters.len());
                let (mut enabled, mut running) = (0, 0);
                for (index, counter) in self.counters.iter_mut().enumerate() {
                    let reading = counter.read_count_and_time().map_err(read_error)?;
                    if index == 0 {
                        (enabled, running) = (reading.time_enabled, reading.time_running);
                    }
                    values.push(reading.count);
                }
                Ok((values, enabled, running))
            }
        }
    }
}

impl CountingGroup for PerfGroup {
    // Only the leader is switched: the members stay enabled and count
    // exactly while it does (the kernel schedules a group only with its
    // leader). PERF_IOC_FLAG_GROUP, which switches every member too, leaves
    // the software members of a CPU-wide group counting nothing after their
    // first disable and enable (Linux 6.18: context-switches, page-faults and
    // task-clock stay at the counts of the first enabled stretch).
    fn enable(&mut self) -> Result<(), BackendError> {
        self.counters[0].enable().map_err(|e| BackendError::Io {
            op: "enable",
            errno: errno_of(&e),
        })
    }

    fn disable(&mut self) -> Result<(), BackendError> {
        self.counters[0].disable().map_err(|e| BackendError::Io {
            op: "disable",
            errno: errno_of(&e),
        })
    }

    fn read(&mut self) -> Result<GroupReading, BackendError> {
        let (distinct, time_enabled, time_running) = self.read_counters()?;
        Ok(GroupReading {
            values: self.slots.iter().map(|&slot| distinct[slot]).collect(),
            time_enabled,
            time_running,
        })
    }
}
