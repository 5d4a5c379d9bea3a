//! Sampling through perf ring buffers. One thread waits on every sampler with
//! epoll (blocking, no timeout: an idle daemon makes no wakeups) and delivers
//! parsed records; readers drain before they look, so nothing waits for the
//! watermark. Records are parsed by `perf-event-data` (through perf-event2).
//!
//! The thread is supervised: a panic while delivering, or an epoll error, is
//! logged and the loop starts again. If it keeps failing, the hub is marked
//! failed and every new sampler is refused with `EIO`, so opens report the
//! failure instead of histograms going quiet.

use super::encoding;
use super::group::errno_of;
use crate::backend::{BackendError, Sample, SampleSink, SamplerSpec, SamplingStream, Target};
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use perf_event::data::Record;
use perf_event::data::endian::Native;
use perf_event::data::parse::{ParseConfig, Parser};
use perf_event::{SampleFlag, Sampler, data};
// The kernel UAPI's numbers, from the bindings perf-event2 is built on.
use perf_event_open_sys::bindings::{
    PERF_CONTEXT_MAX, PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_USER, PERF_RECORD_SAMPLE,
};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failures of the sampler loop within [`FAILURE_WINDOW`] after which the
/// hub gives up.
const MAX_FAILURES: u32 = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(10);

/// Ring buffer data bytes per sampler; the sampler thread wakes at half.
pub const RING_BYTES: usize = 256 * 1024;

struct Entry {
    sampler: Mutex<Sampler>,
    /// How to parse a sample whose callchain is empty, where the sampler
    /// records callchains ([`deliver_chainless`]).
    chainless: Option<ParseConfig<Native>>,
    sink: Arc<dyn SampleSink>,
    cpu: u32,
    /// The sampler's perf fd, for epoll and for switching it on and off
    /// without the ring lock (see [`PerfSampler::switch`]).
    fd: RawFd,
}

impl Entry {
    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `fd` is the fd of the sampler this entry owns, so it stays
        // open as long as the entry, which the borrow cannot outlive.
        unsafe { BorrowedFd::borrow_raw(self.fd) }
    }
}

/// The epoll set and the thread that serves it.
pub struct Hub {
    epoll: Epoll,
    entries: Mutex<HashMap<u64, Arc<Entry>>>,
    next_token: AtomicU64,
    /// Set when the sampler loop failed for good.
    failed: AtomicBool,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").finish_non_exhaustive()
    }
}

impl Hub {
    pub fn start() -> std::io::Result<Arc<Hub>> {
        let hub = Arc::new(Hub {
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
            entries: Mutex::default(),
            next_token: AtomicU64::new(1),
            failed: AtomicBool::new(false),
        });
        let serving = hub.clone();
        std::thread::Builder::new()
            .name("pfm-sampler".into())
            .spawn(move || serving.serve())?;
        Ok(hub)
    }

    /// The supervisor: runs the loop again after a panic or an epoll error,
    /// unless failures come faster than [`MAX_FAILURES`] per
    /// [`FAILURE_WINDOW`].
    fn serve(&self) {
        let mut failures: Vec<Instant> = Vec::new();
        loop {
            let why = match catch_unwind(AssertUnwindSafe(|| self.serve_until_error())) {
                Ok(errno) => format!("epoll_wait: {errno}"),
                Err(panic) => format!(
                    "panic: {}",
                    panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                ),
            };
            let now = Instant::now();
            failures.retain(|t| now.duration_since(*t) < FAILURE_WINDOW);
            failures.push(now);
            if failures.len() as u32 >= MAX_FAILURES {
                self.failed.store(true, Ordering::Relaxed);
                tracing::error!(
                    "sampler thread failed {MAX_FAILURES} times in {FAILURE_WINDOW:?} ({why}); \
                     new sampling is refused with EIO, restart pfmd"
                );
                return;
            }
            tracing::error!("sampler thread failed ({why}); restarting it");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn serve_until_error(&self) -> Errno {
        let mut events = [EpollEvent::empty(); 64];
        loop {
            let n = match self.epoll.wait(&mut events, EpollTimeout::NONE) {
                Ok(n) => n,
                Err(Errno::EINTR) => continue,
                Err(e) => return e,
            };
            for event in &events[..n] {
                let entry = self.lock().get(&event.data()).cloned();
                if let Some(entry) = entry {
                    drain(&entry);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn open(
        self: &Arc<Self>,
        spec: &SamplerSpec,
        sink: Arc<dyn SampleSink>,
    ) -> Result<PerfSampler, BackendError> {
        if self.failed.load(Ordering::Relaxed) {
            return Err(BackendError::Io {
                op: "sampler thread (failed; see the log)",
                errno: Errno::EIO,
            });
        }
        let open_error = |e: std::io::Error| BackendError::Open {
            event: spec.event,
            cpu: spec.cpu,
            errno: errno_of(&e),
        };
        let mut builder = encoding::builder(&spec.event);
        let mut flags = SampleFlag::IP | SampleFlag::TID | SampleFlag::CPU;
        if spec.read_count {
            flags |= SampleFlag::READ;
        }
        if spec.callchain {
            flags |= SampleFlag::CALLCHAIN;
            builder.exclude_callchain_user(true).sample_max_stack(4);
        }
        builder
            .one_cpu(spec.cpu as usize)
            .exclude_user(!spec.modes.user)
            .exclude_kernel(!spec.modes.kernel)
            .exclude_hv(!spec.modes.hypervisor)
            .sample_period(spec.period.max(1))
            .sample(flags)
            .wakeup_watermark(RING_BYTES / 2)
            .enabled(false)
            .pinned(!spec.shared);
        match spec.target {
            Target::AllTasks => {
                builder.any_pid();
            }
            Target::Thread(tid) => {
                builder.observe_pid(tid).inherit(true);
            }
        }
        let counter = match builder.build() {
            // Kernels before 6.12 refuse PERF_SAMPLE_READ on inherited
            // events: sample without the count (nominal weights) there.
            Err(e) if spec.read_count && spec.target != Target::AllTasks => {
                crate::logging::once(
                    "no-inherited-sample-read",
                    &format!(
                        "this kernel cannot read counts into inherited samples ({e}): \
                         per-thread ticks use the nominal period"
                    ),
                );
                // `sample()` only adds flags: clear READ in the attr itself.
                builder.attrs_mut().sample_type &= !SampleFlag::READ.bits();
                builder.build()
            }
            built => built,
        }
        .map_err(open_error)?;
        let sampler = counter.sampled(RING_BYTES).map_err(open_error)?;
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let chainless = spec.callchain.then(|| {
            let mut attr = *builder.attrs();
            attr.sample_type &= !SampleFlag::CALLCHAIN.bits();
            ParseConfig::from(attr)
        });
        let entry = Arc::new(Entry {
            fd: sampler.as_raw_fd(),
            sampler: Mutex::new(sampler),
            chainless,
            sink,
            cpu: spec.cpu,
        });
        self.epoll
            .add(entry.fd(), EpollEvent::new(EpollFlags::EPOLLIN, token))
            .map_err(|errno| BackendError::Io {
                op: "epoll_ctl(ADD)",
                errno,
            })?;
        self.lock().insert(token, entry.clone());
        Ok(PerfSampler {
            hub: self.clone(),
            token,
            entry,
        })
    }
}

/// Records one drain takes at most: more than the ring holds of the
/// smallest records, so a drain empties what was there when it began, but
/// a sampler whose records come faster than they are parsed (a short
/// period on a slow machine) cannot hold its lock, and the request that
/// drains or switches it, for good. What is left wakes the sampler thread
/// again (its epoll set is level-triggered).
const MAX_RECORDS_PER_DRAIN: usize = RING_BYTES / 16;

/// Parses and delivers the records in `entry`'s buffer, up to
/// [`MAX_RECORDS_PER_DRAIN`].
fn drain(entry: &Entry) {
    let mut sampler = entry.sampler.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..MAX_RECORDS_PER_DRAIN {
        let Some(record) = sampler.next_record() else {
            break;
        };
        let misc = record.misc();
        match record.parse_record() {
            Ok(Record::Sample(s)) => deliver(entry, &s, misc),
            Ok(Record::Lost(lost)) => entry.sink.lost(entry.cpu, lost.lost),
            Ok(Record::Throttle(_)) => entry.sink.throttled(),
            Ok(_) => {}
            Err(e) => {
                if !deliver_chainless(entry, &record) {
                    tracing::debug!("unparsable perf record: {e}");
                }
            }
        }
    }
}

fn deliver(entry: &Entry, s: &data::Sample, misc: u16) {
    let sample = Sample {
        ip: s.ip().unwrap_or(0),
        // Unknown is never 0: pid 0 is the idle task.
        pid: s.pid().unwrap_or(u32::MAX),
        tid: s.tid().unwrap_or(0),
        cpu: s.cpu().unwrap_or(entry.cpu),
        user: u32::from(misc) & PERF_RECORD_MISC_CPUMODE_MASK == PERF_RECORD_MISC_USER,
        caller: s.callchain().and_then(caller_of),
        count: s
            .values()
            .and_then(|group| group.get(0))
            .map(|entry| entry.value()),
    };
    entry.sink.sample(&sample);
}

/// perf-event-data (0.1.8, the newest) fails on a sample whose callchain is
/// empty and ends the record, as every user-mode sample's is with
/// `exclude_callchain_user`: it reads the zero-length chain past the end
/// as EOF. Such a record is the same sample without a callchain: it is
/// parsed and delivered as one. False if `record` is not such a sample.
fn deliver_chainless(entry: &Entry, record: &perf_event::Record) -> bool {
    let Some(config) = entry.chainless.as_ref() else {
        return false;
    };
    if record.ty() != PERF_RECORD_SAMPLE {
        return false;
    }
    let bytes = record.to_contiguous();
    let Some(without_chain) = bytes.strip_suffix(&0u64.to_ne_bytes()) else {
        return false;
    };
    match Parser::new(without_chain, config.clone()).parse::<data::Sample>() {
        Ok(sample) => {
            deliver(entry, &sample, record.misc());
            true
        }
        Err(_) => false,
    }
}

/// The first return address of a kernel callchain: entries are context
/// markers, then the sampled IP, then its callers.
fn caller_of(chain: &[u64]) -> Option<u64> {
    chain
        .iter()
        .copied()
        .filter(|&a| a < PERF_CONTEXT_MAX)
        .nth(1)
}

pub struct PerfSampler {
    hub: Arc<Hub>,
    token: u64,
    entry: Arc<Entry>,
}

impl PerfSampler {
    /// Switches the sampler on or off. Not under the ring lock: the sampler
    /// thread holds that while it parses a full ring, and a switch that
    /// waited for it would leave this sampler running (and sampling the
    /// parse itself) after the counting groups beside it stopped.
    fn switch(&self, op: &'static str, on: bool) -> Result<(), BackendError> {
        let fd = self.entry.fd().as_raw_fd();
        // SAFETY: `fd` is the sampler's open perf fd (borrowed from the entry
        // `self` holds); ENABLE and DISABLE take no pointer.
        let rc = unsafe {
            if on {
                perf_event_open_sys::ioctls::ENABLE(fd, 0)
            } else {
                perf_event_open_sys::ioctls::DISABLE(fd, 0)
            }
        };
        if rc < 0 {
            return Err(BackendError::Io {
                op,
                errno: Errno::last(),
            });
        }
        Ok(())
    }
}

impl SamplingStream for PerfSampler {
    fn enable(&mut self) -> Result<(), BackendError> {
        self.switch("enable sampler", true)
    }
    fn disable(&mut self) -> Result<(), BackendError> {
        self.switch("disable sampler", false)
    }
    fn drain(&mut self) {
        drain(&self.entry);
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        if let Err(e) = self.hub.epoll.delete(self.entry.fd()) {
            tracing::debug!("epoll_ctl(DEL): {e}");
        }
        self.hub.lock().remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_is_the_first_return_address_after_markers() {
        let kernel = (-128i64) as u64; // PERF_CONTEXT_KERNEL
        assert_eq!(
            caller_of(&[kernel, 0xffff_1000, 0xffff_2000, 0xffff_3000]),
            Some(0xffff_2000)
        );
        assert_eq!(caller_of(&[kernel, 0xffff_1000]), None);
        assert_eq!(caller_of(&[]), None);
    }
}
