//! The EV6 and EV67 ioctls over the mock backend: the PAPI Tru64 call
//! sequence, per-counter select bits, raw counters, EV67 pairs and
//! profile-me statistics.

use crate::backend::Target;
use crate::backend::mock::MockBackend;
use crate::device::test_fixtures::{caller, ioctl};
use crate::device::{Device, FileId};
use crate::policy::Caller;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{
    self as abi, PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE, PMCTRS_ALL_CPUS, PfCntrsEv6, PfmInfo,
    PmctrsEv6,
};
use pfm_model::{HostEvent, Implementation};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use zerocopy::FromBytes;

const CLK: HostEvent = HostEvent::CpuClock;
const BR: HostEvent = HostEvent::BranchInstructions;
const M: u64 = 1 << 20;

const PF6_MUX0_CYCLES: u64 = 0x00;
const PF6_MUX1_RET_COND_BRANCHES: u64 = 0x1;
const PF6_MUX1_RET_BRANCH_MISPREDICTS: u64 = 0x2;
const BOTH: u64 = 3;

fn device(model: Implementation, backend: &MockBackend) -> Device {
    crate::device::test_fixtures::device(model, backend, 2)
}

fn counts(d: &Device, f: FileId, c: &Caller, cmd: u32) -> Vec<PfCntrsEv6> {
    let store = ioctl(d, f, c, cmd, 0x3000).unwrap().store.unwrap();
    <[PfCntrsEv6]>::ref_from_bytes(&store.bytes)
        .unwrap()
        .to_vec()
}

fn info(d: &Device, f: FileId, c: &Caller) -> PfmInfo {
    PfmInfo::read_from_bytes(&ioctl(d, f, c, n::PCNTGETINFO, 0).unwrap().out).unwrap()
}

/// PAPI's Tru64 substrate, step by step, run by an unprivileged user.
#[test]
fn papi_tru64_sequence_counts_the_workload_only() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(40, 1000, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTCLEARCNT, 0).unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6MUX,
        PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES,
    )
    .unwrap();
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTCLEARCNT, 0).unwrap();
    b.advance(0, Target::Thread(40), CLK, 5 * M);
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6RESTART,
        PmctrsEv6::new(BOTH, PMCTRS_ALL_CPUS, 0, 0).0,
    )
    .unwrap();
    // The workload.
    b.advance(0, Target::Thread(40), CLK, 2 * M + 1000);
    b.advance(1, Target::Thread(40), CLK, M / 2);
    b.advance(1, Target::Thread(40), BR, 12345);
    b.advance(0, Target::AllTasks, CLK, 50 * M);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    b.advance(0, Target::Thread(40), CLK, 9 * M);
    let p = counts(&d, f, &c, n::PCNT6READCNTRS);
    assert_eq!(p.len(), 1, "ALL: element 0 of the caller's 32");
    assert_eq!(
        p[0].pf_cntr0,
        2 * M + 1000 + M / 2,
        "cycles of the workload only"
    );
    assert_eq!(p[0].pf_cntr1, 12345);
    let g = counts(&d, f, &c, n::PCNT6GETCNT);
    assert_eq!(
        (g[0].pf_cntr0, g[0].pf_cntr1),
        (2, 0),
        "interrupts: 2^20 events each"
    );
    let i = info(&d, f, &c);
    assert_eq!((i.pi_family, i.pi_impl, i.pi_ncounters), (2, 5, 2));
    assert_eq!(i.pi_width[..2], [20, 20]);
    assert_eq!(i.pi_period[..2], [M, M]);
}

#[test]
fn branch_mispredicts_counts_cycles_as_on_the_chip() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(10, 0, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6MUX,
        PF6_MUX0_CYCLES | PF6_MUX1_RET_BRANCH_MISPREDICTS,
    )
    .unwrap();
    ioctl(&d, f, &c, n::PCNT6RESTART, BOTH).unwrap();
    b.advance(1, Target::AllTasks, CLK, 777);
    let p = counts(&d, f, &c, n::PCNT6READCNTRS)[0];
    assert_eq!((p.pf_cntr0, p.pf_cntr1), (777, 777));
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT6MUX, PF6_MUX1_RET_COND_BRANCHES).unwrap_err(),
        Errno::EOPNOTSUPP,
        "no branch event on this host, counter 1 on"
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT6MUX, 0x8).unwrap_err(),
        Errno::EINVAL
    );
    for cmd in [n::PCNTSETMUX, n::PCNT5MUX, n::PCNT5READCNTRS] {
        assert_eq!(ioctl(&d, f, &c, cmd, 0).unwrap_err(), Errno::EINVAL);
    }
}

#[test]
fn enabwrite_preloads_and_disable_stops_one_counter() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(10, 0, vec![0, 1]);
    let f = d.open(&c, PCNTOPENEACH).unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6MUX,
        PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES,
    )
    .unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6ENABWRITE,
        PmctrsEv6::new(1, 1, M - 4, 0).0,
    )
    .unwrap();
    let raw = |cpu| {
        let r = ioctl(
            &d,
            f,
            &c,
            n::PCNT6GETCNTRS,
            PmctrsEv6::new(BOTH, cpu, 0, 0).0,
        )
        .unwrap();
        PmctrsEv6::read_from_bytes(&r.out).unwrap()
    };
    assert_eq!((raw(1).cntr0(), raw(1).cpu()), (M - 4, 1));
    assert_eq!(raw(0).cntr0(), 0, "only CPU 1 was written");
    b.advance(1, Target::AllTasks, CLK, 4);
    b.advance(1, Target::AllTasks, BR, 9);
    let g = counts(&d, f, &c, n::PCNT6GETCNT);
    assert_eq!(g.len(), 2);
    assert_eq!(
        g[1].pf_cntr0, 1,
        "2^20 - 4 preloaded: the 4th event interrupts"
    );
    assert_eq!(
        counts(&d, f, &c, n::PCNT6READCNTRS)[1].pf_cntr1,
        9,
        "counter 1 was on from open: ENABWRITE started counting"
    );
    ioctl(&d, f, &c, n::PCNT6DISABLE, 2).unwrap();
    b.advance(1, Target::AllTasks, BR, 100);
    b.advance(1, Target::AllTasks, CLK, 100);
    let p = counts(&d, f, &c, n::PCNT6READCNTRS)[1];
    assert_eq!((p.pf_cntr0, p.pf_cntr1), (M + 100, 9));
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6SETCNTRS,
        PmctrsEv6::new(BOTH, PMCTRS_ALL_CPUS, 5, 6).0,
    )
    .unwrap();
    let p = counts(&d, f, &c, n::PCNT6READCNTRS);
    assert_eq!((p[0].pf_cntr0, p[1].pf_cntr0, p[1].pf_cntr1), (5, M + 5, 6));
    ioctl(&d, f, &c, n::PCNT6CLEAR, 1).unwrap();
    assert_eq!(counts(&d, f, &c, n::PCNT6READCNTRS)[1].pf_cntr0, M);
    assert_eq!(
        ioctl(
            &d,
            f,
            &c,
            n::PCNT6GETCNTRS,
            PmctrsEv6::new(BOTH, PMCTRS_ALL_CPUS, 0, 0).0
        )
        .unwrap_err(),
        Errno::EINVAL
    );
}

#[test]
fn one_mode_getcntrs_all_cpus_reads_its_cpu() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(10, 0, vec![0]);
    let f = d.open(&c, PCNTOPENONE).unwrap();
    ioctl(&d, f, &c, n::PCNT6MUX, PF6_MUX0_CYCLES).unwrap();
    ioctl(&d, f, &c, n::PCNT6RESTART, 1).unwrap();
    b.advance(0, Target::AllTasks, CLK, 42);
    let r = ioctl(
        &d,
        f,
        &c,
        n::PCNT6GETCNTRS,
        PmctrsEv6::new(1, PMCTRS_ALL_CPUS, 0, 0).0,
    )
    .unwrap();
    assert_eq!(PmctrsEv6::read_from_bytes(&r.out).unwrap().cntr0(), 42);
}

#[test]
fn ev67_counts_only_its_pairs() {
    let b = MockBackend::with_events(&[CLK, HostEvent::Instructions]);
    let d = device(Implementation::Ev67, &b);
    let c = caller(10, 0, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    for bad in [0x01, 0x02, 0x10 | 0x08, 0x1C, 0x20] {
        assert_eq!(
            ioctl(&d, f, &c, n::PCNT6MUX, bad).unwrap_err(),
            Errno::EINVAL,
            "{bad:#x}"
        );
    }
    assert_eq!(
        ioctl(&d, f, &c, n::PCNT6MUX, 0x0C).unwrap_err(),
        Errno::EOPNOTSUPP,
        "replay traps: no host event"
    );
    ioctl(&d, f, &c, n::PCNT6MUX, 0x04).expect("cycles and undefined: counter 1 stays off");
    assert_eq!(info(&d, f, &c).pi_fidelity[..2], [2, 0]);
    ioctl(&d, f, &c, n::PCNT6MUX, 0x00).unwrap();
    ioctl(&d, f, &c, n::PCNT6RESTART, BOTH).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::Instructions, 1000);
    b.advance(0, Target::AllTasks, CLK, 3000);
    let p = counts(&d, f, &c, n::PCNT6READCNTRS)[0];
    assert_eq!(
        (p.pf_cntr0, p.pf_cntr1),
        (1000, 3000),
        "retired instructions, cycles"
    );
    ioctl(&d, f, &c, n::PCNT6MUX, 0x14).expect("profile-me mode");
    assert_eq!(info(&d, f, &c).pi_fidelity[..2], [2, 0]);
}

#[test]
fn ev67_profile_me_statistics_need_the_host_to_measure_them() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev67, &b);
    let c = caller(10, 0, vec![0, 1]);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    let items = |stat: u64| abi::PFM_PROFILING | stat << 8;
    for plain in [40, 18, 43] {
        ioctl(&d, f, &c, n::PCNTSETITEMS, items(plain)).expect("RETIRE, FREQ, VALID");
    }
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETITEMS, items(33)).unwrap_err(),
        Errno::EOPNOTSUPP,
        "PF67_PM_MISPREDICT: pfmd drives no instruction-sampling unit"
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTSETITEMS, items(44)).unwrap_err(),
        Errno::EINVAL
    );
    ioctl(&d, f, &c, n::PCNTSETITEMS, items(40)).expect("RETIRE from IP samples on any host");
}

#[test]
fn readcntrs_never_goes_backwards_while_events_advance() {
    let b = MockBackend::with_events(&[CLK, BR]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(10, 0, vec![0, 1]);
    let f = d.open(&c, PCNTOPENEACH).unwrap();
    ioctl(
        &d,
        f,
        &c,
        n::PCNT6MUX,
        PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES,
    )
    .unwrap();
    ioctl(&d, f, &c, n::PCNT6RESTART, BOTH).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (b, stop) = (b.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut step = 1u64;
            while !stop.load(Ordering::Relaxed) {
                step = (step * 7919 + 13) % 400_000;
                b.advance((step % 2) as u32, Target::AllTasks, CLK, step);
                b.advance(((step + 1) % 2) as u32, Target::AllTasks, BR, step);
            }
        })
    };
    let mut last = vec![[0u64; 2]; 2];
    let mut wrapped = 0;
    for _ in 0..10_000 {
        let now: Vec<[u64; 2]> = counts(&d, f, &c, n::PCNT6READCNTRS)
            .iter()
            .map(|e| [e.pf_cntr0, e.pf_cntr1])
            .collect();
        for (old, new) in last.iter().zip(&now) {
            for k in 0..2 {
                assert!(
                    new[k] >= old[k],
                    "counter {k} went back: {old:?} -> {new:?}"
                );
                wrapped += usize::from(new[k] >> 20 > old[k] >> 20);
            }
        }
        last = now;
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    assert!(wrapped > 0);
}

/// A PCNT6DISABLE of one open must not change what the next open sees: the
/// PAPI sequence behaves the same on every run.
#[test]
fn a_new_open_starts_with_every_counter_on() {
    let b = MockBackend::with_events(&[CLK]);
    let d = device(Implementation::Ev6, &b);
    let c = caller(10, 0, vec![0, 1]);
    for _ in 0..2 {
        let f = d.open(&c, PCNTOPENALL).unwrap();
        assert_eq!(
            ioctl(
                &d,
                f,
                &c,
                n::PCNT6MUX,
                PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES
            )
            .unwrap_err(),
            Errno::EOPNOTSUPP
        );
        ioctl(&d, f, &c, n::PCNT6DISABLE, 2).unwrap();
        ioctl(
            &d,
            f,
            &c,
            n::PCNT6MUX,
            PF6_MUX0_CYCLES | PF6_MUX1_RET_COND_BRANCHES,
        )
        .unwrap();
        ioctl(&d, f, &c, n::PCNT6RESTART, 1).unwrap();
        d.release(f);
    }
    let f = d.open(&c, PCNTOPENALL).unwrap();
    let i = info(&d, f, &c);
    assert_eq!(
        i.pi_fidelity[..2],
        [2, 0],
        "counter 0's cycles carry over, counter 1 has none"
    );
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, CLK, 5);
    assert_eq!(counts(&d, f, &c, n::PCNT6READCNTRS)[0].pf_cntr0, 5);
}
