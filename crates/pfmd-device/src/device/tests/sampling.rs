//! Sampling through the device over the mock backend: IPL histograms,
//! profile buckets, caller ranges, read(2) snapshots (docs/device.md §6).

use crate::backend::Sample;
use crate::backend::Target;
use crate::backend::mock::MockBackend;
use crate::device::{Device, FileId, IoctlReply};
use crate::policy::Caller;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{self as abi, PfIpls, PfmInfo};
use pfm_abi::{AddrRangeT, Iccsr, PCNTOPENALL, PCNTOPENEACH};
use pfm_model::HostEvent;
use pfm_model::Implementation;
use zerocopy::FromBytes;

const TEXT: (u64, u64) = crate::device::test_fixtures::KERNEL_TEXT;

fn device(backend: &MockBackend) -> Device {
    crate::device::test_fixtures::device(Implementation::Ev4, backend, 2)
}

fn caller(euid: u32) -> Caller {
    crate::device::test_fixtures::caller(10, euid, vec![0, 1])
}

fn call(d: &Device, f: FileId, c: &Caller, cmd: u32, arg: &[u8]) -> Result<IoctlReply, Errno> {
    d.ioctl(f, c, cmd, arg).map_err(|e| e.errno())
}

fn long(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}

fn range(start: u64, end: u64, stride: u64) -> Vec<u8> {
    zerocopy::IntoBytes::as_bytes(&AddrRangeT {
        start,
        end,
        stride,
        res0: 0,
    })
    .to_vec()
}

/// Opens, selects `items` and PF_CYCLES every 4096, enables; returns the
/// weight each sample carries.
fn sampling(d: &Device, c: &Caller, mode: i32, items: u64) -> (FileId, u64) {
    let f = d.open(c, mode).unwrap();
    call(d, f, c, n::PCNTSETITEMS, &long(items)).unwrap();
    call(d, f, c, n::PCNTSETMUX, &long(Iccsr::new(0xa, 0, 1, 0, 2).0)).unwrap();
    call(d, f, c, n::PCNTRENABLE, &[]).unwrap();
    let info = PfmInfo::read_from_bytes(&call(d, f, c, n::PCNTGETINFO, &[]).unwrap().out).unwrap();
    assert_eq!(info.pi_sample_period[0] % 4096, 0);
    (f, info.pi_sample_period[0] / 4096)
}

/// `PCNTGETRSIZE`'s answer.
fn rsize(d: &Device, f: FileId, c: &Caller) -> u64 {
    let out = call(d, f, c, n::PCNTGETRSIZE, &[]).unwrap().out;
    u64::from_ne_bytes(out[..8].try_into().unwrap())
}

fn sample(ip: u64, user: bool, pid: u32, cpu: u32) -> Sample {
    Sample {
        ip,
        pid,
        tid: pid,
        cpu,
        user,
        caller: Some(TEXT.0 + 0x100),
        count: None,
    }
}

fn ipls(d: &Device, f: FileId, c: &Caller) -> Vec<[u64; 9]> {
    let store = call(d, f, c, n::PCNTGETIPLHIS, &long(0x5000))
        .unwrap()
        .store
        .unwrap();
    <[PfIpls]>::ref_from_bytes(&store.bytes)
        .unwrap()
        .iter()
        .map(|p| p.ipl)
        .collect()
}

#[test]
fn ipl_histogram_counts_weighted_ticks_by_mode() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_COUNTERS | abi::PFM_IPL);
    assert!(
        w > 1,
        "4096 ns per tick is beyond the mock's 100k samples/s: sampled less often"
    );
    b.emit(Target::AllTasks, sample(0x1000, true, 42, 0), 3);
    b.emit(Target::AllTasks, sample(TEXT.0, false, 0, 1), 2);
    b.emit(Target::AllTasks, sample(TEXT.0, false, 42, 1), 1);
    let h = ipls(&d, f, &c);
    assert_eq!(h.len(), 1, "ALL: one pfipls");
    assert_eq!((h[0][8], h[0][0], h[0][7]), (3 * w, 3 * w, 2 * w));
    call(&d, f, &c, n::PCNTCLEARCNT, &[]).unwrap();
    assert!(
        ipls(&d, f, &c)[0].iter().all(|&v| v == 0),
        "PCNTCLEARCNT clears the IPL histogram"
    );
}

#[test]
fn each_mode_keeps_one_ipl_histogram_per_cpu() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENEACH, abi::PFM_IPL);
    b.emit(Target::AllTasks, sample(0x1000, true, 42, 1), 4);
    let h = ipls(&d, f, &c);
    assert_eq!(h.len(), 2);
    assert_eq!((h[0][8], h[1][8]), (0, 4 * w));
}

/// Two threads reading one descriptor at once, and a third setting a
/// smaller range between their pieces: each call ends on the buckets it
/// began with, all of them (one snapshot per reading thread; with one per
/// open, the first call found its snapshot gone and ended short).
#[test]
fn concurrent_reads_each_keep_their_own_snapshot() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 4)).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 0), 1);
    let first = crate::device::test_fixtures::caller(11, 0, vec![0, 1]);
    let second = crate::device::test_fixtures::caller(12, 0, vec![0, 1]);
    let a0 = d.read(f, &first, 0, 32).unwrap();
    let b0 = d.read(f, &second, 0, 32).unwrap();
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1010, 4)).unwrap();
    let b1 = d.read(f, &second, 32, 64).unwrap();
    let a1 = d.read(f, &first, 32, 64).unwrap();
    let mut whole = vec![0u8; 64];
    whole[60..].copy_from_slice(&(w as u32).to_ne_bytes());
    assert_eq!([a0, a1].concat(), whole, "the first call, whole");
    assert_eq!([b0, b1].concat(), whole, "the second call, whole");
    assert_eq!(
        d.read(f, &first, 0, 64).unwrap(),
        vec![0; 4],
        "the new range"
    );
}

#[test]
fn profile_buckets_rsize_and_read_snapshots() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    assert_eq!(
        d.read(f, &c, 0, 4096).unwrap(),
        Vec::<u8>::new(),
        "no range: nothing to read"
    );
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 4)).unwrap();
    let rsize = u64::from_ne_bytes(
        call(&d, f, &c, n::PCNTGETRSIZE, &[])
            .unwrap()
            .out
            .try_into()
            .unwrap(),
    );
    assert_eq!(rsize, 16 * 4, "0x100 bytes at 16 bytes per bucket");
    b.emit(Target::AllTasks, sample(0x1010, true, 42, 0), 2);
    b.emit(Target::AllTasks, sample(0x1010, false, 42, 0), 5); // kernel mode: dropped
    b.emit(Target::AllTasks, sample(0x2000, true, 42, 0), 5); // outside: dropped
    let whole = d.read(f, &c, 0, rsize as u32).unwrap();
    let buckets: Vec<u32> = whole
        .chunks(4)
        .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(buckets[1] as u64, 2 * w);
    assert_eq!(buckets.iter().map(|&b| b as u64).sum::<u64>(), 2 * w);
    // One read(2) in pieces: later pieces come from the snapshot of offset 0.
    let first = d.read(f, &c, 0, 32).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 1);
    let second = d.read(f, &c, 32, 32).unwrap();
    assert_eq!([first, second].concat(), whole, "no torn histogram");
    // A new range during the call: the call still ends on the buckets it
    // began with, all of them.
    let first = d.read(f, &c, 0, 32).unwrap();
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1010, 4)).unwrap();
    let second = d.read(f, &c, 32, 64).unwrap();
    // (The old range's last bucket holds the sample taken since `whole`.)
    let old = [&whole[..60], &(w as u32).to_ne_bytes()[..]].concat();
    assert_eq!([first, second].concat(), old, "one call, one snapshot");
    assert_eq!(
        d.read(f, &c, 0, 64).unwrap(),
        vec![0; 4],
        "the next call reads the new range"
    );
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 4)).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 1);
    let again = d.read(f, &c, 0, 64).unwrap();
    assert_eq!(
        u32::from_ne_bytes(again[60..64].try_into().unwrap()) as u64,
        w,
        "a new call sees new samples"
    );
    // Stride 0: one bucket holding everything in range.
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 0)).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 3);
    assert_eq!(
        d.read(f, &c, 0, 64).unwrap(),
        ((3 * w) as u32).to_ne_bytes().to_vec()
    );
    // PCNTSETUADDR sets the range without changing the stride: still one
    // bucket; a stride set again by PCNTSETURANGE is kept the same way.
    let rsize = |d: &Device| call(d, f, &c, n::PCNTGETRSIZE, &[]).unwrap().out;
    let addr = |start: u64, end: u64| [long(start), long(end)].concat();
    call(&d, f, &c, n::PCNTSETUADDR, &addr(0x1000, 0x2000)).unwrap();
    assert_eq!(rsize(&d), 4u64.to_ne_bytes(), "stride 0 stays");
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 8)).unwrap();
    call(&d, f, &c, n::PCNTSETUADDR, &addr(0x1000, 0x2000)).unwrap();
    assert_eq!(
        rsize(&d),
        (0x1000u64 / 32 * 4).to_ne_bytes(),
        "stride 8 stays"
    );
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x1100, 0)).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 3);
    // Profiling deselected: PCNTGETRSIZE is 0 and read(2) returns nothing,
    // as that says; selected again, the range and its buckets are back.
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_COUNTERS)).unwrap();
    assert_eq!(rsize(&d), 0u64.to_ne_bytes());
    assert_eq!(d.read(f, &c, 0, 64).unwrap(), Vec::<u8>::new());
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_PROFILING)).unwrap();
    assert_eq!(rsize(&d), 4u64.to_ne_bytes());
    assert_eq!(
        d.read(f, &c, 0, 64).unwrap(),
        ((3 * w) as u32).to_ne_bytes().to_vec()
    );
    // Deselected while samples still come (for the IPL histogram): the
    // buckets collect nothing until profiling is selected again.
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_IPL)).unwrap();
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 4);
    assert_eq!(ipls(&d, f, &c)[0][8], 4 * w, "the IPL histogram had them");
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_PROFILING)).unwrap();
    assert_eq!(
        d.read(f, &c, 0, 64).unwrap(),
        ((3 * w) as u32).to_ne_bytes().to_vec(),
        "no bucket filled while profiling was not selected"
    );
    b.emit(Target::AllTasks, sample(0x10f0, true, 42, 1), 1);
    assert_eq!(
        d.read(f, &c, 0, 64).unwrap(),
        ((4 * w) as u32).to_ne_bytes().to_vec()
    );
}

#[test]
fn range_errors_follow_the_reference() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let root = caller(0);
    let (f, _) = sampling(&d, &root, PCNTOPENALL, abi::PFM_PROFILING);
    let e = |cmd, arg: &[u8]| call(&d, f, &root, cmd, arg).unwrap_err();
    assert_eq!(
        e(n::PCNTSETURANGE, &range(0x1000, 0x2000, 6)),
        Errno::EINVAL,
        "stride 6"
    );
    assert_eq!(
        e(n::PCNTSETURANGE, &range(0x2000, 0x1000, 4)),
        Errno::EINVAL,
        "end before start"
    );
    assert_eq!(
        e(n::PCNTSETURANGE, &range(0, 1 << 40, 4)),
        Errno::ENOMEM,
        "over --max-profile-bytes"
    );
    // A "whole address space" kernel range, as SPIN's pfm passes for all
    // of the kernel: taken as given, not clipped (2^60 buckets at stride
    // 4). SETKRANGE states the stride; SETKADDR, SPIN's call, keeps it.
    assert_eq!(
        e(n::PCNTSETKRANGE, &range(0, u64::MAX, 4)),
        Errno::ENOMEM,
        "{{0, ~0}} at stride 4"
    );
    assert_eq!(
        e(n::PCNTSETKADDR, &range(0, u64::MAX, 0)[..16]),
        Errno::ENOMEM,
        "{{0, ~0}} is not clipped to kernel text"
    );
    assert_eq!(
        e(n::PCNTCALLER, &[]),
        Errno::EINVAL,
        "no kernel profiling yet"
    );
    call(
        &d,
        f,
        &root,
        n::PCNTSETKRANGE,
        &range(TEXT.0, TEXT.0 + 0x10000, 4),
    )
    .unwrap();
    call(&d, f, &root, n::PCNTCALLER, &[]).unwrap();
    assert!(
        b.sampler_specs().last().unwrap().callchain,
        "caller mode samples callchains"
    );
    for i in 0..4 {
        let start = TEXT.0 + 0x1000 * (i + 1);
        call(
            &d,
            f,
            &root,
            n::PCNTSETKRANGE,
            &range(start, start + 0x100, 4),
        )
        .unwrap();
    }
    assert_eq!(
        e(n::PCNTSETKRANGE, &range(TEXT.0, TEXT.0 + 0x100, 4)),
        Errno::ENOSPC,
        "5th caller range"
    );
    let f2 = {
        d.release(f);
        let (f2, _) = sampling(&d, &root, PCNTOPENALL, abi::PFM_PROFILING);
        call(
            &d,
            f2,
            &root,
            n::PCNTSETKADDR,
            &range(TEXT.0, TEXT.0 + 0x100, 0)[..16],
        )
        .unwrap();
        call(&d, f2, &root, n::PCNTCALLER, &[]).unwrap();
        f2
    };
    let e2 = |arg: &[u8]| call(&d, f2, &root, n::PCNTSETKADDR, &arg[..16]).unwrap_err();
    assert_eq!(
        e2(&range(TEXT.0 + 2, TEXT.0 + 0x100, 0)),
        Errno::EFAULT,
        "unaligned"
    );
    assert_eq!(
        e2(&range(0x1000, 0x2000, 0)),
        Errno::EFAULT,
        "outside kernel text"
    );
    assert_eq!(
        e2(&range(TEXT.0 + 0x100, TEXT.0, 0)),
        Errno::EFAULT,
        "end before start"
    );
    d.release(f2);
    // Kernel profiling needs system-wide privilege.
    let user = caller(1000);
    let f3 = d.open(&user, PCNTOPENALL).unwrap();
    call(&d, f3, &user, n::PCNTSETITEMS, &long(abi::PFM_PROFILING)).unwrap();
    assert_eq!(
        call(
            &d,
            f3,
            &user,
            n::PCNTSETKRANGE,
            &range(TEXT.0, TEXT.0 + 0x100, 4)
        )
        .unwrap_err(),
        Errno::EACCES
    );
    call(&d, f3, &user, n::PCNTSETURANGE, &range(0x1000, 0x2000, 4))
        .expect("user profiling is allowed");
}

#[test]
fn caller_ranges_are_charged_to_their_caller() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    call(
        &d,
        f,
        &c,
        n::PCNTSETKRANGE,
        &range(TEXT.0, TEXT.0 + 0x1000, 64),
    )
    .unwrap();
    call(&d, f, &c, n::PCNTCALLER, &[]).unwrap();
    call(
        &d,
        f,
        &c,
        n::PCNTSETKRANGE,
        &range(TEXT.0 + 0x800, TEXT.0 + 0x900, 4),
    )
    .unwrap();
    // A sample in the caller range at +0x810 whose caller is +0x100.
    b.emit(Target::AllTasks, sample(TEXT.0 + 0x810, false, 7, 0), 1);
    let bytes = d.read(f, &c, 0, 1 << 16).unwrap();
    let buckets: Vec<u32> = bytes
        .chunks(4)
        .map(|b| u32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(buckets.len(), 0x1000 / 256);
    assert_eq!(
        buckets[1] as u64, w,
        "charged to the caller's bucket (+0x100)"
    );
    assert_eq!(buckets[8], 0, "not to the sampled IP's bucket (+0x810)");
}

/// A CPU-wide sampler the kernel throttled on an idle CPU loses the
/// stretch (cpu-clock restarts its count when the throttle lifts), while
/// the counting group counts it: `PCNTGETIPLHIS` brings the histogram up to
/// the counted interrupts, less one sample's worth per CPU that a later
/// sample may still report, as IPL 0 and idle, and a later sample is not
/// charged twice (docs/device.md §6).
#[test]
fn ipl_totals_reach_the_counted_interrupts_of_a_throttled_idle_cpu() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_COUNTERS | abi::PFM_IPL);
    // EV4 PF_CYCLES every 4096 at the fixture's 1 GHz: a cycle a
    // nanosecond of cpu-clock.
    let ns_per_interrupt = 4096;
    // CPU 0 busy in user mode, every interrupt sampled; CPU 1 idle, its
    // sampler throttled: counted, never sampled.
    b.advance(
        0,
        Target::AllTasks,
        HostEvent::CpuClock,
        10 * w * ns_per_interrupt,
    );
    b.emit(Target::AllTasks, sample(0x1000, true, 42, 0), 10);
    b.advance(
        1,
        Target::AllTasks,
        HostEvent::CpuClock,
        100 * w * ns_per_interrupt,
    );
    let h = ipls(&d, f, &c)[0];
    let allowance = 2 * w;
    assert_eq!(h[8], 10 * w, "user ticks are the samples'");
    assert_eq!(
        (h[0], h[7]),
        (100 * w - allowance, 100 * w - allowance),
        "the unsampled stretch is IPL 0 and idle, less a sample per CPU"
    );
    assert_eq!(ipls(&d, f, &c)[0], h, "a second read adds nothing");
    // The CPU wakes and its sampler reports again: one sample more, within
    // the counted interrupts.
    b.emit(Target::AllTasks, sample(TEXT.0, false, 0, 1), 1);
    let after = ipls(&d, f, &c)[0];
    let total = |h: [u64; 9]| h.iter().sum::<u64>() - h[7];
    assert_eq!(total(after), total(h) + w);
    assert!(total(after) <= 110 * w, "never more than was counted");
    // Cleared, the histogram starts again from what is counted next.
    call(&d, f, &c, n::PCNTCLEARCNT, &[]).unwrap();
    b.advance(
        1,
        Target::AllTasks,
        HostEvent::CpuClock,
        5 * w * ns_per_interrupt,
    );
    let cleared = ipls(&d, f, &c)[0];
    assert_eq!((cleared[0], cleared[7]), (3 * w, 3 * w));
}

/// Samples the kernel lost (PERF_RECORD_LOST) on a busy CPU are counted in
/// `pi_lost_samples` and left out of the IPL histogram: neither the next
/// sample, whose count includes them, nor the reconcile with the counted
/// interrupts books them as idle time.
#[test]
fn lost_samples_are_not_booked_as_idle() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_COUNTERS | abi::PFM_IPL);
    let host_period = b.sampler_specs()[0].period;
    let ns_per_interrupt = 4096;
    // CPU 0 busy in user mode for 100 samples' worth: 10 sampled, 89 lost,
    // then one whose count carries all of them.
    b.advance(
        0,
        Target::AllTasks,
        HostEvent::CpuClock,
        100 * w * ns_per_interrupt,
    );
    for k in 1..=10 {
        let counted = Sample {
            count: Some(k * host_period),
            ..sample(0x1000, true, 42, 0)
        };
        b.emit(Target::AllTasks, counted, 1);
    }
    b.lose(Target::AllTasks, 0, 89);
    let after = Sample {
        count: Some(100 * host_period),
        ..sample(0x1000, true, 42, 0)
    };
    b.emit(Target::AllTasks, after, 1);
    let h = ipls(&d, f, &c)[0];
    assert_eq!(h[8], 11 * w, "user ticks are the samples' own");
    assert_eq!((h[0], h[7]), (0, 0), "no lost sample is idle time: {h:?}");
    let info =
        PfmInfo::read_from_bytes(&call(&d, f, &c, n::PCNTGETINFO, &[]).unwrap().out).unwrap();
    assert_eq!(info.pi_lost_samples, 89);
    // A gap without a loss is still idle time (a throttled idle CPU).
    let gap = Sample {
        count: Some(150 * host_period),
        ..sample(0x1000, true, 42, 0)
    };
    b.emit(Target::AllTasks, gap, 1);
    assert_eq!(
        ipls(&d, f, &c)[0][7],
        49 * w,
        "the gap after no loss is idle"
    );
}

/// Turning a counter off (`PCNT5DISABLE`) replaces the open's host events,
/// here by none: what the old samplers never sampled on a throttled idle
/// CPU is booked as they go (all of it: no later sample can report any),
/// so the IPL histogram still reaches the counted interrupts.
#[test]
fn ipl_totals_survive_turning_a_counter_off() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = crate::device::test_fixtures::device(Implementation::Ev5, &b, 2);
    let c = caller(0);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    call(
        &d,
        f,
        &c,
        n::PCNTSETITEMS,
        &long(abi::PFM_COUNTERS | abi::PFM_IPL),
    )
    .unwrap();
    // Counter 0 cycles; counters 1 and 2 off.
    call(&d, f, &c, n::PCNT5DISABLE, &long(6)).unwrap();
    call(&d, f, &c, n::PCNT5MUX, &long(0)).unwrap();
    call(&d, f, &c, n::PCNTRENABLE, &[]).unwrap();
    let info =
        PfmInfo::read_from_bytes(&call(&d, f, &c, n::PCNTGETINFO, &[]).unwrap().out).unwrap();
    let period = info.pi_period[0];
    let w = info.pi_sample_period[0] / period;
    // CPU 1 idle, its samplers throttled: 100 samples' worth of counter 0
    // counted, none sampled.
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 100 * w * period);
    call(&d, f, &c, n::PCNT5DISABLE, &long(1)).unwrap();
    let counted = d
        .ioctl(f, &c, n::PCNT5GETCNT, &long(0x2000))
        .unwrap()
        .store
        .unwrap();
    let counted = <[abi::PfCntrsEv5]>::ref_from_bytes(&counted.bytes).unwrap()[0];
    assert_eq!(counted.pf_cntr0, 100 * w);
    // No counter is on now: no host events, and the histogram holds what
    // the last ones counted.
    let h = ipls(&d, f, &c)[0];
    assert_eq!(
        (h[0], h[7]),
        (100 * w, 100 * w),
        "the unsampled stretch is IPL 0 and idle: {h:?}"
    );
}

/// The reconcile at a close is decided by the host events being closed,
/// not by the settings that replace them: LOGALL samplers that never
/// sampled an idle CPU are booked when `PCNTLOGSELECT` replaces them.
#[test]
fn ipl_totals_survive_a_change_to_logselect() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, w) = sampling(&d, &c, PCNTOPENALL, abi::PFM_COUNTERS | abi::PFM_IPL);
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 100 * w * 4096);
    call(&d, f, &c, n::PCNTLOGSELECT, &[]).unwrap();
    let h = ipls(&d, f, &c)[0];
    assert_eq!(
        (h[0], h[7]),
        (100 * w, 100 * w),
        "the LOGALL stretch is IPL 0 and idle: {h:?}"
    );
}

/// A `PCNTCALLER` the host refuses leaves the profile as it was: not in
/// caller mode, so the next `PCNTSETKRANGE` replaces the range (in caller
/// mode it would add a caller range), and the samplers take no callchains.
#[test]
fn a_refused_caller_mode_is_rolled_back() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, _) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    let rsize = || rsize(&d, f, &c);
    call(
        &d,
        f,
        &c,
        n::PCNTSETKRANGE,
        &range(TEXT.0, TEXT.0 + 0x1000, 4),
    )
    .unwrap();
    assert_eq!(rsize(), 0x1000 / 16 * 4);
    b.set_failing_enable(true);
    assert_eq!(call(&d, f, &c, n::PCNTCALLER, &[]).unwrap_err(), Errno::EIO);
    b.set_failing_enable(false);
    call(&d, f, &c, n::PCNTRENABLE, &[]).expect("enabling again works");
    assert!(
        !b.sampler_specs().last().unwrap().callchain,
        "the samplers as they were"
    );
    call(
        &d,
        f,
        &c,
        n::PCNTSETKRANGE,
        &range(TEXT.0, TEXT.0 + 0x2000, 4),
    )
    .expect("a new range, not a caller range");
    assert_eq!(rsize(), 0x2000 / 16 * 4, "the range was replaced");
}

/// A range refused for its size leaves no range, whichever limit refused
/// it (`--max-profile-bytes` once left the old range counting): rsize 0,
/// no buckets to read, nothing collected.
#[test]
fn a_range_refused_for_its_size_leaves_none() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, _) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    let rsize = || rsize(&d, f, &c);
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x2000, 4)).unwrap();
    b.emit(Target::AllTasks, sample(0x1010, true, 7, 0), 1);
    assert_eq!(rsize(), 0x1000 / 16 * 4);
    assert_eq!(
        call(&d, f, &c, n::PCNTSETURANGE, &range(0, 1 << 40, 4)).unwrap_err(),
        Errno::ENOMEM
    );
    assert_eq!(rsize(), 0, "no range after the refusal");
    b.emit(Target::AllTasks, sample(0x1010, true, 7, 0), 1);
    assert!(d.read(f, &c, 0, 1 << 16).unwrap().is_empty(), "no buckets");
    call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x2000, 4)).unwrap();
    assert_eq!(
        call(&d, f, &c, n::PCNTSETURANGE, &range(0x1000, 0x2000, 6)).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(rsize(), 0x1000 / 16 * 4, "an invalid range changes nothing");
}

/// `PCNTCALLER` needs kernel profiling on: a kernel range kept while
/// `PFM_PROFILING` is deselected profiles nothing, so it is `EINVAL` then.
#[test]
fn caller_mode_needs_profiling_selected() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device(&b);
    let c = caller(0);
    let (f, _) = sampling(&d, &c, PCNTOPENALL, abi::PFM_PROFILING);
    call(
        &d,
        f,
        &c,
        n::PCNTSETKRANGE,
        &range(TEXT.0, TEXT.0 + 0x1000, 4),
    )
    .unwrap();
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_COUNTERS)).unwrap();
    assert_eq!(
        call(&d, f, &c, n::PCNTCALLER, &[]).unwrap_err(),
        Errno::EINVAL
    );
    call(&d, f, &c, n::PCNTSETITEMS, &long(abi::PFM_PROFILING)).unwrap();
    call(&d, f, &c, n::PCNTCALLER, &[]).expect("on again with the item");
}
