//! What a hostile local user can try through the device, over the mock
//! backend: privilege from a user namespace, reading another user's counts,
//! wedging an open, exhausting the budgets, and a bug in pfmd.

use crate::backend::Target;
use crate::backend::mock::MockBackend;
use crate::device::budget::Limits;
use crate::device::test_fixtures::{caller, device, device_with_limits, ioctl, root, user};
use crate::device::{Device, FileId};
use crate::policy::{Caller, Credentials};
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{
    self as abi, AddrRangeT, Iccsr, PCNTOPENALL, PCNTOPENONE, PfCntrs, PfCntrsEv6, PfmInfo,
    PmctrsEv6,
};
use pfm_model::{HostEvent, Implementation};
use zerocopy::{FromBytes, IntoBytes};

const CLK: HostEvent = HostEvent::CpuClock;

/// Root of a user namespace of its own: full capabilities there, nobody here.
fn namespaced_root(tid: i32) -> Caller {
    Caller::with_credentials(
        tid,
        Credentials {
            tgid: tid,
            uid: 65534,
            gid: 65534,
            euid: 65534,
            egid: 65534,
            cap_effective: u64::MAX,
            cpus_allowed: vec![0, 1],
            initial_user_namespace: false,
            ..Credentials::default()
        },
    )
}

fn counts(d: &Device, f: FileId, c: &Caller) -> PfCntrs {
    let store = ioctl(d, f, c, n::PCNTGETCNT, 0x1000)
        .unwrap()
        .store
        .unwrap();
    PfCntrs::read_from_bytes(&store.bytes).unwrap()
}

fn info(d: &Device, f: FileId, c: &Caller) -> PfmInfo {
    PfmInfo::read_from_bytes(&ioctl(d, f, c, n::PCNTGETINFO, 0).unwrap().out).unwrap()
}

fn range(d: &Device, f: FileId, c: &Caller, start: u64, end: u64) -> Result<(), Errno> {
    let r = AddrRangeT {
        start,
        end,
        stride: 4,
        res0: 0,
    };
    d.ioctl(f, c, n::PCNTSETURANGE, r.as_bytes())
        .map(|_| ())
        .map_err(|e| e.errno())
}

/// uid 0 that dropped its capabilities (`setpriv --inh-caps=-all
/// --bounding-set=-all`): the kernel refuses it `perf stat -a`, so the
/// device refuses it LOGALL and kernel profiling; it is still uid 0.
#[test]
fn root_without_capabilities_gets_what_the_kernel_gives_it() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let c = Caller::with_credentials(
        10,
        Credentials {
            tgid: 10,
            cpus_allowed: vec![0, 1],
            initial_user_namespace: true,
            ..Credentials::default()
        },
    );
    let f = d.open(&c, PCNTOPENALL).unwrap();
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTLOGALL, 0).unwrap_err(),
        Errno::EACCES
    );
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    let r = root(11);
    d.release(f);
    let f = d.open(&r, PCNTOPENALL).unwrap();
    ioctl(&d, f, &r, n::PCNTLOGALL, 0).unwrap();
}

#[test]
fn capabilities_in_a_user_namespace_give_nothing() {
    let b = MockBackend::with_events(&[CLK]);
    for model in [Implementation::Ev4, Implementation::Ev5] {
        let d = device(model, &b, 2);
        let c = namespaced_root(10);
        let f = d.open(&c, PCNTOPENALL).unwrap();
        assert_eq!(
            ioctl(&d, f, &c, n::PCNTLOGALL, 0).unwrap_err(),
            Errno::EACCES
        );
        assert_eq!(
            ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap_err(),
            Errno::EACCES,
            "LOGALL is the scope after open"
        );
        ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
        let kernel = AddrRangeT {
            start: 0xffff_8000_0000_0000,
            end: 0xffff_8000_0001_0000,
            stride: 4,
            res0: 0,
        };
        assert_eq!(
            d.ioctl(f, &c, n::PCNTSETKRANGE, kernel.as_bytes())
                .unwrap_err()
                .errno(),
            Errno::EACCES,
            "kernel profiling"
        );
        if model == Implementation::Ev5 {
            assert_eq!(
                ioctl(&d, f, &c, n::PCNT5FREQ, 0x300).unwrap_err(),
                Errno::EPERM,
                "the 256 period"
            );
        }
        d.release(f);
    }
}

/// An EV4 device root has counted cycles on (cpu 0) and closed: counts and
/// a selection left for root's next open.
fn device_root_left_counts_on() -> (MockBackend, Device) {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let r = root(10);
    let f = d.open(&r, PCNTOPENALL).unwrap();
    ioctl(&d, f, &r, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &r, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, CLK, 40_960_000);
    assert!(counts(&d, f, &r).pf_cntr0 > 0);
    d.release(f);
    (b, d)
}

#[test]
fn another_user_starts_with_clear_counts_and_no_selection() {
    let (_b, d) = device_root_left_counts_on();
    let r = root(10);
    let nobody = user(20, vec![0, 1]);
    let f = d.open(&nobody, PCNTOPENALL).unwrap();
    assert_eq!(
        counts(&d, f, &nobody).pf_cntr0,
        0,
        "root's counts are not nobody's"
    );
    assert_eq!(
        info(&d, f, &nobody).pi_period,
        [0; 3],
        "nor root's selection"
    );
    d.release(f);

    // Root again, after nobody's open: a different uid from the last
    // holder's, so a clean start too.
    let f = d.open(&root(11), PCNTOPENALL).unwrap();
    assert_eq!(
        counts(&d, f, &root(11)).pf_cntr0,
        0,
        "nobody's open cleared them"
    );
    assert_eq!(
        info(&d, f, &root(11)).pi_period,
        [0; 3],
        "and root's old selection with them"
    );
    ioctl(&d, f, &r, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    d.release(f);

    // The same user with no one between finds its selection.
    let f = d.open(&root(12), PCNTOPENALL).unwrap();
    assert_ne!(info(&d, f, &root(12)).pi_period, [0; 3]);
    d.release(f);
}

/// Another user's ONE open of one CPU ends the previous user's counts on
/// the other CPUs too: they belong to a selection that is gone.
#[test]
fn another_users_one_open_clears_every_cpu_nobody_holds() {
    let (_b, d) = device_root_left_counts_on();

    let nobody_on_cpu1 = user(20, vec![1]);
    let f = d.open(&nobody_on_cpu1, PCNTOPENONE).unwrap();
    d.release(f);

    let f = d.open(&root(11), PCNTOPENALL).unwrap();
    assert_eq!(
        counts(&d, f, &root(11)).pf_cntr0,
        0,
        "cpu 0's counts went with root's selection"
    );
    assert_eq!(info(&d, f, &root(11)).pi_period, [0; 3]);
    d.release(f);
}

#[test]
fn a_pme_thread_that_exits_does_not_wedge_the_open() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let parent = user(30, vec![0, 1]);
    let child = user(31, vec![0, 1]);
    let f = d.open(&parent, PCNTOPENALL).unwrap();
    ioctl(&d, f, &parent, n::PCNTSETITEMS, abi::PFM_IPL).unwrap();
    ioctl(&d, f, &parent, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &child, n::PCNTLOGSELECT, 0).unwrap();
    b.exit_thread(31);
    for (cmd, arg) in [
        (n::PCNTSETMUX, Iccsr::new(0xa, 0, 0, 0, 2).0),
        (n::PCNTLOGSELECT, 0),
        (n::PCNTSETITEMS, abi::PFM_IPL | abi::PFM_COUNTERS),
        (n::PCNTRENABLE, 0),
    ] {
        ioctl(&d, f, &parent, cmd, arg)
            .unwrap_or_else(|e| panic!("{}: {e}", n::name(cmd).unwrap()));
    }
}

#[test]
fn pme_threads_of_one_open_are_budgeted() {
    let b = MockBackend::with_events(&[CLK]);
    let limits = Limits {
        pme_threads_per_open: 3,
        ..Limits::default()
    };
    let d = device_with_limits(Implementation::Ev4, &b, 2, limits);
    let f = d.open(&user(40, vec![0, 1]), PCNTOPENALL).unwrap();
    for tid in 40..43 {
        ioctl(&d, f, &user(tid, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    }
    assert_eq!(
        ioctl(&d, f, &user(43, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap_err(),
        Errno::ENOSPC
    );
    ioctl(&d, f, &user(42, vec![0, 1]), n::PCNTLOGSELECT, 0).expect("again: no new thread");
    ioctl(&d, f, &user(42, vec![0, 1]), n::PCNTCLEARPCBPME, 0).unwrap();
    ioctl(&d, f, &user(43, vec![0, 1]), n::PCNTLOGSELECT, 0).expect("room again");
    // Threads that exited hold no room, though no event has been reopened
    // on them since.
    b.exit_thread(40);
    b.exit_thread(41);
    for tid in 44..46 {
        ioctl(&d, f, &user(tid, vec![0, 1]), n::PCNTLOGSELECT, 0)
            .unwrap_or_else(|e| panic!("thread {tid}: {e}"));
    }
}

/// A PME thread that exits, its number taken by another thread (another
/// user's, say): the open counts the new thread neither at the next change
/// of its host events nor after.
#[test]
fn a_pme_thread_number_taken_by_a_new_thread_is_not_counted() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let owner = user(50, vec![0, 1]);
    let f = d.open(&owner, PCNTOPENALL).unwrap();
    ioctl(&d, f, &owner, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &user(51, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &owner, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(51), CLK, 4096);
    assert_eq!(counts(&d, f, &owner).pf_cntr0, 1);
    b.reuse_thread(51);
    // A change of the host events reopens them on the PME threads.
    let opened = b.opened().len();
    let ipl = abi::PFM_COUNTERS | abi::PFM_IPL;
    ioctl(&d, f, &owner, n::PCNTSETITEMS, ipl).unwrap();
    assert!(
        !b.opened()[opened..]
            .iter()
            .any(|s| s.target == Target::Thread(51)),
        "no event on the new thread 51"
    );
    b.advance(0, Target::Thread(51), CLK, 4096 * 5);
    assert_eq!(
        counts(&d, f, &owner).pf_cntr0,
        1,
        "the new thread 51 is not counted"
    );
}

/// A PME thread that execs a setuid program (the kernel removes the events
/// on it, and refuses its user new ones): a change from another process of
/// the user that holds the descriptor opens nothing on it again. (Thread
/// numbers past `pid_max`: the policy looks same-process threads up in the
/// host's `/proc`.)
#[test]
fn a_pme_thread_that_became_setuid_is_not_counted_again() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let helper = user(5_000_060, vec![0, 1]);
    let f = d.open(&helper, PCNTOPENALL).unwrap();
    ioctl(&d, f, &helper, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &user(5_000_061, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &helper, n::PCNTRENABLE, 0).unwrap();
    b.set_thread_owner(5_000_061, (0, 0));
    let opened = b.opened().len();
    ioctl(
        &d,
        f,
        &helper,
        n::PCNTSETITEMS,
        abi::PFM_COUNTERS | abi::PFM_IPL,
    )
    .expect("the change itself is the user's to make");
    assert!(
        !b.opened()[opened..]
            .iter()
            .any(|s| s.target == Target::Thread(5_000_061)),
        "no event on the setuid thread 61: {:?}",
        &b.opened()[opened..]
    );
    b.advance(0, Target::Thread(5_000_061), CLK, 4096 * 5);
    assert_eq!(counts(&d, f, &helper).pf_cntr0, 0);
}

/// The same, when the exec comes while the open's host events are being
/// opened (after pfmd looked at the thread, before its event opened): the
/// thread is looked at again after the open, and its event goes.
#[test]
fn a_pme_thread_that_turns_setuid_while_its_events_open_is_not_counted() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let helper = user(5_000_080, vec![0, 1]);
    let f = d.open(&helper, PCNTOPENALL).unwrap();
    ioctl(&d, f, &helper, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &user(5_000_081, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &helper, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &helper, n::PCNTRENABLE, 0).unwrap();
    b.set_thread_owner_on_open(5_000_081, (0, 0));
    ioctl(
        &d,
        f,
        &helper,
        n::PCNTSETITEMS,
        abi::PFM_COUNTERS | abi::PFM_IPL,
    )
    .expect("the change goes on without the thread");
    b.advance(0, Target::Thread(5_000_081), CLK, 4096 * 5);
    b.advance(0, Target::Thread(5_000_080), CLK, 4096 * 2);
    assert_eq!(
        counts(&d, f, &helper).pf_cntr0,
        2,
        "the helper's own thread only"
    );
}

/// A descriptor passed to a user who may not count what it counts
/// (SCM_RIGHTS, or inherited across a uid drop): it reads what the opener
/// started, but what would open new host events that count (another item,
/// event or range, enabling) is `EACCES`, and the open stays as it was.
#[test]
fn a_passed_descriptor_counts_no_more_than_its_opener_started() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let r = root(5_000_070);
    let other = user(5_000_071, vec![0, 1]);
    // System-wide.
    let f = d.open(&r, PCNTOPENALL).unwrap();
    ioctl(&d, f, &r, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &r, n::PCNTRENABLE, 0).unwrap();
    assert_eq!(
        ioctl(
            &d,
            f,
            &other,
            n::PCNTSETITEMS,
            abi::PFM_COUNTERS | abi::PFM_IPL
        )
        .unwrap_err(),
        Errno::EACCES,
        "IPL is a sampler on every CPU"
    );
    assert_eq!(info(&d, f, &other).pi_items, abi::PFM_COUNTERS);
    b.advance(0, Target::AllTasks, CLK, 4096 * 2);
    assert_eq!(counts(&d, f, &other).pf_cntr0, 2, "reading is allowed");
    ioctl(&d, f, &other, n::PCNTRDISABLE, 0).expect("so is stopping");
    assert_eq!(
        ioctl(&d, f, &other, n::PCNTRENABLE, 0).unwrap_err(),
        Errno::EACCES
    );
    ioctl(&d, f, &r, n::PCNTSETITEMS, abi::PFM_COUNTERS | abi::PFM_IPL).expect("root may");
    d.release(f);
    // Root's own thread (not dumpable, so root's).
    b.set_thread_owner(5_000_070, (0, 0));
    let f = d.open(&r, PCNTOPENALL).unwrap();
    ioctl(&d, f, &r, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &r, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &r, n::PCNTRENABLE, 0).unwrap();
    let ipl = abi::PFM_COUNTERS | abi::PFM_IPL;
    assert_eq!(
        ioctl(&d, f, &other, n::PCNTSETITEMS, ipl).unwrap_err(),
        Errno::EACCES
    );
    // Another thread of the same user is the user's to follow.
    let mate = user(5_000_072, vec![0, 1]);
    ioctl(&d, f, &r, n::PCNTCLEARPCBPME, 0).unwrap();
    ioctl(&d, f, &mate, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &other, n::PCNTSETITEMS, ipl).expect("thread 72 is the user's");
}

/// The same descriptor may count less (an item off, a narrower set of
/// events) but not see more: a wider profile range of root's system-wide
/// profile is `EACCES`.
#[test]
fn a_passed_descriptor_may_narrow_but_not_widen_a_profile() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let r = root(5_000_090);
    let other = user(5_000_091, vec![0, 1]);
    let f = d.open(&r, PCNTOPENALL).unwrap();
    let all = abi::PFM_COUNTERS | abi::PFM_IPL | abi::PFM_PROFILING;
    ioctl(&d, f, &r, n::PCNTSETITEMS, all).unwrap();
    ioctl(&d, f, &r, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    range(&d, f, &r, 0x10000, 0x10100).unwrap();
    ioctl(&d, f, &r, n::PCNTRENABLE, 0).unwrap();
    assert_eq!(
        range(&d, f, &other, 0x10000, 0x7fff_0000).unwrap_err(),
        Errno::EACCES,
        "a profile of every process"
    );
    ioctl(
        &d,
        f,
        &other,
        n::PCNTSETITEMS,
        abi::PFM_COUNTERS | abi::PFM_PROFILING,
    )
    .expect("IPL off counts less");
    ioctl(&d, f, &other, n::PCNTSETITEMS, abi::PFM_COUNTERS).expect("so does profiling off");
    assert_eq!(
        ioctl(&d, f, &other, n::PCNTSETITEMS, all).unwrap_err(),
        Errno::EACCES,
        "but not back on"
    );
    range(&d, f, &r, 0x10000, 0x7fff_0000).expect_err("no profiling selected");
}

#[test]
fn profile_memory_is_budgeted_per_user_across_opens_and_freed_at_close() {
    let b = MockBackend::with_events(&[CLK]);
    // 16 KiB of buckets is charged 32 KiB (buckets and a read's snapshot).
    let limits = Limits::new((1 << 20, 48 << 10), (4096, 1024), (1 << 30, 1 << 30), 8);
    let d = device_with_limits(Implementation::Ev4, &b, 2, limits);
    let on = |cpu| user(50 + cpu as i32, vec![cpu]);
    let f0 = d.open(&on(0), PCNTOPENONE).unwrap();
    let f1 = d.open(&on(1), PCNTOPENONE).unwrap();
    for (f, c) in [(f0, on(0)), (f1, on(1))] {
        ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
    }
    range(&d, f0, &on(0), 0x10000, 0x10000 + 64 * 1024).unwrap();
    assert_eq!(
        range(&d, f1, &on(1), 0x10000, 0x10000 + 64 * 1024).unwrap_err(),
        Errno::ENOMEM,
        "the same user's second open is past the per-user budget"
    );
    let other = caller(60, 2000, vec![1]);
    d.release(f1);
    let g = d.open(&other, PCNTOPENONE).unwrap();
    ioctl(&d, g, &other, n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
    range(&d, g, &other, 0x10000, 0x10000 + 64 * 1024).expect("another user has their own budget");
    d.release(f0);
    let f1 = d.open(&on(1), PCNTOPENONE);
    assert_eq!(
        f1.unwrap_err().errno(),
        Errno::EBUSY,
        "cpu 1 is the other user's"
    );
    let f0 = d.open(&on(0), PCNTOPENONE).unwrap();
    ioctl(&d, f0, &on(0), n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
    range(&d, f0, &on(0), 0x10000, 0x10000 + 64 * 1024).expect("freed at close");
}

/// A short `read(2)` leaves its snapshot of the buckets until the next call;
/// a new range then still fits the budget the old one did: the kept
/// buckets give way rather than the range being refused.
#[test]
fn a_kept_read_snapshot_gives_way_to_a_new_range() {
    let b = MockBackend::with_events(&[CLK]);
    // 16 KiB of buckets is charged 32 KiB: one range fits, two do not.
    let limits = Limits::new((1 << 20, 48 << 10), (4096, 1024), (1 << 30, 1 << 30), 8);
    let d = device_with_limits(Implementation::Ev4, &b, 2, limits);
    let c = user(52, vec![0]);
    let f = d.open(&c, PCNTOPENONE).unwrap();
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
    range(&d, f, &c, 0x10000, 0x10000 + 64 * 1024).unwrap();
    range(&d, f, &c, 0x10000, 0x10000 + 64 * 1024).expect("a replacement fits");
    range(&d, f, &c, 0x10000, 0x10000 + 64 * 1024).expect("and another");
    assert_eq!(d.read(f, &c, 0, 4).unwrap(), vec![0; 4], "a short read");
    range(&d, f, &c, 0x20000, 0x20000 + 64 * 1024).expect("the new range fits");
    range(&d, f, &c, 0x20000, 0x20000 + 64 * 1024).expect("and the next");
    assert_eq!(d.read(f, &c, 0, 8).unwrap(), vec![0; 8]);
}

#[test]
fn perf_descriptors_are_budgeted() {
    let b = MockBackend::with_events(&[CLK]);
    // ALL on 2 CPUs: one group of one event per CPU, and with IPL one
    // sampler per CPU: 4 descriptors.
    let limits = Limits::new((1 << 30, 1 << 30), (100, 3), (1 << 30, 1 << 30), 8);
    let d = device_with_limits(Implementation::Ev4, &b, 0, limits);
    let c = user(70, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS | abi::PFM_IPL).unwrap_err(),
        Errno::EBUSY
    );
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).expect("2 descriptors fit");
}

/// A change the budgets refuse leaves the open as it was: its items, its
/// enable, and counting (a refused `PCNTLOGSELECT` of a 127th thread once
/// left the open disabled, and `PCNTRENABLE` refused too).
#[test]
fn a_refused_change_leaves_the_open_counting_as_before() {
    let b = MockBackend::with_events(&[CLK]);
    // Two counting descriptors fit, the IPL samplers' two more do not.
    let limits = Limits::new((1 << 30, 1 << 30), (100, 3), (1 << 30, 1 << 30), 8);
    let d = device_with_limits(Implementation::Ev4, &b, 0, limits);
    let c = user(71, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(71), CLK, 4096 * 3);
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS | abi::PFM_IPL).unwrap_err(),
        Errno::EBUSY
    );
    let i = info(&d, f, &c);
    assert_eq!(i.pi_items, abi::PFM_COUNTERS, "the items as they were");
    assert_ne!(i.pi_flags & abi::PFM_INFO_ENABLED, 0, "still enabled");
    b.advance(1, Target::Thread(71), CLK, 4096 * 2);
    assert_eq!(counts(&d, f, &c).pf_cntr0, 5, "counting on, nothing lost");
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).expect("enabling again works");
}

/// A refused `RESTART` or `ENABWRITE` leaves the raw counters as they
/// were, and what is counted afterwards adds to them.
#[test]
fn a_refused_enable_leaves_the_raw_counters_as_they_were() {
    const M: u64 = 1 << 20;
    let br = HostEvent::BranchInstructions;
    let b = MockBackend::with_events(&[CLK, br]);
    // Counter 0's two descriptors fit; counter 1's two more do not.
    let limits = Limits::new((1 << 30, 1 << 30), (100, 3), (1 << 30, 1 << 30), 8);
    let d = device_with_limits(Implementation::Ev6, &b, 0, limits);
    let c = user(72, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    // Counter 0 cycles, counter 1 conditional branches; only counter 0 on.
    ioctl(&d, f, &c, n::PCNT6DISABLE, 2).unwrap();
    ioctl(&d, f, &c, n::PCNT6MUX, 0x1).unwrap();
    ioctl(&d, f, &c, n::PCNT6RESTART, 1).unwrap();
    b.advance(0, Target::Thread(72), CLK, 2 * M + 100);
    let raw0 = || {
        let word = PmctrsEv6::new(3, 0, 0, 0).0;
        let out = ioctl(&d, f, &c, n::PCNT6GETCNTRS, word).unwrap().out;
        PmctrsEv6::read_from_bytes(&out).unwrap().cntr0()
    };
    assert_eq!(raw0(), 100);
    let write_both = PmctrsEv6::new(3, abi::PMCTRS_ALL_CPUS, 5000, 7).0;
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT6ENABWRITE, write_both).unwrap_err(),
        Errno::EBUSY
    );
    assert_eq!(raw0(), 100, "the refused ENABWRITE wrote nothing");
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT6RESTART, 3).unwrap_err(),
        Errno::EBUSY
    );
    assert_eq!(raw0(), 100, "the refused RESTART zeroed nothing");
    b.advance(0, Target::Thread(72), CLK, M - 50);
    let store = ioctl(&d, f, &c, n::PCNT6READCNTRS, 0x3000)
        .unwrap()
        .store
        .unwrap();
    let p = PfCntrsEv6::read_from_bytes(&store.bytes[..size_of::<PfCntrsEv6>()]).unwrap();
    assert_eq!(p.pf_cntr0, 3 * M + 50, "counting on, nothing lost");
}

/// An enable the host fails leaves the open disabled, so the next
/// `PCNTRENABLE` tries again (it did nothing while the open said enabled).
#[test]
fn an_enable_the_host_fails_can_be_tried_again() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 0);
    let c = user(73, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    b.set_failing_enable(true);
    assert_eq!(ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap_err(), Errno::EIO);
    assert_eq!(info(&d, f, &c).pi_flags & abi::PFM_INFO_ENABLED, 0);
    b.set_failing_enable(false);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(73), CLK, 4096 * 2);
    assert_eq!(counts(&d, f, &c).pf_cntr0, 2, "counting");
}

#[test]
fn a_panic_in_a_request_is_eio_and_the_device_serves_on() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let c = root(80);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    b.set_panic_on_open(true);
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap_err(),
        Errno::EIO
    );
    b.set_panic_on_open(false);
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).expect("the same open works");
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    d.release(f);
    assert!(d.open(&root(81), PCNTOPENALL).is_ok(), "and the device");
}

/// An open waits for a release only right after the holder's close: a close
/// that was not the last (a child kept a copy, and the holder's process
/// exited) lets every later open be refused at once, not after a wait.
#[test]
fn a_close_long_past_is_not_a_release_on_the_way() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let holder = root(90);
    let f = d.open(&holder, PCNTOPENALL).unwrap();
    let other = root(91);
    assert!(
        !d.release_in_flight(&other, PCNTOPENALL),
        "a holder at work"
    );
    d.flush(f, &holder);
    assert!(d.release_in_flight(&other, PCNTOPENALL), "a close just now");
    std::thread::sleep(crate::device::RELEASE_FOLLOWS_CLOSE + std::time::Duration::from_millis(50));
    assert!(
        !d.release_in_flight(&other, PCNTOPENALL),
        "a close that was not the last"
    );
    ioctl(&d, f, &holder, n::PCNTRDISABLE, 0).unwrap();
    d.flush(f, &holder);
    assert!(
        d.release_in_flight(&other, PCNTOPENALL),
        "another close just now"
    );
}

/// `PCNTCLEARPCBPME` by a thread that set its bit keeps the host events
/// (what it created counts on) and leaves out its own work from then on.
#[test]
fn a_cleared_pme_thread_is_left_out_without_new_host_events() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev4, &b, 2);
    let owner = user(60, vec![0, 1]);
    let f = d.open(&owner, PCNTOPENALL).unwrap();
    ioctl(&d, f, &owner, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &user(61, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &user(62, vec![0, 1]), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &owner, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(61), CLK, 4096 * 2);
    let opened = b.opened().len();
    ioctl(&d, f, &user(61, vec![0, 1]), n::PCNTCLEARPCBPME, 0).unwrap();
    let new: Vec<_> = b.opened()[opened..].iter().map(|s| s.target).collect();
    assert!(
        !new.is_empty() && new.iter().all(|t| *t == Target::Thread(61)),
        "only groups on the clearing thread: {new:?}"
    );
    let opened = b.opened().len();
    ioctl(&d, f, &user(61, vec![0, 1]), n::PCNTCLEARPCBPME, 0).unwrap();
    assert_eq!(b.opened().len(), opened, "a second clear opens nothing");
    b.advance(0, Target::Thread(61), CLK, 4096 * 3);
    b.advance(1, Target::Thread(62), CLK, 4096);
    assert_eq!(
        counts(&d, f, &owner).pf_cntr0,
        3,
        "61's work after its clear left out"
    );
    // The groups switch as one: disabled, nothing counts.
    ioctl(&d, f, &owner, n::PCNTRDISABLE, 0).unwrap();
    b.advance(0, Target::Thread(62), CLK, 4096);
    ioctl(&d, f, &owner, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(61), CLK, 4096 * 4);
    assert_eq!(counts(&d, f, &owner).pf_cntr0, 3);
}
