//! The EV5 ioctls over the mock backend: counting rule, per-counter select
//! bits, raw counter access, contexts, periods and consistent reads.

use crate::backend::mock::MockBackend;
use crate::backend::{ModeFilter, Target};
use crate::device::test_fixtures::{device, ioctl, root, user};
use crate::device::{Device, FileId};
use crate::policy::Caller;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{
    self as abi, PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE, PMCTRS_ALL_CPUS, PfCntrsEv5, PfmInfo,
    PmctrsEv5,
};
use pfm_model::ev5::{
    PF5_CTXT_EXEC_AND_SUPER, PF5_CTXT_KERNEL, PF5_CTXT_NO_KERNEL, PF5_CTXT_NO_USER,
    PF5_CTXT_THIS_PROC, PF5_CTXT_USER,
};
use pfm_model::{HostEvent, Implementation};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zerocopy::FromBytes;

const CLK: HostEvent = HostEvent::CpuClock;
const BR: HostEvent = HostEvent::BranchInstructions;

/// Counter 0 cycles, counter 1 flow changes, counter 2 cycles.
const MUX: u64 = 0x80 | 0xC;
const ALL3: u64 = 7;

fn counts(d: &Device, f: FileId, c: &Caller, cmd: u32) -> Vec<PfCntrsEv5> {
    let store = ioctl(d, f, c, cmd, 0x2000).unwrap().store.unwrap();
    assert_eq!(store.addr, 0x2000);
    <[PfCntrsEv5]>::ref_from_bytes(&store.bytes)
        .unwrap()
        .to_vec()
}

fn raw(d: &Device, f: FileId, c: &Caller, cpu: u64) -> PmctrsEv5 {
    let reply = ioctl(
        d,
        f,
        c,
        n::PCNT5GETCNTRS,
        PmctrsEv5::new(ALL3, cpu, 0, 0, 0).0,
    )
    .unwrap();
    PmctrsEv5::read_from_bytes(&reply.out).unwrap()
}

fn setup(d: &Device, f: FileId, c: &Caller) {
    ioctl(d, f, c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    ioctl(d, f, c, n::PCNT5MUX, MUX).unwrap();
    ioctl(d, f, c, n::PCNTCLEARCNT, 0).unwrap();
}

#[test]
fn restart_counts_without_pcntrenable_and_pcntrdisable_stops() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    setup(&d, f, &c);
    b.advance(0, Target::AllTasks, CLK, 1 << 20);
    assert_eq!(
        counts(&d, f, &c, n::PCNT5READCNTRS)[0].pf_cntr0,
        0,
        "not yet enabled"
    );
    ioctl(&d, f, &c, n::PCNT5RESTART, ALL3).unwrap();
    b.advance(0, Target::AllTasks, CLK, 3 * 65536 + 5);
    b.advance(1, Target::AllTasks, BR, 65536 + 7);
    let g = counts(&d, f, &c, n::PCNT5GETCNT);
    assert_eq!((g[0].pf_cntr0, g[0].pf_cntr1, g[0].pf_cntr2), (3, 1, 12));
    assert!(g[0].pr_cycle > 0);
    let r = counts(&d, f, &c, n::PCNT5READCNTRS);
    assert_eq!(r.len(), 1, "ALL: one element");
    assert_eq!(r[0].pf_cntr0, 3 * 65536 + 5, "(interrupts << 16) + raw");
    assert_eq!(r[0].pf_cntr1, 65536 + 7);
    assert_eq!(r[0].pf_cntr2, 3 * 65536 + 5, "(interrupts << 14) + raw");
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, CLK, 1 << 20);
    assert_eq!(
        counts(&d, f, &c, n::PCNT5READCNTRS)[0].pf_cntr0,
        3 * 65536 + 5
    );
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, CLK, 1);
    assert_eq!(
        counts(&d, f, &c, n::PCNT5READCNTRS)[0].pf_cntr0,
        3 * 65536 + 6,
        "PCNTRENABLE resumes the counters that are on"
    );
}

#[test]
fn select_bits_disable_enable_clear_single_counters() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev56, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    setup(&d, f, &c);
    ioctl(&d, f, &c, n::PCNT5RESTART, ALL3).unwrap();
    ioctl(&d, f, &c, n::PCNT5DISABLE, 4).unwrap();
    b.advance(0, Target::AllTasks, CLK, 100);
    let r = counts(&d, f, &c, n::PCNT5READCNTRS)[0];
    assert_eq!((r.pf_cntr0, r.pf_cntr2), (100, 0), "counter 2 disabled");
    ioctl(&d, f, &c, n::PCNT5ENABLE, 4).unwrap();
    b.advance(0, Target::AllTasks, CLK, 50);
    let r = counts(&d, f, &c, n::PCNT5READCNTRS)[0];
    assert_eq!((r.pf_cntr0, r.pf_cntr2), (150, 50));
    ioctl(&d, f, &c, n::PCNT5CLEAR, 1).unwrap();
    let r = counts(&d, f, &c, n::PCNT5READCNTRS)[0];
    assert_eq!(
        (r.pf_cntr0, r.pf_cntr2),
        (0, 50),
        "CLEAR zeroes counter 0 only"
    );
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!((info.pi_family, info.pi_impl, info.pi_ncounters), (1, 3, 3));
    assert_eq!(info.pi_width, [16, 16, 14]);
    assert_eq!(info.pi_period, [65536, 65536, 16384]);
    assert_eq!(
        info.pi_fidelity,
        [2, 1, 2],
        "cycles approximate, flow change exact"
    );
}

#[test]
fn unavailable_events_are_eopnotsupp_only_when_the_counter_is_on() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev5, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5MUX, MUX).unwrap_err(),
        Errno::EOPNOTSUPP,
        "flow change has no host event here and counter 1 is on"
    );
    ioctl(&d, f, &c, n::PCNT5DISABLE, 2).unwrap();
    ioctl(&d, f, &c, n::PCNT5MUX, MUX).expect("counter 1 off: validated, not resolved");
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5RESTART, ALL3).unwrap_err(),
        Errno::EOPNOTSUPP
    );
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!(
        info.pi_flags & abi::PFM_INFO_ENABLED,
        0,
        "a refused RESTART changes nothing"
    );
    ioctl(&d, f, &c, n::PCNT5RESTART, 1 | 4).unwrap();
    b.advance(1, Target::AllTasks, CLK, 70000);
    let r = counts(&d, f, &c, n::PCNT5READCNTRS)[0];
    assert_eq!((r.pf_cntr0, r.pf_cntr1, r.pf_cntr2), (70000, 0, 70000));
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5MUX, 0x1).unwrap_err(),
        Errno::EINVAL,
        "undefined counter-2 code"
    );
}

#[test]
fn setcntrs_preload_moves_the_first_interrupt_and_getcntrs_reads_it() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENEACH).unwrap();
    setup(&d, f, &c);
    // Counter 0 at 2^16 - 10 on every CPU, counter 2 at 2^14 - 1 on CPU 1.
    ioctl(
        &d,
        f,
        &c,
        n::PCNT5SETCNTRS,
        PmctrsEv5::new(1, PMCTRS_ALL_CPUS, 65526, 0, 0).0,
    )
    .unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT5SETCNTRS,
        PmctrsEv5::new(4, 1, 0, 0, 16383).0,
    )
    .unwrap();
    let r1 = raw(&d, f, &c, 1);
    assert_eq!(
        (r1.cntr0(), r1.cntr1(), r1.cntr2(), r1.cpu()),
        (65526, 0, 16383, 1)
    );
    ioctl(&d, f, &c, n::PCNT5ENABLE, ALL3).unwrap();
    b.advance(0, Target::AllTasks, CLK, 9);
    b.advance(1, Target::AllTasks, CLK, 10);
    let g = counts(&d, f, &c, n::PCNT5GETCNT);
    assert_eq!(g.len(), 2, "EACH: one element per CPU");
    assert_eq!(
        g[0].pf_cntr0, 0,
        "9 events after 2^16 - 10: no interrupt yet"
    );
    assert_eq!(g[1].pf_cntr0, 1, "the 10th event interrupts");
    assert_eq!(
        g[1].pf_cntr2, 1,
        "counter 2 at 2^14 - 1 interrupts after one event"
    );
    assert_eq!(raw(&d, f, &c, 1).cntr0(), 0);
    assert_eq!(raw(&d, f, &c, 0).cntr0(), 65535);
    let r = counts(&d, f, &c, n::PCNT5READCNTRS);
    assert_eq!(r[1].pf_cntr0, 65536, "(1 << 16) + 0");
    assert_eq!(r[1].pf_cntr2, (1 << 14) + 9);
    assert_eq!(
        ioctl(
            &d,
            f,
            &c,
            n::PCNT5GETCNTRS,
            PmctrsEv5::new(0, PMCTRS_ALL_CPUS, 0, 0, 0).0
        )
        .unwrap_err(),
        Errno::EINVAL,
        "EACH: GETCNTRS needs one CPU"
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5SETCNTRS, PmctrsEv5::new(1, 7, 0, 0, 0).0).unwrap_err(),
        Errno::EINVAL,
        "a CPU the open does not hold"
    );
}

#[test]
fn one_mode_reads_its_cpu_and_all_cpus_means_that_cpu() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 0);
    let c = user(10, vec![1]);
    let f = d.open(&c, PCNTOPENONE).unwrap();
    setup(&d, f, &c);
    ioctl(&d, f, &c, n::PCNT5RESTART, 1).unwrap();
    b.advance(0, Target::AllTasks, CLK, 500);
    b.advance(1, Target::AllTasks, CLK, 300);
    assert_eq!(raw(&d, f, &c, PMCTRS_ALL_CPUS).cntr0(), 300);
    assert_eq!(counts(&d, f, &c, n::PCNT5READCNTRS)[0].pf_cntr0, 300);
}

#[test]
fn freq_sets_periods_and_256_needs_privilege() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 0);
    let u = user(20, vec![0, 1]);
    let f = d.open(&u, PCNTOPENALL).unwrap();
    setup(&d, f, &u);
    assert_eq!(
        ioctl(&d, f, &u, n::PCNT5FREQ, 0x300).unwrap_err(),
        Errno::EPERM
    );
    // The field's low bit alone asks for 256 (the driver forced the high one).
    assert_eq!(
        ioctl(&d, f, &u, n::PCNT5FREQ, 0x100).unwrap_err(),
        Errno::EPERM
    );
    ioctl(&d, f, &u, n::PCNT5FREQ, 0x200 | 0x80 | 0x20).unwrap();
    d.release(f);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    setup(&d, f, &c); // another user: the open starts with nothing selected
    ioctl(&d, f, &c, n::PCNT5FREQ, 0x300).unwrap();
    ioctl(&d, f, &c, n::PCNT5RESTART, 1).unwrap();
    b.advance(0, Target::AllTasks, CLK, 256 * 5 + 3);
    let g = counts(&d, f, &c, n::PCNT5GETCNT)[0];
    assert_eq!(g.pf_cntr0, 5, "every 256 events");
    assert_eq!(
        raw(&d, f, &c, 0).cntr0(),
        3,
        "raw counter modulo the period"
    );
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!(
        info.pi_period[..2],
        [256, 65536],
        "the mux and periods survive reopen"
    );
}

#[test]
fn contexts_select_threads_and_modes() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 2);
    let u = user(20, vec![0, 1]);
    let f = d.open(&u, PCNTOPENALL).unwrap();
    setup(&d, f, &u);
    assert_eq!(
        ioctl(&d, f, &u, n::PCNT5CTXTS, PF5_CTXT_USER).unwrap_err(),
        Errno::EACCES,
        "ALL_PROC is system-wide"
    );
    assert_eq!(
        ioctl(&d, f, &u, n::PCNT5RESTART, 1).unwrap_err(),
        Errno::EACCES,
        "RESTART under LOGALL, like PCNTRENABLE"
    );
    assert_eq!(
        ioctl(
            &d,
            f,
            &u,
            n::PCNT5CTXTS,
            PF5_CTXT_KERNEL | PF5_CTXT_THIS_PROC
        )
        .unwrap_err(),
        Errno::EACCES,
        "kernel-only of own threads needs paranoid <= 1"
    );
    let before = b.opened().len();
    ioctl(&d, f, &u, n::PCNT5CTXTS, PF5_CTXT_USER | PF5_CTXT_THIS_PROC).unwrap();
    ioctl(&d, f, &u, n::PCNT5RESTART, 1).unwrap();
    let opened = b.opened();
    assert!(opened.len() > before);
    assert!(
        opened[before..]
            .iter()
            .all(|g| g.target == Target::Thread(20) && g.modes == ModeFilter::USER)
    );
    b.advance(0, Target::AllTasks, CLK, 1000);
    b.advance(0, Target::Thread(20), CLK, 77);
    assert_eq!(counts(&d, f, &u, n::PCNT5READCNTRS)[0].pf_cntr0, 77);
    // A bit the Tru64 driver did not pass to the chip is ignored.
    ioctl(
        &d,
        f,
        &u,
        n::PCNT5CTXTS,
        1 << 12 | PF5_CTXT_USER | PF5_CTXT_THIS_PROC,
    )
    .unwrap();

    let c = root(10);
    d.release(f);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    setup(&d, f, &c); // another user: the open starts with nothing selected
    let before = b.opened().len();
    ioctl(&d, f, &c, n::PCNT5CTXTS, PF5_CTXT_EXEC_AND_SUPER).unwrap();
    ioctl(&d, f, &c, n::PCNT5RESTART, 1).unwrap();
    let new = &b.opened()[before..];
    assert!(!new.is_empty());
    assert!(
        new.iter()
            .all(|g| g.target == Target::AllTasks && g.modes == ModeFilter::USER),
        "EXEC_AND_SUPER counts user mode"
    );
    let before = b.opened().len();
    ioctl(&d, f, &c, n::PCNT5CTXTS, PF5_CTXT_KERNEL).unwrap();
    assert!(b.opened()[before..].iter().all(|g| g.modes
        == ModeFilter {
            user: false,
            kernel: true,
            hypervisor: false
        }));
    // PFM_INFO_USER_ONLY says only user mode is counted: not for PAL mode
    // alone, which counts no user mode.
    let user_only = |contexts| {
        ioctl(&d, f, &c, n::PCNT5CTXTS, contexts).unwrap();
        let out = ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out;
        PfmInfo::read_from_bytes(&out).unwrap().pi_flags & abi::PFM_INFO_USER_ONLY != 0
    };
    assert!(user_only(PF5_CTXT_USER));
    assert!(!user_only(PF5_CTXT_KERNEL));
    assert!(
        !user_only(PF5_CTXT_NO_USER | PF5_CTXT_NO_KERNEL),
        "PAL mode only"
    );
}

#[test]
fn cbox_codes_follow_the_implementation() {
    let b = MockBackend::with_events(&[CLK, HostEvent::LlcReadAccess, HostEvent::LlcReadMiss]);
    let scache_read = 0x8_0000_0000_00F0u64;
    for (model, expected) in [
        (Implementation::Ev5, Err(Errno::EOPNOTSUPP)),
        (Implementation::Pca56, Ok(())),
    ] {
        let d = device(model, &b, 2);
        let c = root(10);
        let f = d.open(&c, PCNTOPENALL).unwrap();
        ioctl(&d, f, &c, n::PCNT5DISABLE, 4).unwrap();
        // EV5: PF5_MUX1_C_SCACHE_READ (no host event); PCA56: the same bits
        // are PF5_MUX1_C_BCACHE_DREAD_HIT (LLC loads - LLC load misses).
        assert_eq!(
            ioctl(&d, f, &c, n::PCNT5MUX, scache_read).map(|_| ()),
            expected,
            "{model}"
        );
    }
}

#[test]
fn other_families_ioctls_are_einval_and_counts_need_pfm_counters() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    for cmd in [n::PCNTSETMUX, n::PCNTGETCNT, n::PCNT6MUX, n::PCNT6READCNTRS] {
        assert_eq!(ioctl(&d, f, &c, cmd, 0).unwrap_err(), Errno::EINVAL);
    }
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_IPL).unwrap();
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5GETCNT, 0x10).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT5READCNTRS, 0x10).unwrap_err(),
        Errno::EINVAL
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS | 40 << 8).unwrap_err(),
        Errno::EINVAL,
        "profile-me only on EV67"
    );
}

/// A wide value read in parts while it runs can tear. Each CPU's
/// `(interrupts << width) + raw` comes from one read of its group, so it
/// never goes backwards however the reads interleave with counting.
#[test]
fn readcntrs_never_goes_backwards_while_events_advance() {
    for mode in [PCNTOPENALL, PCNTOPENEACH] {
        let b = MockBackend::with_events(&[CLK, BR]);
        let d = device(Implementation::Ev5, &b, 2);
        let c = root(10);
        let f = d.open(&c, mode).unwrap();
        setup(&d, f, &c);
        ioctl(&d, f, &c, n::PCNT5RESTART, ALL3).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (b, stop) = (b.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut step = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    // Odd steps so raw counters wrap at every possible phase.
                    step = (step * 7919 + 13) % 40_000;
                    b.advance((step % 2) as u32, Target::AllTasks, CLK, step);
                    b.advance(((step + 1) % 2) as u32, Target::AllTasks, BR, step / 3);
                }
            })
        };
        let mut last: Vec<[u64; 3]> = Vec::new();
        let mut wrapped = 0;
        for _ in 0..10_000 {
            let now: Vec<[u64; 3]> = counts(&d, f, &c, n::PCNT5READCNTRS)
                .iter()
                .map(|e| [e.pf_cntr0, e.pf_cntr1, e.pf_cntr2])
                .collect();
            if !last.is_empty() {
                for (old, new) in last.iter().zip(&now) {
                    for k in 0..3 {
                        assert!(
                            new[k] >= old[k],
                            "counter {k} went back: {old:?} -> {new:?}"
                        );
                        wrapped += usize::from(new[k] >> 16 > old[k] >> 16);
                    }
                }
            }
            last = now;
        }
        stop.store(true, Ordering::Relaxed);
        worker.join().unwrap();
        assert!(wrapped > 0, "the raw counters wrapped during the reads");
    }
}

/// ev5count's sequence on a fresh device: counter 1 unavailable, the others
/// started one by one.
#[test]
fn ev5count_sequence_on_a_fresh_device_counts_each_event_once() {
    let b = MockBackend::with_events(&[CLK]);
    for run in 0..2 {
        let d = device(Implementation::Ev56, &b, 2);
        for _ in 0..=run {
            let c = root(10);
            let f = d.open(&c, PCNTOPENALL).unwrap();
            ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
            ioctl(&d, f, &c, n::PCNT5CTXTS, PF5_CTXT_USER | PF5_CTXT_THIS_PROC).unwrap();
            ioctl(&d, f, &c, n::PCNT5FREQ, 0x200 | 0x80 | 0x20).unwrap();
            ioctl(&d, f, &c, n::PCNT5DISABLE, ALL3).unwrap();
            ioctl(&d, f, &c, n::PCNT5MUX, MUX).unwrap();
            ioctl(&d, f, &c, n::PCNTCLEARCNT, 0).unwrap();
            assert_eq!(
                ioctl(&d, f, &c, n::PCNT5RESTART, ALL3).unwrap_err(),
                Errno::EOPNOTSUPP
            );
            ioctl(&d, f, &c, n::PCNT5RESTART, 1).unwrap();
            assert_eq!(
                ioctl(&d, f, &c, n::PCNT5RESTART, 2).unwrap_err(),
                Errno::EOPNOTSUPP
            );
            ioctl(&d, f, &c, n::PCNT5RESTART, 4).unwrap();
            b.advance(0, Target::Thread(10), CLK, 1000);
            b.advance(1, Target::Thread(10), CLK, 234);
            ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
            let r = counts(&d, f, &c, n::PCNT5READCNTRS)[0];
            assert_eq!(
                (r.pf_cntr0, r.pf_cntr1, r.pf_cntr2),
                (1234, 0, 1234),
                "run {run}"
            );
            d.release(f);
        }
    }
}

/// As on EV4: a shorter period set by `PCNT5FREQ` keeps the raw counter
/// modulo the new period and raises no interrupt from events counted
/// under the old one (interrupts come only while enabled).
#[test]
fn a_shorter_freq_period_raises_no_interrupt_from_old_events() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev5, &b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    setup(&d, f, &c);
    ioctl(&d, f, &c, n::PCNT5RESTART, 1).unwrap();
    b.advance(0, Target::AllTasks, CLK, 40_000);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    assert_eq!(counts(&d, f, &c, n::PCNT5GETCNT)[0].pf_cntr0, 0);
    ioctl(&d, f, &c, n::PCNT5FREQ, 0x300).unwrap();
    assert_eq!(
        counts(&d, f, &c, n::PCNT5GETCNT)[0].pf_cntr0,
        0,
        "nothing counted since"
    );
    // 40 000 mod 256 = 64 kept: one interrupt 192 events on.
    assert_eq!(raw(&d, f, &c, 0).cntr0(), 64);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, CLK, 192);
    assert_eq!(counts(&d, f, &c, n::PCNT5GETCNT)[0].pf_cntr0, 1);
}
