//! These run against the real kernel, as root (system-wide groups need it).
//! Most assume only software events, so they pass on hosts with and without
//! a PMU; the `hardware_*` ones need one and run in the PMU VM.

use super::*;
use crate::backend::{ModeFilter, Sample};
use std::sync::{Arc, mpsc};
use std::time::Instant;

const MS: u64 = 1_000_000;

fn backend_with(mode: Option<ReadMode>) -> PerfBackend {
    PerfBackend {
        force_read_mode: mode,
        ..PerfBackend::probe()
    }
}

/// Both ways of reading a group.
const MODES: [Option<ReadMode>; 2] = [Some(ReadMode::Group), Some(ReadMode::Individual)];

/// The online CPUs, from sysfs ("0-1", "0,2-3").
fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    let mut cpus = Vec::new();
    for part in text.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

fn spec(target: Target, cpu: u32, events: &[HostEvent]) -> GroupSpec {
    GroupSpec {
        target,
        cpu,
        events: events.to_vec(),
        modes: ModeFilter::ALL,
        shared: false,
    }
}

/// CPU time of the calling thread in ns. Async-signal-safe (used in a
/// forked child of a multi-threaded process).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000) + ts.tv_nsec as u64
}

/// Spins until the calling thread has used `ns` of CPU. No allocation, no
/// locks: safe in a forked child.
fn burn(ns: u64) {
    let start = thread_cpu_ns();
    while thread_cpu_ns().wrapping_sub(start) < ns {
        std::hint::spin_loop();
    }
}

#[test]
fn probe_answers_every_named_event_and_software_events_open() {
    let backend = PerfBackend::probe();
    for event in &HostEvent::NAMED {
        let result = backend.check(event);
        eprintln!("{event}: {result:?}");
        if let Err(why) = &result {
            assert!(!why.is_empty(), "{event}: empty reason");
        }
    }
    for event in [
        HostEvent::CpuClock,
        HostEvent::TaskClock,
        HostEvent::PageFaults,
        HostEvent::ContextSwitches,
    ] {
        assert_eq!(backend.check(&event), Ok(()), "{event}");
    }
}

#[test]
fn describe_names_the_errno() {
    assert_eq!(
        describe(Errno::ENOENT),
        "not supported by this host (ENOENT)"
    );
    assert!(describe(Errno::EBUSY).ends_with("(EBUSY)"));
}

fn cpu_wide_group_counts_only_while_enabled(mode: Option<ReadMode>) {
    let backend = backend_with(mode);
    let events = [
        HostEvent::CpuClock,
        HostEvent::TaskClock,
        HostEvent::ContextSwitches,
    ];
    let mut group = backend
        .open_group(&spec(Target::AllTasks, 0, &events))
        .unwrap();

    // Created disabled: nothing moves.
    let fresh = group.read().unwrap();
    assert_eq!(fresh.values, vec![0, 0, 0], "{mode:?}");
    assert_eq!(fresh.time_enabled, 0, "{mode:?}");
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        group.read().unwrap(),
        fresh,
        "{mode:?}: disabled group moved"
    );

    let start = Instant::now();
    group.enable().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let on = group.read().unwrap();
    let outer = start.elapsed().as_nanos() as u64;
    assert!(on.time_enabled >= 20 * MS, "{mode:?}: {on:?}");
    assert!(on.time_enabled <= outer, "{mode:?}: {on:?} outer {outer}");
    assert!(on.time_running > 0, "{mode:?}: {on:?}");
    // cpu-wide cpu-clock is the wall time the CPU spent counting.
    let cpu_clock = on.values[0];
    assert!(
        cpu_clock >= 10 * MS && cpu_clock <= outer + MS,
        "{mode:?}: cpu-clock {cpu_clock} ns after sleeping 20 ms (outer {outer})"
    );

    group.disable().unwrap();
    let off = group.read().unwrap();
    for (a, b) in on.values.iter().zip(&off.values) {
        assert!(b >= a, "{mode:?}: counts went backwards: {on:?} {off:?}");
    }
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(group.read().unwrap(), off, "{mode:?}: disabled group moved");

    // Enabling again continues from the cumulative values, the members'
    // too (switched with PERF_IOC_FLAG_GROUP, the software members of a
    // CPU-wide group stayed off after their first disable).
    group.enable().unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let again = group.read().unwrap();
    assert!(again.values[0] > off.values[0], "{mode:?}: {again:?}");
    assert!(
        again.values[1] > off.values[1],
        "{mode:?}: task-clock did not count after enabling again: {off:?} {again:?}"
    );
    assert!(again.time_enabled > off.time_enabled, "{mode:?}: {again:?}");
}

#[test]
fn cpu_wide_group_counts_only_while_enabled_group_read() {
    cpu_wide_group_counts_only_while_enabled(MODES[0]);
}

#[test]
fn cpu_wide_group_counts_only_while_enabled_individual_reads() {
    cpu_wide_group_counts_only_while_enabled(MODES[1]);
}

/// Opens task-clock groups for a fresh thread T on every CPU, lets T run
/// `action`, and returns (task-clock summed over the CPUs, T's own CPU time
/// while running `action`).
fn counted_for_thread(backend: &PerfBackend, action: impl FnOnce() + Send + 'static) -> (u64, u64) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        let before = thread_cpu_ns();
        action();
        done_tx.send(thread_cpu_ns() - before).unwrap();
        // Stay alive until the groups are read.
        let _ = exit_rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let mut groups: Vec<_> = online_cpus()
        .into_iter()
        .map(|cpu| {
            backend
                .open_group(&spec(
                    Target::Thread(tid),
                    cpu,
                    &[HostEvent::TaskClock, HostEvent::ContextSwitches],
                ))
                .unwrap()
        })
        .collect();
    for group in &mut groups {
        assert_eq!(group.read().unwrap().values, vec![0, 0]);
        group.enable().unwrap();
    }
    go_tx.send(()).unwrap();
    let own = done_rx.recv().unwrap();
    let mut task_clock = 0;
    for group in &mut groups {
        group.disable().unwrap();
        task_clock += group.read().unwrap().values[0];
    }
    exit_tx.send(()).unwrap();
    thread.join().unwrap();
    (task_clock, own)
}

/// T forks a child that burns 50 ms of CPU and waits for it.
fn fork_child_burning_50ms() {
    // SAFETY: the child only calls clock_gettime (async-signal-safe) and
    // _exit: nothing that could find a lock held by another thread of this
    // multi-threaded process.
    match unsafe { nix::unistd::fork() }.unwrap() {
        nix::unistd::ForkResult::Child => {
            burn(50 * MS);
            // SAFETY: _exit ends the child without running the parent's
            // atexit handlers or destructors.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            let status = nix::sys::wait::waitpid(child, None).unwrap();
            assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
        }
    }
}

/// T spawns a thread that burns 50 ms of CPU and joins it.
fn spawn_thread_burning_50ms() {
    std::thread::spawn(|| burn(50 * MS)).join().unwrap();
}

#[test]
fn thread_target_inherits_child_processes_created_after_open() {
    for mode in [None, MODES[0], MODES[1]] {
        let backend = backend_with(mode);
        let (counted, own) = counted_for_thread(&backend, fork_child_burning_50ms);
        assert!(
            counted.saturating_sub(own) >= 40 * MS,
            "{mode:?}: task-clock {counted} ns with the parent's own {own} ns: \
             the child's 50 ms were not counted"
        );
    }
}

#[test]
fn thread_target_inherits_threads_created_after_open() {
    for mode in [None, MODES[0], MODES[1]] {
        let backend = backend_with(mode);
        let (counted, own) = counted_for_thread(&backend, spawn_thread_burning_50ms);
        assert!(
            counted.saturating_sub(own) >= 40 * MS,
            "{mode:?}: task-clock {counted} ns with the spawner's own {own} ns: \
             the new thread's 50 ms were not counted"
        );
    }
}

#[test]
fn thread_target_counts_only_that_thread() {
    // A sibling that exists before the open burns 50 ms while the counted
    // thread sleeps waiting for it: none of it may be counted.
    let backend = PerfBackend::probe();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let sibling = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        burn(50 * MS);
        done_tx.send(()).unwrap();
    });
    let (counted, own) = counted_for_thread(&backend, move || {
        go_tx.send(()).unwrap();
        done_rx.recv().unwrap();
    });
    sibling.join().unwrap();
    assert!(
        counted < own + 10 * MS,
        "task-clock {counted} ns for a thread that used {own} ns itself"
    );
}

#[test]
fn group_reads_of_inherited_groups_work_on_this_kernel() {
    let backend = PerfBackend::probe();
    let me = nix::unistd::gettid().as_raw();
    let mut group = backend
        .open_group(&spec(Target::Thread(me), 0, &[HostEvent::TaskClock]))
        .unwrap();
    group.read().unwrap();
    assert_eq!(
        backend.group_read_with_inherit.load(Ordering::Relaxed),
        GROUP_INHERIT_YES,
        "the kernel refused PERF_FORMAT_GROUP with inherit: per-thread groups fall \
         back to individual reads (see group::ReadMode::Individual)"
    );
}

#[test]
fn duplicate_events_are_opened_once_and_mapped_back() {
    for mode in MODES {
        let backend = backend_with(mode);
        let events = [
            HostEvent::CpuClock,
            HostEvent::TaskClock,
            HostEvent::CpuClock,
            HostEvent::ContextSwitches,
            HostEvent::CpuClock,
        ];
        let mut group = backend
            .open_group(&spec(Target::AllTasks, 0, &events))
            .unwrap();
        group.enable().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        group.disable().unwrap();
        let reading = group.read().unwrap();
        let v = &reading.values;
        assert_eq!(v.len(), events.len(), "{mode:?}");
        assert!(v[0] > 0, "{mode:?}: {reading:?}");
        assert_eq!(v[0], v[2], "{mode:?}: {reading:?}");
        assert_eq!(v[0], v[4], "{mode:?}: {reading:?}");
    }
}

#[test]
fn raw_event_with_a_bogus_type_fails_to_open() {
    let backend = PerfBackend::probe();
    let bogus = HostEvent::Raw {
        kind: 0x7fff_0000,
        config: 0,
        config1: 0,
    };
    match backend.open_group(&spec(Target::AllTasks, 0, &[HostEvent::CpuClock, bogus])) {
        Err(BackendError::Open { event, cpu, .. }) => {
            assert_eq!(event, bogus);
            assert_eq!(cpu, 0);
        }
        Err(other) => panic!("expected an Open error, got {other}"),
        Ok(_) => panic!("a bogus raw type opened"),
    }
    let why = backend.check(&bogus).unwrap_err();
    assert!(why.contains("ENOENT") || why.contains("EINVAL"), "{why}");
    assert!(backend.raw.lock().unwrap().contains_key(&bogus), "cached");
    assert_eq!(backend.check(&bogus), Err(why));
}

#[test]
fn raw_event_naming_a_software_event_counts() {
    let backend = PerfBackend::probe();
    let (kind, config, config1) = encoding(&HostEvent::CpuClock);
    let raw = HostEvent::Raw {
        kind,
        config,
        config1,
    };
    assert_eq!(backend.check(&raw), Ok(()));
    let mut group = backend
        .open_group(&spec(Target::AllTasks, 0, &[raw]))
        .unwrap();
    group.enable().unwrap();
    std::thread::sleep(Duration::from_millis(2));
    assert!(group.read().unwrap().values[0] > 0);
}

#[test]
fn opening_on_a_cpu_that_does_not_exist_fails() {
    let backend = PerfBackend::probe();
    let cpu = 4096;
    match backend.open_group(&spec(Target::AllTasks, cpu, &[HostEvent::CpuClock])) {
        Err(BackendError::Open { cpu: c, .. }) => assert_eq!(c, cpu),
        Err(other) => panic!("expected an Open error, got {other}"),
        Ok(_) => panic!("cpu {cpu} opened"),
    }
}

#[test]
fn an_empty_group_is_refused() {
    let backend = PerfBackend::probe();
    assert!(backend.open_group(&spec(Target::AllTasks, 0, &[])).is_err());
}

#[test]
fn read_errors_map_to_backend_errors() {
    let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "0 bytes");
    assert_eq!(group::read_error(eof), BackendError::Unschedulable);
    let badf = std::io::Error::from_raw_os_error(libc::EBADF);
    assert_eq!(
        group::read_error(badf),
        BackendError::Io {
            op: "read",
            errno: Errno::EBADF
        }
    );
    let big = std::io::Error::new(std::io::ErrorKind::Unsupported, "attr too big");
    assert_eq!(errno_of(&big), Errno::E2BIG);
}

#[test]
fn hardware_contention() {
    let backend = PerfBackend::probe();
    let cpus = online_cpus();
    if backend.check(&HostEvent::Cycles).is_err() {
        // No cycle counter: never contended, and nothing is opened.
        assert!(!backend.hardware_contended(&cpus));
        return;
    }
    // With a PMU: hold cpu 0's counters with an exclusive pinned group, and
    // our probe must notice. If the holder itself cannot run (an NMI watchdog
    // or another tool already has counters), there is nothing to assert.
    let mut holder = encoding::builder(&HostEvent::Cycles)
        .any_pid()
        .one_cpu(0)
        .pinned(true)
        .exclusive(true)
        .enabled(true)
        .build()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1));
    match holder.read_count_and_time() {
        Ok(r) if r.time_running > 0 => assert!(backend.hardware_contended(&[0])),
        other => eprintln!("exclusive holder did not run ({other:?}); skipped"),
    }
}

#[test]
fn backend_is_usable_as_a_trait_object() {
    let backend: Box<dyn Backend> = Box::new(PerfBackend::probe());
    assert!(backend.check(&HostEvent::CpuClock).is_ok());
}

/// Opens `specs(tid)` for a fresh thread, enables them, lets the thread run
/// `action` and exit, and returns the groups (still open, enabled).
fn groups_for_exited_thread(
    backend: &PerfBackend,
    specs: impl Fn(i32) -> Vec<GroupSpec>,
    action: impl FnOnce() + Send + 'static,
) -> Vec<Box<dyn CountingGroup>> {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        go_rx.recv().unwrap();
        action();
    });
    let tid = tid_rx.recv().unwrap();
    let mut groups: Vec<_> = specs(tid)
        .iter()
        .map(|spec| backend.open_group(spec).unwrap())
        .collect();
    for group in &mut groups {
        group.enable().unwrap();
    }
    go_tx.send(()).unwrap();
    thread.join().unwrap();
    groups
}

#[test]
fn groups_of_an_exited_thread_keep_their_final_counts() {
    let backend = PerfBackend::probe();
    let mut groups = groups_for_exited_thread(
        &backend,
        |tid| {
            online_cpus()
                .into_iter()
                .map(|cpu| spec(Target::Thread(tid), cpu, &[HostEvent::TaskClock]))
                .collect()
        },
        || burn(30 * MS),
    );
    let first: Vec<_> = groups.iter_mut().map(|g| g.read().unwrap()).collect();
    let total: u64 = first.iter().map(|r| r.values[0]).sum();
    assert!(total >= 30 * MS, "task-clock {total} ns for a 30 ms burn");
    std::thread::sleep(Duration::from_millis(5));
    for (group, before) in groups.iter_mut().zip(&first) {
        group.disable().unwrap();
        group.enable().unwrap();
        assert_eq!(
            &group.read().unwrap(),
            before,
            "an exited thread's group moved"
        );
    }
}

#[test]
fn mode_filter_reaches_the_kernel() {
    // Context switches happen in the kernel: a user-only group sees none.
    // (cpu-clock and task-clock count time and ignore the mode filter.)
    let backend = PerfBackend::probe();
    let mut groups = groups_for_exited_thread(
        &backend,
        |tid| {
            let mut user = spec(Target::Thread(tid), 0, &[HostEvent::ContextSwitches]);
            user.modes = ModeFilter::USER;
            online_cpus()
                .into_iter()
                .flat_map(|cpu| {
                    let all = GroupSpec {
                        cpu,
                        modes: ModeFilter::ALL,
                        ..user.clone()
                    };
                    [
                        all,
                        GroupSpec {
                            cpu,
                            ..user.clone()
                        },
                    ]
                })
                .collect()
        },
        || {
            for _ in 0..5 {
                std::thread::sleep(Duration::from_millis(1));
            }
        },
    );
    let (mut all, mut user) = (0, 0);
    for pair in groups.chunks_mut(2) {
        all += pair[0].read().unwrap().values[0];
        user += pair[1].read().unwrap().values[0];
    }
    assert!(all >= 5, "{all} context switches for 5 sleeps");
    assert_eq!(user, 0, "user-only context switches");
}

/// Instructions of a thread's own loop, user mode only, and the cycles of
/// the same group: on a PMU with exact counting (the PMU VM's emulated
/// ARMv8 PMU under `-icount shift=0`) each further block of iterations adds
/// exactly the same number of instructions, and cycles equal instructions.
/// Needs a hardware PMU: `tests/pmu_vm.rs` runs it there.
#[test]
#[ignore = "needs a hardware PMU: tests/pmu_vm.rs runs it in the PMU VM"]
fn hardware_group_counts_a_loop_exactly() {
    let backend = PerfBackend::probe();
    backend
        .check(&HostEvent::Instructions)
        .expect("this test needs a hardware PMU with an instruction counter");
    let tid = nix::unistd::gettid().as_raw();
    let mut spec = spec(
        Target::Thread(tid),
        0,
        &[HostEvent::Instructions, HostEvent::Cycles],
    );
    spec.modes = ModeFilter::USER;
    // Per CPU: pin the thread so one group sees all of it.
    let mut set = nix::sched::CpuSet::new();
    set.set(0).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    let mut group = backend.open_group(&spec).unwrap();
    group.enable().unwrap();
    let spin = |n: u64| {
        let mut x = 0u64;
        for i in 0..n {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        x
    };
    let mut blocks = Vec::new();
    for _ in 0..3 {
        let before = group.read().unwrap().values;
        std::hint::black_box(spin(1_000_000));
        let after = group.read().unwrap().values;
        blocks.push([after[0] - before[0], after[1] - before[1]]);
    }
    eprintln!("instructions, cycles per block: {blocks:?}");
    assert!(blocks[0][0] >= 1_000_000, "{blocks:?}");
    assert_eq!(blocks[1][0], blocks[2][0], "exact and deterministic");
    for [instructions, cycles] in &blocks {
        assert_eq!(instructions, cycles, "1 instruction = 1 cycle under icount");
    }
}

/// Overflow sampling of the cycle count: every sample of a user-only loop
/// carries its count and an IP in user space.
#[test]
#[ignore = "needs a hardware PMU: tests/pmu_vm.rs runs it in the PMU VM"]
fn hardware_sampler_delivers_overflow_samples() {
    struct Sink(mpsc::Sender<Sample>);
    impl SampleSink for Sink {
        fn sample(&self, sample: &Sample) {
            let _ = self.0.send(*sample);
        }
        fn lost(&self, _: u32, _: u64) {}
        fn throttled(&self) {}
    }
    let backend = PerfBackend::probe();
    backend
        .check(&HostEvent::Cycles)
        .expect("this test needs a hardware PMU with a cycle counter");
    let (tx, rx) = mpsc::channel();
    let tid = nix::unistd::gettid().as_raw();
    let spec = SamplerSpec {
        target: Target::Thread(tid),
        cpu: 0,
        event: HostEvent::Cycles,
        period: 100_000,
        modes: ModeFilter::USER,
        callchain: false,
        read_count: true,
        shared: false,
    };
    let mut set = nix::sched::CpuSet::new();
    set.set(0).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    let mut sampler = backend.open_sampler(&spec, Arc::new(Sink(tx))).unwrap();
    sampler.enable().unwrap();
    let mut x = 0u64;
    for i in 0..20_000_000u64 {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    sampler.disable().unwrap();
    sampler.drain();
    let samples: Vec<Sample> = rx.try_iter().collect();
    eprintln!("{} samples", samples.len());
    assert!(samples.len() >= 10, "{} samples", samples.len());
    assert!(samples.iter().all(|s| s.user && s.tid == tid as u32));
    assert!(samples.iter().all(|s| s.count.is_some()));
}

/// A thread's birth is the same at every look while it lives, and is gone
/// once the thread has exited.
#[test]
fn thread_identity_names_a_live_thread_only() {
    let backend = PerfBackend::probe();
    let me = nix::unistd::gettid().as_raw();
    let mine = backend.thread_identity(me).expect("this thread lives");
    assert_eq!(backend.thread_identity(me), Some(mine));
    // A dumpable thread's files are its effective uid's and gid's.
    let owner = (
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    );
    assert_eq!(mine.owner, owner);
    let (tid, birth) = std::thread::spawn(|| {
        let tid = nix::unistd::gettid().as_raw();
        (
            tid,
            PerfBackend::probe().thread_identity(tid).map(|t| t.birth),
        )
    })
    .join()
    .unwrap();
    assert!(
        birth.is_some_and(|b| b >= mine.birth),
        "{birth:?} vs {mine:?}"
    );
    // `join` returns when the thread has let go of its memory; the kernel
    // releases the thread a moment later.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    while backend.thread_identity(tid).is_some() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        backend.thread_identity(tid),
        None,
        "thread {tid} has exited"
    );
}
