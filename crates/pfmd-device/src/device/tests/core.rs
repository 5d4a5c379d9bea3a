//! State-machine tests of the device core over the mock backend.

use crate::backend::mock::MockBackend;
use crate::backend::{ModeFilter, Target};
use crate::device::test_fixtures::{device, ioctl, root, user};
use crate::device::{Device, FileId};
use crate::policy::Caller;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{self as abi, PfmInfo};
use pfm_abi::{Iccsr, PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE, PfCntrs};
use pfm_model::HostEvent;
use pfm_model::Implementation;
use zerocopy::FromBytes;

fn device_with(backend: &MockBackend, paranoid: i32) -> Device {
    device(Implementation::Ev4, backend, paranoid)
}

fn cycles_only(pc0: u64) -> u64 {
    Iccsr::new(0xa, 0, pc0, 0, 2).0
}

fn getcnt(d: &Device, f: FileId, c: &Caller) -> Vec<PfCntrs> {
    let reply = ioctl(d, f, c, n::PCNTGETCNT, 0x1000).unwrap();
    let store = reply.store.expect("GETCNT stores at the caller's pointer");
    assert_eq!(store.addr, 0x1000);
    <[PfCntrs]>::ref_from_bytes(&store.bytes).unwrap().to_vec()
}

fn counting_setup(d: &Device, f: FileId, c: &Caller) {
    ioctl(d, f, c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    ioctl(d, f, c, n::PCNTSETMUX, cycles_only(1)).unwrap();
    ioctl(d, f, c, n::PCNTCLEARCNT, 0).unwrap();
}

/// An open in `mode` by `c`, counting PF_CYCLES every 4096, cleared.
fn counting_open(d: &Device, c: &Caller, mode: i32) -> FileId {
    let f = d.open(c, mode).unwrap();
    counting_setup(d, f, c);
    f
}

#[test]
fn open_modes_hold_cpus_and_busy_is_per_cpu() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let all = d.open(&root(10), PCNTOPENALL).unwrap();
    assert_eq!(
        d.open(&root(11), PCNTOPENALL).unwrap_err().errno(),
        Errno::EBUSY
    );
    assert_eq!(
        d.open(&user(12, vec![1]), PCNTOPENONE).unwrap_err().errno(),
        Errno::EBUSY
    );
    d.release(all);
    let one0 = d.open(&user(13, vec![0]), PCNTOPENONE).unwrap();
    let one1 = d.open(&user(14, vec![1]), PCNTOPENONE).unwrap();
    assert_eq!(
        d.open(&user(15, vec![1]), PCNTOPENONE).unwrap_err().errno(),
        Errno::EBUSY
    );
    assert_eq!(
        d.open(&root(16), PCNTOPENEACH).unwrap_err().errno(),
        Errno::EBUSY,
        "root too"
    );
    d.release(one0);
    d.release(one1);
    assert_eq!(
        d.open(&user(17, vec![0, 1]), PCNTOPENONE)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    assert!(d.open(&root(18), 0).is_ok(), "no mode bits means ALL");
}

/// `pr_cycle` dates the most recent interrupt: a read long after
/// `PCNTRDISABLE` reports the time the interrupts were folded in at the
/// disable, not the time of the read.
#[test]
fn pr_cycle_is_not_the_time_of_a_late_read() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let khz = d.config().cpu_khz;
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 5 * 4096);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    let after_disable = crate::device::now_cycles(khz);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let got = getcnt(&d, f, &c);
    assert_eq!(got[0].pf_cntr0, 5);
    assert!(
        got[0].pr_cycle <= after_disable,
        "pr_cycle {} is later than the disable ({after_disable})",
        got[0].pr_cycle
    );
}

#[test]
fn interrupts_are_floor_of_events_over_period_while_enabled() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 1_000_000);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        0,
        "nothing counts before PCNTRENABLE"
    );
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 10 * 4096 + 4095);
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 4096 + 1);
    let got = getcnt(&d, f, &c);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].pf_cntr0, 11, "ALL sums the CPUs' interrupts");
    assert_eq!(got[0].pf_cntr1, 0, "counter 1 is disabled");
    assert!(got[0].pr_cycle > 0);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 100 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 11, "disabled: no interrupts");
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 1);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        12,
        "the residual 4095 carried over"
    );
}

#[test]
fn counts_survive_close_and_reopen_until_cleared() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 5 * 4096);
    d.release(f);
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 5 * 4096);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        5,
        "kept, and nothing counted while closed"
    );
    let info = ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap();
    let info = PfmInfo::read_from_bytes(&info.out).unwrap();
    assert_eq!(info.pi_flags & abi::PFM_INFO_ENABLED, 0, "open disables");
    assert_eq!(
        info.pi_items,
        abi::PFM_COUNTERS,
        "open selects counters only"
    );
    assert_eq!(info.pi_period[0], 4096, "the mux survives reopen");
    ioctl(&d, f, &c, n::PCNTCLEARCNT, 0).unwrap();
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 0);
}

#[test]
fn each_mode_returns_one_element_per_configured_cpu() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENEACH);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 3 * 4096);
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 7 * 4096);
    let got = getcnt(&d, f, &c);
    assert_eq!(
        got.iter().map(|p| p.pf_cntr0).collect::<Vec<_>>(),
        vec![3, 7]
    );
}

#[test]
fn one_mode_counts_only_its_cpu() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 0);
    let c = user(10, vec![1]);
    let f = counting_open(&d, &c, PCNTOPENONE);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 9 * 4096);
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 2 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 2);
    assert!(b.opened().iter().all(|g| g.cpu == 1));
}

#[test]
fn errno_rows_without_sampling() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    let e = |cmd, arg| ioctl(&d, f, &c, cmd, arg).unwrap_err();
    assert_eq!(
        e(n::PCNTSETMUX, Iccsr::new(0xa, 0, 0, 0, 3).0),
        Errno::EINVAL
    );
    assert_eq!(
        e(n::PCNTSETMUX, Iccsr::new(0xa, 0, 0, 0, 2).0 | 1 << 40),
        Errno::EINVAL
    );
    assert_eq!(
        e(n::PCNTSETMUX, Iccsr::new(0x1, 0, 0, 0, 2).0),
        Errno::EINVAL
    );
    assert_eq!(
        e(n::PCNTSETMUX, Iccsr::new(0xb, 0, 0, 0, 2).0),
        Errno::EOPNOTSUPP,
        "PF_PALMODE"
    );
    assert_eq!(
        e(n::PCNTSETMUX, Iccsr::new(0xa, 0x0, 0, 0, 0).0),
        Errno::EOPNOTSUPP,
        "PF_DCACHE enabled"
    );
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0x0, 0, 0, 2).0)
        .expect("a disabled counter is not resolved");
    assert_eq!(e(n::PCNTSETITEMS, 0), Errno::EINVAL);
    assert_eq!(
        e(n::PCNTSETITEMS, 0x300),
        Errno::EINVAL,
        "profile-me bits only on EV67"
    );
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_PROFILING).unwrap();
    assert_eq!(e(n::PCNTCLEARCNT, 0), Errno::EINVAL);
    assert_eq!(e(n::PCNTGETCNT, 0x1000), Errno::EINVAL);
    assert_eq!(e(n::PCNTGETIPLHIS, 0x1000), Errno::EINVAL);
    assert_eq!(e(n::PCNTCALLER, 0), Errno::EINVAL);
    let mut range = [0u8; 32];
    range[16] = 3; // stride 3
    assert_eq!(
        d.ioctl(f, &c, n::PCNTSETURANGE, &range)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    assert_eq!(
        d.ioctl(f, &c, n::PCNTSETUADDR, &[0; 16])
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
    assert_eq!(e(n::PCNT5MUX, 0), Errno::EINVAL, "other family");
    assert_eq!(e(n::PCNT6MUX, 0), Errno::EINVAL, "other family");
    assert_eq!(
        d.ioctl(f, &c, 0x5063, &[]).unwrap_err().errno(),
        Errno::EINVAL,
        "unknown"
    );
    assert_eq!(
        u64::from_ne_bytes(
            ioctl(&d, f, &c, n::PCNTGETRSIZE, 0)
                .unwrap()
                .out
                .try_into()
                .unwrap()
        ),
        0
    );
}

#[test]
fn unprivileged_callers_count_only_their_own_threads() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = user(20, vec![0, 1]);
    let f = counting_open(&d, &c, PCNTOPENALL);
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTLOGALL, 0).unwrap_err(),
        Errno::EACCES
    );
    assert_eq!(
        ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap_err(),
        Errno::EACCES,
        "LOGALL is in force after open"
    );
    // Groups opened before LOGSELECT (CPU-wide, never enabled for this
    // caller) are not what counts.
    let before = b.opened().len();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    let opened = b.opened();
    assert!(
        opened[before..]
            .iter()
            .all(|g| g.target == Target::Thread(20) && g.modes == ModeFilter::USER)
    );
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 50 * 4096);
    b.advance(1, Target::Thread(20), HostEvent::CpuClock, 4 * 4096);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        4,
        "only the PME thread's events"
    );
    ioctl(&d, f, &c, n::PCNTCLEARPCBPME, 0).unwrap();
    b.advance(1, Target::Thread(20), HostEvent::CpuClock, 4 * 4096);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        4,
        "PME bit cleared: the thread no longer counts"
    );
}

#[test]
fn privileged_open_shares_contended_counters_unprivileged_gets_ebusy() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    b.set_contended(true);
    let d = device_with(&b, 2);
    assert_eq!(
        d.open(&user(30, vec![0, 1]), PCNTOPENALL)
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
    let c = root(31);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_ne!(info.pi_flags & abi::PFM_INFO_SHARED, 0);
    counting_setup(&d, f, &c);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    assert!(b.opened().iter().all(|g| g.shared));
}

#[test]
fn info_reports_model_cpus_and_fidelity() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENEACH);
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!(info.pi_version, 1);
    assert_eq!(
        (
            info.pi_family,
            info.pi_impl,
            info.pi_ncpus,
            info.pi_ncounters
        ),
        (0, 0, 2, 2)
    );
    assert_eq!(info.pi_open_mode, abi::PFM_MODE_EACH);
    assert_eq!(
        info.pi_fidelity[0], 2,
        "cycles from cpu-clock is approximate"
    );
    assert_eq!(info.pi_fidelity[1], abi::PFM_FIDELITY_NONE);
    assert_eq!(info.pi_width[..2], [16, 12]);
}

#[test]
fn only_cpu_wide_shared_groups_are_scaled() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    // Enabled twice as long as running: multiplexed, or a thread that ran
    // half its time on the other CPU.
    b.set_times(2, 1);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(10), HostEvent::CpuClock, 3 * 4096);
    b.advance(1, Target::Thread(10), HostEvent::CpuClock, 3 * 4096);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        6,
        "a thread's per-CPU groups are never scaled"
    );
    d.release(f);

    b.set_contended(true);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 3 * 4096);
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        6,
        "shared CPU-wide groups scale by enabled/running"
    );
}

/// A host with a PMU: the hardware path, exact events and a derived formula
/// computed from one group read.
#[test]
fn hardware_host_counts_exact_and_derived_events_from_one_group() {
    let b = MockBackend::with_events(&HostEvent::NAMED);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    // Counter 0 PF_NONISSUES every 4096, counter 1 PF_BRANCHMISS every 256.
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xc, 0x3, 1, 1, 0).0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    let groups = b.opened();
    assert_eq!(groups.len(), 2, "one group per CPU");
    assert_eq!(
        groups[0].events,
        vec![
            HostEvent::Cycles,
            HostEvent::Instructions,
            HostEvent::BranchMisses
        ],
        "every host event of both counters in one group"
    );
    // 100 * 4096 cycles with 2 * 4096 * 20 instructions: non-issues/2 =
    // cycles - instructions/2 = 80 * 4096.
    b.advance(0, Target::AllTasks, HostEvent::Cycles, 100 * 4096);
    b.advance(0, Target::AllTasks, HostEvent::Instructions, 40 * 4096);
    b.advance(0, Target::AllTasks, HostEvent::BranchMisses, 256 * 7 + 255);
    let got = getcnt(&d, f, &c);
    assert_eq!((got[0].pf_cntr0, got[0].pf_cntr1), (80, 7));
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!(
        info.pi_fidelity[..2],
        [2, 1],
        "NONISSUES approximate, BRANCHMISS exact"
    );
    // PF_CYCLES is exact where the host has a cycle counter.
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    let info = PfmInfo::read_from_bytes(&ioctl(&d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap();
    assert_eq!(info.pi_fidelity[0], 1);
    assert_eq!(b.opened().last().unwrap().events, vec![HostEvent::Cycles]);
}

/// PCNTRDISABLE/PCNTRENABLE switch the host events off and on without
/// reopening them, so threads and processes they already follow (the PME
/// bit's inheritance) stay followed.
#[test]
fn disable_and_enable_keep_the_host_events_open() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    let opened = b.opened().len();
    b.advance(0, Target::Thread(10), HostEvent::CpuClock, 2 * 4096);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    b.advance(0, Target::Thread(10), HostEvent::CpuClock, 50 * 4096);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(10), HostEvent::CpuClock, 3 * 4096);
    assert_eq!(b.opened().len(), opened, "no group reopened");
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        5,
        "nothing counted while disabled"
    );
    // A new period of a counter that is not sampled keeps them too: the
    // threads the PME bit follows stay followed, and count at the new
    // period (65536 more events, one interrupt).
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 0, 0, 2).0).unwrap();
    assert_eq!(b.opened().len(), opened, "a new period reopens nothing");
    b.advance(0, Target::Thread(10), HostEvent::CpuClock, 16 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 5 + 1);
    // New items (sampling) do need new host events.
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS | abi::PFM_IPL).unwrap();
    assert!(b.opened().len() > opened);
}

/// A request that leaves the open as it is (the same selection again, a
/// second PCNTRDISABLE or PCNTRENABLE) switches no host event.
#[test]
fn a_repeated_setting_switches_no_host_event() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    let (opened, switches) = (b.opened().len(), b.group_switches());
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles_only(1)).unwrap();
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    assert_eq!(b.opened().len(), opened, "no group reopened");
    assert_eq!(
        b.group_switches(),
        switches,
        "a disabled open is not disabled again"
    );
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    assert_eq!(
        b.group_switches(),
        switches + 2,
        "one enable per CPU's group"
    );
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles_only(1)).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    assert_eq!(
        b.group_switches(),
        switches + 2,
        "an enabled open is not enabled again"
    );
    b.advance(1, Target::AllTasks, HostEvent::CpuClock, 3 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 3, "and it counts");
}

/// The samplers run inside the counting groups' window: switched on after
/// every group, off before any, so the IPL histogram never gets a tick for a
/// stretch the counters did not count.
#[test]
fn samplers_run_inside_the_counting_window() {
    use crate::backend::mock::Switch::{Group, Sampler};
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = d.open(&c, PCNTOPENEACH).unwrap();
    ioctl(&d, f, &c, n::PCNTSETITEMS, abi::PFM_COUNTERS | abi::PFM_IPL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles_only(1)).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGALL, 0).unwrap();
    let before = b.switches().len();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    // Two CPUs: two groups and two samplers.
    assert_eq!(
        b.switches()[before..],
        [
            Group(true),
            Group(true),
            Sampler(true),
            Sampler(true),
            Sampler(false),
            Sampler(false),
            Group(false),
            Group(false),
        ]
    );
}

/// A period made shorter while disabled raises no interrupt from the events
/// counted below the old one: they are kept modulo the new period, as the
/// chip's counter keeps its low bits, and interrupts come only while
/// enabled.
#[test]
fn a_shorter_period_raises_no_interrupt_from_old_events() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let c = root(10);
    let f = counting_open(&d, &c, PCNTOPENALL);
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles_only(0)).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 40_000);
    ioctl(&d, f, &c, n::PCNTRDISABLE, 0).unwrap();
    assert_eq!(
        getcnt(&d, f, &c)[0].pf_cntr0,
        0,
        "under one period of 65536"
    );
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles_only(1)).unwrap();
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 0, "nothing counted since");
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    // 40 000 mod 4096 = 3136 kept: one interrupt 960 events on.
    b.advance(0, Target::AllTasks, HostEvent::CpuClock, 960);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 1);
}

/// Bad input gets an errno and nothing else: random commands and argument
/// bytes on every model never panic, and the device stays usable.
#[test]
fn random_ioctls_never_panic_and_leave_the_device_usable() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for model in Implementation::ALL {
        let b = MockBackend::with_events(&HostEvent::NAMED);
        let d = device(model, &b, 2);
        let c = root(10);
        let f = d.open(&c, PCNTOPENEACH).unwrap();
        for _ in 0..5000 {
            let known = n::ALL[(next() % n::ALL.len() as u64) as usize].1;
            let cmd = if next() % 8 == 0 {
                next() as u32
            } else {
                known
            };
            let len = (next() % 40) as usize;
            let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = d.ioctl(f, &c, cmd, &data);
            let _ = d.read(f, &c, next() % 4096, (next() % 65536) as u32);
            b.advance(
                (next() % 2) as u32,
                Target::AllTasks,
                HostEvent::Cycles,
                next() % 100_000,
            );
        }
        d.release(f);
        let f = d
            .open(&c, PCNTOPENALL)
            .expect("the device is free again after release");
        ioctl(&d, f, &c, n::PCNTGETINFO, 0).expect("and answers");
    }
}

/// A second thread's `PCNTLOGSELECT` on an open already counting PME
/// threads joins the live host events: the first thread's stay open (so
/// what it created before counts on; reopened, they would follow only what
/// it creates after), events open on the new thread alone, with samplers
/// like the others', and nothing counted so far is lost.
#[test]
fn a_further_pme_thread_joins_the_live_events() {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    let d = device_with(&b, 2);
    let (first, second) = (root(30), root(31));
    let f = counting_open(&d, &first, PCNTOPENALL);
    ioctl(
        &d,
        f,
        &first,
        n::PCNTSETITEMS,
        abi::PFM_COUNTERS | abi::PFM_IPL,
    )
    .unwrap();
    ioctl(&d, f, &first, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &first, n::PCNTRENABLE, 0).unwrap();
    b.advance(0, Target::Thread(30), HostEvent::CpuClock, 3 * 4096);
    let (groups, samplers) = (b.opened().len(), b.sampler_specs().len());
    ioctl(&d, f, &second, n::PCNTLOGSELECT, 0).unwrap();
    let new_groups = &b.opened()[groups..];
    assert_eq!(new_groups.len(), 2, "one group per CPU: {new_groups:?}");
    assert!(new_groups.iter().all(|g| g.target == Target::Thread(31)));
    let specs = b.sampler_specs();
    let (old, new) = specs.split_at(samplers);
    assert_eq!(new.len(), 2, "one sampler per CPU: {new:?}");
    for spec in new {
        let like = old.iter().find(|s| s.cpu == spec.cpu).unwrap();
        assert_eq!(spec.target, Target::Thread(31));
        assert_eq!((spec.event, spec.period), (like.event, like.period));
    }
    b.advance(1, Target::Thread(30), HostEvent::CpuClock, 2 * 4096);
    b.advance(0, Target::Thread(31), HostEvent::CpuClock, 4 * 4096);
    assert_eq!(getcnt(&d, f, &first)[0].pf_cntr0, 9);
    // Selecting again opens nothing; a settings change rebuilds on both.
    ioctl(&d, f, &second, n::PCNTLOGSELECT, 0).unwrap();
    assert_eq!(b.opened().len(), groups + 2);
    ioctl(&d, f, &first, n::PCNTSETMUX, cycles_only(0)).unwrap();
    let rebuilt: Vec<Target> = b.opened()[groups + 2..].iter().map(|g| g.target).collect();
    assert_eq!(rebuilt.len(), 4, "{rebuilt:?}");
    assert!(rebuilt.contains(&Target::Thread(30)) && rebuilt.contains(&Target::Thread(31)));
    assert_eq!(
        getcnt(&d, f, &first)[0].pf_cntr0,
        9,
        "kept across the rebuild"
    );
}

/// A passed descriptor: another user's thread joins root's PME threads
/// (its own thread is its to count, and root's events count nothing new),
/// unless it is allowed less kernel-mode counting than the open has; then
/// the rebuild that would narrow the modes follows root's thread too, which
/// that user may not watch: `EACCES`, and nothing opens.
#[test]
fn another_users_thread_joins_only_without_narrowing_the_modes() {
    for (paranoid, joins) in [(2, false), (1, true)] {
        let b = MockBackend::with_events(&[HostEvent::CpuClock]);
        let d = device_with(&b, paranoid);
        let r = root(5_000_040);
        b.set_thread_owner(5_000_040, (0, 0));
        let f = counting_open(&d, &r, PCNTOPENALL);
        ioctl(&d, f, &r, n::PCNTLOGSELECT, 0).unwrap();
        ioctl(&d, f, &r, n::PCNTRENABLE, 0).unwrap();
        let groups = b.opened().len();
        let other = user(5_000_041, vec![0, 1]);
        let selected = ioctl(&d, f, &other, n::PCNTLOGSELECT, 0);
        if !joins {
            assert_eq!(selected.unwrap_err(), Errno::EACCES);
            assert_eq!(b.opened().len(), groups, "nothing opened");
            continue;
        }
        selected.expect("the user's own thread joins");
        let new: Vec<Target> = b.opened()[groups..].iter().map(|g| g.target).collect();
        assert_eq!(new, [Target::Thread(5_000_041); 2]);
        b.advance(0, Target::Thread(5_000_040), HostEvent::CpuClock, 4096);
        b.advance(1, Target::Thread(5_000_041), HostEvent::CpuClock, 4096);
        assert_eq!(getcnt(&d, f, &r)[0].pf_cntr0, 2);
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
            "a change still follows root's thread, which the user may not watch"
        );
    }
}

/// Under `PCNTLOGSELECT`, settings changed back take the host events they
/// had, switched off meanwhile and kept open: inherited events still follow
/// what the PME threads created since they opened (a mux rotated by
/// `pfmstat -a`), where new ones would follow only what comes after.
#[test]
fn settings_changed_back_take_their_kept_host_events() {
    let b = MockBackend::with_events(&HostEvent::NAMED);
    let d = device_with(&b, 2);
    let c = root(60);
    let f = counting_open(&d, &c, PCNTOPENALL);
    let (cycles, branches) = (cycles_only(1), Iccsr::new(0x8, 0, 1, 0, 2).0);
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTRENABLE, 0).unwrap();
    let thread = Target::Thread(60);
    b.advance(0, thread, HostEvent::Cycles, 3 * 4096);
    let opened = b.opened().len();
    ioctl(&d, f, &c, n::PCNTSETMUX, branches).unwrap();
    assert_eq!(b.opened().len(), opened + 2, "new events for branches");
    // Cycles while counting branches are not the cycles counter's.
    b.advance(0, thread, HostEvent::Cycles, 50 * 4096);
    b.advance(1, thread, HostEvent::BranchInstructions, 4 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 3 + 4);
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles).unwrap();
    assert_eq!(b.opened().len(), opened + 2, "the cycles events again");
    b.advance(0, thread, HostEvent::Cycles, 2 * 4096);
    b.advance(1, thread, HostEvent::BranchInstructions, 60 * 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 3 + 4 + 2);
    ioctl(&d, f, &c, n::PCNTSETMUX, branches).unwrap();
    assert_eq!(b.opened().len(), opened + 2, "and the branches events");
    b.advance(1, thread, HostEvent::BranchInstructions, 4096);
    assert_eq!(getcnt(&d, f, &c)[0].pf_cntr0, 3 + 4 + 2 + 1);
    let reopened = |d: &Device| {
        let out = ioctl(d, f, &c, n::PCNTGETINFO, 0).unwrap().out;
        PfmInfo::read_from_bytes(&out).unwrap().pi_reopened
    };
    assert_eq!(reopened(&d), 1, "the branches events opened on thread 60");
    // A further PME thread drops what is kept: it lacks that thread.
    ioctl(&d, f, &root(61), n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, cycles).unwrap();
    let new: Vec<Target> = b.opened()[opened + 4..].iter().map(|g| g.target).collect();
    assert_eq!(new.len(), 4, "cycles opened again on both threads: {new:?}");
    assert!(new.contains(&thread) && new.contains(&Target::Thread(61)));
    assert_eq!(reopened(&d), 2);
}

/// What is kept holds budget: a change the budget would refuse lets it go
/// first, and goes on.
#[test]
fn kept_host_events_give_way_to_the_budget() {
    let b = MockBackend::with_events(&HostEvent::NAMED);
    // Four descriptors for this user: one setting's two groups of one
    // event, and room for one more setting only if the kept one goes.
    let limits =
        crate::device::budget::Limits::new((1 << 20, 1 << 20), (4, 4), (1 << 30, 1 << 30), 8);
    let d = crate::device::test_fixtures::device_with_limits(Implementation::Ev4, &b, 2, limits);
    let c = root(70);
    let f = d.open(&c, PCNTOPENALL).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &c, n::PCNTLOGSELECT, 0).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0x8, 0, 1, 0, 2).0).unwrap();
    ioctl(&d, f, &c, n::PCNTSETMUX, Iccsr::new(0x4, 0, 1, 0, 2).0)
        .expect("the kept settings make room");
}
