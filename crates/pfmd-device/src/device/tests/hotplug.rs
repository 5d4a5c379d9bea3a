//! CPUs going offline and online under the device (docs/device.md §2): no
//! open reads 0 for work done, a CPU offline at start is counted once it
//! comes online, and a ONE open whose CPU is gone says so.

use crate::backend::Target;
use crate::backend::mock::MockBackend;
use crate::device::test_fixtures::{caller, device_with_cpus, ioctl, root};
use crate::device::{Device, FileId};
use crate::policy::Caller;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{self as abi, Iccsr, PCNTOPENALL, PCNTOPENEACH, PCNTOPENONE, PfCntrs, PfmInfo};
use pfm_model::{HostEvent, Implementation};
use zerocopy::FromBytes;

const PERIOD: u64 = 4096;

/// Four configured CPUs, `online` of them online (the mock agrees).
fn four_cpus(online: &[u32]) -> (MockBackend, Device) {
    let b = MockBackend::with_events(&[HostEvent::CpuClock]);
    for cpu in 0..4 {
        b.set_online(cpu, online.contains(&cpu));
    }
    let d = device_with_cpus(Implementation::Ev4, &b, 0, 4, online.to_vec());
    (b, d)
}

/// The host takes `cpu` offline or brings it back, and tells the device.
fn set_online(b: &MockBackend, d: &Device, cpu: u32, online: bool) {
    b.set_online(cpu, online);
    let mut cpus = d.online_cpus();
    cpus.retain(|&c| c != cpu);
    if online {
        cpus.push(cpu);
    }
    d.cpus_changed(cpus);
}

fn work(b: &MockBackend, cpu: u32, interrupts: u64) {
    b.advance(
        cpu,
        Target::AllTasks,
        HostEvent::CpuClock,
        interrupts * PERIOD,
    );
}

fn getcnt(d: &Device, f: FileId, c: &Caller) -> Result<Vec<u64>, Errno> {
    let reply = ioctl(d, f, c, n::PCNTGETCNT, 0x1000)?;
    let store = reply.store.expect("GETCNT stores at the caller's pointer");
    Ok(<[PfCntrs]>::ref_from_bytes(&store.bytes)
        .unwrap()
        .iter()
        .map(|p| p.pf_cntr0)
        .collect())
}

/// An enabled open in `mode` counting cycles every [`PERIOD`].
fn counting(d: &Device, c: &Caller, mode: i32) -> FileId {
    let f = d.open(c, mode).unwrap();
    ioctl(d, f, c, n::PCNTSETITEMS, abi::PFM_COUNTERS).unwrap();
    ioctl(d, f, c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    ioctl(d, f, c, n::PCNTCLEARCNT, 0).unwrap();
    ioctl(d, f, c, n::PCNTRENABLE, 0).unwrap();
    f
}

#[test]
fn a_cpu_offline_at_start_joins_each_and_all_opens_when_it_comes_online() {
    let (b, d) = four_cpus(&[0, 1, 2]);
    let c = root(10);
    let each = counting(&d, &c, PCNTOPENEACH);
    work(&b, 0, 1);
    set_online(&b, &d, 3, true);
    work(&b, 3, 5);
    assert_eq!(getcnt(&d, each, &c), Ok(vec![1, 0, 0, 5]));
    d.release(each);

    let all = counting(&d, &c, PCNTOPENALL);
    work(&b, 2, 2);
    work(&b, 3, 3);
    assert_eq!(getcnt(&d, all, &c), Ok(vec![5]), "CPU 3 counts in ALL too");
}

#[test]
fn an_open_made_while_a_cpu_is_offline_counts_the_others_then_that_one() {
    let (b, d) = four_cpus(&[0, 1, 2, 3]);
    let c = root(10);
    set_online(&b, &d, 3, false);
    // The kernel has no CPU-wide event on an offline CPU: opening one
    // there is ENODEV, which must not cost the open its other CPUs.
    let all = counting(&d, &c, PCNTOPENALL);
    work(&b, 0, 4);
    assert_eq!(getcnt(&d, all, &c), Ok(vec![4]));
    set_online(&b, &d, 3, true);
    work(&b, 3, 2);
    assert_eq!(getcnt(&d, all, &c), Ok(vec![6]));
    assert!(b.opened().iter().any(|g| g.cpu == 3));
}

#[test]
fn a_cpu_going_offline_keeps_its_counts_and_counts_again_when_back() {
    let (b, d) = four_cpus(&[0, 1, 2, 3]);
    let c = root(10);
    let each = counting(&d, &c, PCNTOPENEACH);
    work(&b, 1, 3);
    set_online(&b, &d, 1, false);
    assert_eq!(getcnt(&d, each, &c), Ok(vec![0, 3, 0, 0]), "kept");
    // A settings change while it is offline opens events on the others.
    ioctl(&d, each, &c, n::PCNTSETMUX, Iccsr::new(0xa, 0, 1, 0, 2).0).unwrap();
    work(&b, 0, 1);
    set_online(&b, &d, 1, true);
    work(&b, 1, 2);
    assert_eq!(getcnt(&d, each, &c), Ok(vec![1, 5, 0, 0]));
}

#[test]
fn a_one_open_whose_cpu_is_offline_answers_enxio_until_it_is_back() {
    let (b, d) = four_cpus(&[0, 1, 2, 3]);
    let c = caller(10, 1000, vec![1]);
    let one = counting(&d, &c, PCNTOPENONE);
    work(&b, 1, 2);
    set_online(&b, &d, 1, false);
    assert_eq!(getcnt(&d, one, &c), Err(Errno::ENXIO));
    assert_eq!(
        ioctl(&d, one, &c, n::PCNTRENABLE, 0).unwrap_err(),
        Errno::ENXIO
    );
    // What does not count or read still answers.
    ioctl(&d, one, &c, n::PCNTGETINFO, 0).unwrap();
    ioctl(&d, one, &c, n::PCNTRDISABLE, 0).unwrap();
    set_online(&b, &d, 1, true);
    assert_eq!(getcnt(&d, one, &c), Ok(vec![2]), "the counts were kept");
    ioctl(&d, one, &c, n::PCNTRENABLE, 0).unwrap();
    work(&b, 1, 1);
    assert_eq!(getcnt(&d, one, &c), Ok(vec![3]));
    // A new ONE open of an offline CPU is refused.
    d.release(one);
    set_online(&b, &d, 2, false);
    assert_eq!(
        d.open(&caller(11, 1000, vec![2]), PCNTOPENONE)
            .unwrap_err()
            .errno(),
        Errno::EINVAL
    );
}

#[test]
fn info_reports_the_cpus_online_now() {
    let (b, d) = four_cpus(&[0, 1, 2]);
    let c = root(10);
    let f = d.open(&c, PCNTOPENEACH).unwrap();
    let info = |d: &Device| {
        PfmInfo::read_from_bytes(&ioctl(d, f, &c, n::PCNTGETINFO, 0).unwrap().out).unwrap()
    };
    assert_eq!((info(&d).pi_ncpus, info(&d).pi_online), (4, 3));
    set_online(&b, &d, 3, true);
    assert_eq!(info(&d).pi_online, 4);
}
