//! Reading many CPUs' counting groups at once (docs/device.md §2, "Reads
//! over many CPUs").
//!
//! Reading a CPU-wide perf group that runs on another CPU is a synchronous
//! IPI to that CPU: read one after another, an ALL or EACH read costs one IPI
//! round trip per CPU, and the caller waits for each. With enough CPUs a
//! reader thread per CPU, bound to it, reads that CPU's groups locally (no
//! IPI) while the others do the same, and the caller reads its own CPU's
//! groups meanwhile. The readers all sleep on one futex word, the bell: a
//! read leaves each CPU's batch in that reader's inbox and rings once, one
//! `FUTEX_WAKE` for every reader, where waking them one by one cost the
//! caller a system call (and, in a VM, an exit) each (docs/transport-speed.md,
//! "A 16-CPU machine"). Waking threads still costs more than a few IPIs, so
//! below `parallel_from` distinct CPUs the caller reads them all itself. Only
//! CPU-wide groups go to the readers: a per-thread group interrupts its CPU
//! only while its thread runs there, and the thread that reads (the PME
//! thread, as a rule) runs here.
//!
//! The groups move to the reader threads and back (a `Box` each, no copy of
//! the counts): a reader never sees caller memory and holds no lock while it
//! reads, and a panic in a read is answered with an error for that group
//! only, so no group is ever lost.

use super::DeviceError;
use super::open_file::LiveGroup;
use crate::backend::Target;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;

/// One group's reading: cumulative counts, or why there are none.
pub type Counts = Result<Vec<u64>, DeviceError>;

/// Groups for one reader, tagged with their place in the open's list. A
/// batch reports to its [`Completion`] when it is dropped, read or not, so
/// the caller is woken exactly once per batch whatever happens.
struct Batch {
    groups: Vec<(usize, LiveGroup)>,
    read: Vec<(usize, LiveGroup, Counts)>,
    shared: bool,
    done: Arc<Completion>,
}

impl Batch {
    fn read_all(&mut self) {
        for (index, mut group) in std::mem::take(&mut self.groups) {
            let counts = read_one(&mut group, self.shared);
            self.read.push((index, group, counts));
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        let unread = std::mem::take(&mut self.groups)
            .into_iter()
            .map(|(index, group)| {
                let why = DeviceError::Internal("a reader thread dropped its groups unread".into());
                (index, group, Err(why))
            });
        let mut read = std::mem::take(&mut self.read);
        read.extend(unread);
        self.done.finish(read);
    }
}

/// Where the readers leave their batches; the last one wakes the caller
/// (one wake-up per read, not one per CPU).
struct Completion {
    read: Mutex<Vec<(usize, LiveGroup, Counts)>>,
    remaining: AtomicUsize,
    caller: Thread,
}

impl Completion {
    fn finish(&self, read: Vec<(usize, LiveGroup, Counts)>) {
        super::lock(&self.read).extend(read);
        if self.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.caller.unpark();
        }
    }

    fn wait(&self) {
        while self.remaining.load(Ordering::Acquire) != 0 {
            std::thread::park();
        }
    }
}

/// What a reader and the callers share: the reader's batches to read, or
/// `None` once the reader is gone (its thread ended), when callers read
/// that CPU themselves.
struct Inbox {
    batches: Mutex<Option<Vec<Batch>>>,
}

/// The futex word every reader sleeps on, and whether the readers are to
/// end (the device is going away).
struct Bell {
    rung: AtomicU32,
    closing: AtomicBool,
}

impl Bell {
    fn ring(&self) {
        self.rung.fetch_add(1, Ordering::SeqCst);
        atomic_wait::wake_all(&self.rung);
    }
}

/// The reader threads, one per CPU, started on first use.
pub struct GroupReaders {
    /// Fewest distinct CPUs a read must span to go parallel; 0 never does.
    parallel_from: usize,
    /// Indexed by CPU number. `None` inside: the thread could not start, so
    /// that CPU is read by the caller.
    readers: Vec<OnceLock<Option<Arc<Inbox>>>>,
    bell: Arc<Bell>,
}

impl GroupReaders {
    pub fn new(parallel_from: usize, cpu_slots: usize) -> Self {
        GroupReaders {
            parallel_from,
            readers: (0..cpu_slots).map(|_| OnceLock::new()).collect(),
            bell: Arc::new(Bell {
                rung: AtomicU32::new(0),
                closing: AtomicBool::new(false),
            }),
        }
    }

    /// Reads every group, in the order of `groups`, which come back in the
    /// same order.
    pub fn read(&self, groups: &mut Vec<LiveGroup>, shared: bool) -> Vec<Counts> {
        if !self.goes_parallel(groups) {
            return groups.iter_mut().map(|g| g.counts(shared)).collect();
        }
        let here = nix::sched::sched_getcpu().ok().map(|c| c as u32);
        let mut by_cpu: Vec<(u32, Vec<(usize, LiveGroup)>)> = Vec::new();
        let mut mine = Vec::new();
        for (index, group) in std::mem::take(groups).into_iter().enumerate() {
            let cpu = group.cpu;
            if group.target != Target::AllTasks || Some(cpu) == here || self.reader(cpu).is_none() {
                mine.push((index, group));
            } else if let Some((_, batch)) = by_cpu.iter_mut().find(|(c, _)| *c == cpu) {
                batch.push((index, group));
            } else {
                by_cpu.push((cpu, vec![(index, group)]));
            }
        }
        let done = Arc::new(Completion {
            read: Mutex::new(Vec::new()),
            remaining: AtomicUsize::new(by_cpu.len()),
            caller: std::thread::current(),
        });
        for (cpu, groups) in by_cpu {
            let mut batch = Batch {
                groups,
                read: Vec::new(),
                shared,
                done: done.clone(),
            };
            let mut inbox = self.reader(cpu).map(|inbox| super::lock(&inbox.batches));
            match inbox.as_mut().and_then(|batches| batches.as_mut()) {
                Some(batches) => batches.push(batch),
                // A reader that is gone: its CPU's groups are read here.
                None => mine.append(&mut batch.groups),
            }
        }
        self.bell.ring();
        let mut read: Vec<_> = mine
            .into_iter()
            .map(|(index, mut group)| {
                let counts = read_one(&mut group, shared);
                (index, group, counts)
            })
            .collect();
        done.wait();
        read.append(&mut super::lock(&done.read));
        read.sort_unstable_by_key(|(index, ..)| *index);
        read.into_iter()
            .map(|(_, group, counts)| {
                groups.push(group);
                counts
            })
            .collect()
    }

    fn goes_parallel(&self, groups: &[LiveGroup]) -> bool {
        if self.parallel_from == 0 || groups.len() < self.parallel_from {
            return false;
        }
        let mut cpus: Vec<u32> = groups
            .iter()
            .filter(|g| g.target == Target::AllTasks)
            .map(|g| g.cpu)
            .collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus.len() >= self.parallel_from
    }

    /// `cpu`'s reader, started if this is the first read there.
    fn reader(&self, cpu: u32) -> Option<&Arc<Inbox>> {
        self.readers
            .get(cpu as usize)?
            .get_or_init(|| start_reader(cpu, &self.bell))
            .as_ref()
    }
}

impl Drop for GroupReaders {
    fn drop(&mut self) {
        self.bell.closing.store(true, Ordering::SeqCst);
        self.bell.ring();
    }
}

fn start_reader(cpu: u32, bell: &Arc<Bell>) -> Option<Arc<Inbox>> {
    let inbox = Arc::new(Inbox {
        batches: Mutex::new(Some(Vec::new())),
    });
    let (theirs, bell) = (inbox.clone(), bell.clone());
    let started = std::thread::Builder::new()
        .name(format!("pfmd-read/{cpu}"))
        .stack_size(256 * 1024)
        .spawn(move || serve(cpu, &theirs, &bell));
    match started {
        Ok(_) => Some(inbox),
        Err(e) => {
            tracing::warn!(
                cpu,
                "no reader thread for this CPU ({e}): its groups are read by the caller"
            );
            None
        }
    }
}

/// A reader's life: bound to its CPU, it reads each batch there. After the
/// CPU went offline and came back the kernel has widened the thread's
/// affinity, so it binds again when it finds itself elsewhere; while the
/// CPU is offline it reads from wherever it runs (an IPI per group again,
/// still correct).
fn serve(cpu: u32, inbox: &Inbox, bell: &Bell) {
    // However the thread ends, the inbox closes and what is in it is
    // dropped, which tells each waiting caller.
    struct Closing<'a>(&'a Inbox);
    impl Drop for Closing<'_> {
        fn drop(&mut self) {
            let left = super::lock(&self.0.batches).take();
            drop(left);
        }
    }
    let _closing = Closing(inbox);
    bind(cpu);
    loop {
        let rung = bell.rung.load(Ordering::SeqCst);
        let batches = super::lock(&inbox.batches)
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        if batches.is_empty() {
            if bell.closing.load(Ordering::SeqCst) {
                return;
            }
            atomic_wait::wait(&bell.rung, rung);
            continue;
        }
        if nix::sched::sched_getcpu().ok() != Some(cpu as usize) {
            bind(cpu);
        }
        for mut batch in batches {
            batch.read_all();
        }
    }
}

fn bind(cpu: u32) {
    let mut set = nix::sched::CpuSet::new();
    let bound = set
        .set(cpu as usize)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = bound {
        tracing::debug!(cpu, "reader thread not bound to its CPU: {e}");
    }
}

/// One group's counts; a panic inside the read is that group's `EIO`, and
/// the group itself survives it.
fn read_one(group: &mut LiveGroup, shared: bool) -> Counts {
    catch_unwind(AssertUnwindSafe(|| group.counts(shared))).unwrap_or_else(|_| {
        Err(DeviceError::Internal(
            "reading a counting group panicked".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::mock::MockBackend;
    use crate::backend::{GroupSpec, ModeFilter};
    use pfm_model::HostEvent;

    /// Groups on `cpus`, CPU `c` having counted `1000 c + 7` cycles,
    /// and a per-thread group of thread 42 after each.
    fn groups(backend: &MockBackend, cpus: &[u32]) -> Vec<LiveGroup> {
        let mut out = Vec::new();
        for &cpu in cpus {
            for target in [Target::AllTasks, Target::Thread(42)] {
                let spec = GroupSpec {
                    target,
                    cpu,
                    events: vec![HostEvent::CpuClock],
                    modes: ModeFilter::ALL,
                    shared: false,
                };
                out.push(super::super::open_file::open_group(backend, &spec, true).unwrap());
            }
            backend.advance(
                cpu,
                Target::AllTasks,
                HostEvent::CpuClock,
                1000 * cpu as u64 + 7,
            );
            backend.advance(cpu, Target::Thread(42), HostEvent::CpuClock, cpu as u64 + 1);
        }
        out
    }

    fn read_ok(readers: &GroupReaders, live: &mut Vec<LiveGroup>) -> Vec<Vec<u64>> {
        readers
            .read(live, false)
            .into_iter()
            .map(Result::unwrap)
            .collect()
    }

    fn expected(cpus: &[u32]) -> Vec<Vec<u64>> {
        cpus.iter()
            .flat_map(|&c| [vec![1000 * c as u64 + 7], vec![c as u64 + 1]])
            .collect()
    }

    #[test]
    fn parallel_reads_return_every_group_in_its_place() {
        let backend = MockBackend::with_events(&[HostEvent::CpuClock]);
        // CPU 70 has no slot: the caller reads it; 1 and 3 are holes.
        let cpus = [0, 2, 4, 5, 6, 7, 70];
        let mut live = groups(&backend, &cpus);
        let readers = GroupReaders::new(2, 8);
        for _ in 0..3 {
            let counts = read_ok(&readers, &mut live);
            assert_eq!(counts, expected(&cpus));
            let order: Vec<u32> = live.iter().map(|g| g.cpu).collect();
            assert_eq!(order, cpus.iter().flat_map(|&c| [c, c]).collect::<Vec<_>>());
        }
        let started = readers.readers.iter().filter(|r| r.get().is_some()).count();
        assert!(
            (5..=6).contains(&started),
            "{started} readers for six CPUs with slots, the caller's own CPU perhaps not"
        );
    }

    #[test]
    fn below_the_threshold_the_caller_reads_and_starts_no_thread() {
        let backend = MockBackend::with_events(&[HostEvent::CpuClock]);
        let cpus = [0, 1, 2];
        let mut live = groups(&backend, &cpus);
        for readers in [GroupReaders::new(4, 8), GroupReaders::new(0, 8)] {
            let counts = read_ok(&readers, &mut live);
            assert_eq!(counts, expected(&cpus));
            assert!(readers.readers.iter().all(|r| r.get().is_none()));
        }
    }

    #[test]
    fn a_gone_readers_cpu_is_read_by_the_caller() {
        let backend = MockBackend::with_events(&[HostEvent::CpuClock]);
        let cpus = [0, 1, 2, 3];
        let mut live = groups(&backend, &cpus);
        let readers = GroupReaders::new(2, 4);
        assert_eq!(read_ok(&readers, &mut live), expected(&cpus));
        // What a reader's end leaves: its inbox closed.
        for reader in readers.readers.iter().filter_map(|r| r.get()?.as_ref()) {
            *super::super::lock(&reader.batches) = None;
        }
        assert_eq!(read_ok(&readers, &mut live), expected(&cpus));
    }

    #[test]
    fn concurrent_reads_each_get_their_own_groups() {
        let backend = MockBackend::with_events(&[HostEvent::CpuClock]);
        let cpus = [0, 1, 2, 3];
        // Four opens' groups, each with its own counts (each set is opened
        // after the previous one's counts moved on), read once in turn.
        let sets: Vec<Vec<LiveGroup>> = (0..4).map(|_| groups(&backend, &cpus)).collect();
        let in_turn = GroupReaders::new(0, 4);
        let mut sets: Vec<_> = sets
            .into_iter()
            .map(|mut live| {
                let want = read_ok(&in_turn, &mut live);
                (live, want)
            })
            .collect();
        assert_ne!(
            sets[0].1, sets[3].1,
            "the sets must differ to tell them apart"
        );
        let readers = GroupReaders::new(2, 4);
        std::thread::scope(|s| {
            for (live, want) in &mut sets {
                let readers = &readers;
                s.spawn(move || {
                    for _ in 0..200 {
                        assert_eq!(&read_ok(readers, live), want);
                    }
                });
            }
        });
    }

    #[test]
    fn the_readers_end_with_their_device() {
        let backend = MockBackend::with_events(&[HostEvent::CpuClock]);
        let cpus = [0, 1, 2, 3];
        let mut live = groups(&backend, &cpus);
        let readers = GroupReaders::new(2, 4);
        read_ok(&readers, &mut live);
        let inboxes: Vec<Arc<Inbox>> = readers
            .readers
            .iter()
            .filter_map(|r| r.get()?.clone())
            .collect();
        assert!(!inboxes.is_empty());
        drop(readers);
        // Each thread drops its handle on the inbox as it ends.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while inboxes.iter().any(|i| Arc::strong_count(i) > 1) {
            assert!(
                std::time::Instant::now() < deadline,
                "a reader thread outlived its device"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            inboxes
                .iter()
                .all(|i| super::super::lock(&i.batches).is_none())
        );
    }
}
