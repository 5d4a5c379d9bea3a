//! pfmstat's side of `/dev/pfcntr`: open, ioctl and nothing else, exactly as
//! a legacy C client does (no back door into the daemon). It encodes
//! requests with the crate's ABI types and reads the model from
//! `PCNTGETINFO`.
//!
//! Counter programming per family (contract §3, §5):
//! - EV4: `PCNTSETMUX` with the smallest periods (4096, 256) and the
//!   `iccsr_disable` bits for unused counters; started by `PCNTRENABLE`;
//!   read with `PCNTGETCNT`, whose interrupt counts times the period are the
//!   events (resolution one period per CPU).
//! - EV5: `PCNT5FREQ` with the full-width periods (65536, 65536, 16384,
//!   allowed to everyone), `PCNT5DISABLE`/`PCNT5MUX`/`PCNT5ENABLE` so that
//!   only used counters are on, started by `PCNT5RESTART`; read with
//!   `PCNT5READCNTRS` = `(interrupts << width) + raw`, the exact events.
//! - EV6/EV67: as EV5 with `PCNT6*` (one period, 2^20).

use super::Error;
use super::events::Config;
use crate::ev4;
use crate::ioctl::abi::{
    self, Iccsr, PFM_COUNTERS, PFM_INFO_USER_ONLY, PfCntrs, PfCntrsEv5, PfCntrsEv6, PfmInfo,
};
use crate::ioctl::numbers as n;
use crate::model::{Family, Implementation};
use nix::errno::Errno;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `PCNT5CTXTS` words (contract Appendix A).
pub const PF5_CTXT_SEL_PROC: u64 = 1;
pub const PF5_CTXT_NO_KERNEL: u64 = 0x100;
pub const PF5_CTXT_NO_PAL: u64 = 0x200;
/// EV5 `PCNT5FREQ`: 65536, 65536 and 16384 events per interrupt, the
/// counter widths, so `READCNTRS` is the event count.
const PF5_FULL_WIDTH_PERIODS: u64 = 0x200 | 0x80 | 0x20;

/// How faithfully the host counts a counter's event (`pi_fidelity`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fidelity {
    Exact,
    Approximate,
}

impl Fidelity {
    pub fn name(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::Approximate => "approximate",
        }
    }
}

/// One read of the counters: per configured CPU, per counter, events since
/// the counters were started.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    pub at: Instant,
    pub per_cpu: Vec<[u64; 3]>,
}

pub struct Device {
    file: File,
    pub path: PathBuf,
    pub model: Implementation,
    pub info: PfmInfo,
    /// Counters currently on (bit n = counter n), as we last left them.
    on: u64,
}

/// The ioctl edge: every call on the device goes through here.
fn ioctl_raw(fd: RawFd, cmd: u32, arg: *mut libc::c_void) -> Result<(), Errno> {
    // SAFETY: `arg` is null for `_IO` commands, or points at live memory the
    // caller owns of at least `_IOC_SIZE(cmd)` bytes; for the pointer-taking
    // commands (`*GETCNT`, `*READCNTRS`) it points at a pointer to a buffer of
    // `pi_ncpus` elements, which the daemon fills with process_vm_writev.
    let r = unsafe { libc::ioctl(fd, cmd as libc::c_ulong, arg) };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

impl Device {
    /// Opens `path` in EACH mode (per-CPU data, which `-mp` reports and the
    /// totals are summed from) and reads the model.
    pub fn open(path: &Path) -> Result<Device, Error> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(abi::PCNTOPENEACH)
            .open(path)
            .map_err(|e| Error::Open {
                path: path.to_path_buf(),
                source: e,
            })?;
        let mut device = Device {
            file,
            path: path.to_path_buf(),
            model: Implementation::Ev4,
            info: PfmInfo::default(),
            on: 0b111,
        };
        device.info = device.refresh_info()?;
        device.model = Implementation::ALL
            .into_iter()
            .find(|m| *m as u64 == device.info.pi_impl)
            .ok_or_else(|| {
                Error::Device(format!(
                    "PCNTGETINFO reports implementation {}, which pfmstat does not know",
                    device.info.pi_impl
                ))
            })?;
        Ok(device)
    }

    pub fn family(&self) -> Family {
        self.model.family()
    }

    pub fn ncpus(&self) -> usize {
        usize::try_from(self.info.pi_ncpus).unwrap_or(1).max(1)
    }

    pub fn clock_khz(&self) -> u64 {
        self.info.pi_cpu_khz
    }

    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn none(&self, cmd: u32) -> Result<(), Errno> {
        ioctl_raw(self.raw_fd(), cmd, std::ptr::null_mut())
    }

    fn long(&self, cmd: u32, mut value: u64) -> Result<(), Errno> {
        ioctl_raw(self.raw_fd(), cmd, (&mut value as *mut u64).cast())
    }

    /// A pointer-argument ioctl filling `buffer` (one element per CPU).
    fn fill<T>(&self, cmd: u32, buffer: &mut [T]) -> Result<(), Errno> {
        let mut pointer = buffer.as_mut_ptr();
        ioctl_raw(self.raw_fd(), cmd, (&mut pointer as *mut *mut T).cast())
    }

    fn call(&self, what: &'static str, result: Result<(), Errno>) -> Result<(), Error> {
        result.map_err(|errno| Error::Ioctl {
            what,
            path: self.path.clone(),
            errno,
        })
    }

    pub fn refresh_info(&self) -> Result<PfmInfo, Error> {
        let mut info = PfmInfo::default();
        self.call(
            "PCNTGETINFO",
            ioctl_raw(
                self.raw_fd(),
                n::PCNTGETINFO,
                (&mut info as *mut PfmInfo).cast(),
            ),
        )?;
        Ok(info)
    }

    /// Counting for the selected threads only, with none selected yet: the
    /// child selects itself before exec, so pfmstat's own work is never
    /// counted. EV5: `PCNT5CTXTS(SEL_PROC | modes)`; EV4/EV6 cannot choose
    /// modes: `PCNTLOGSELECT` then `PCNTCLEARPCBPME` (scope LOGSELECT, no
    /// thread marked). Also selects PFM_COUNTERS and, on EV5, the
    /// full-width periods.
    pub fn prepare(&mut self, exception: bool, kernel: bool) -> Result<(), Error> {
        self.call("PCNTSETITEMS", self.long(n::PCNTSETITEMS, PFM_COUNTERS))?;
        match self.family() {
            Family::Ev5 => {
                let mut word = PF5_CTXT_SEL_PROC;
                if !exception {
                    word |= PF5_CTXT_NO_PAL;
                }
                if !kernel {
                    word |= PF5_CTXT_NO_KERNEL;
                }
                self.call("PCNT5CTXTS", self.long(n::PCNT5CTXTS, word))?;
                self.call("PCNT5FREQ", self.long(n::PCNT5FREQ, PF5_FULL_WIDTH_PERIODS))?;
            }
            Family::Ev4 | Family::Ev6 => {
                self.call("PCNTLOGSELECT", self.none(n::PCNTLOGSELECT))?;
                self.call("PCNTCLEARPCBPME", self.none(n::PCNTCLEARPCBPME))?;
            }
        }
        self.info = self.refresh_info()?;
        Ok(())
    }

    /// True when the device counts user mode only for us (no kernel-mode
    /// privilege, contract §8).
    pub fn user_only(&self) -> bool {
        self.info.pi_flags & PFM_INFO_USER_ONLY != 0
    }

    /// Programs `config`: its events on their counters, every other counter
    /// off. `EOPNOTSUPP` when the host cannot count one of them. Counters
    /// that go off are turned off before the new mux word, counters that
    /// come on after it, so the word never makes the device resolve an
    /// event on a counter we do not use.
    pub fn program(&mut self, config: &Config) -> Result<(), Errno> {
        let mask = config.mask();
        let code = |c: usize| config.counters[c].map_or(0, |e| e.code);
        match self.family() {
            Family::Ev4 => {
                let mux0 = config.counters[0].map_or(0xa, |e| e.code);
                let disable = (!mask) & 3;
                if disable == 3 {
                    return Err(Errno::EINVAL);
                }
                let iccsr = Iccsr::new(
                    mux0,
                    code(1),
                    ev4::PF_C0_INT_EVERY_4096,
                    ev4::PF_C1_INT_EVERY_256,
                    disable,
                );
                self.long(n::PCNTSETMUX, iccsr.0)?;
            }
            family => {
                let (disable, mux, enable, all) = if family == Family::Ev5 {
                    (n::PCNT5DISABLE, n::PCNT5MUX, n::PCNT5ENABLE, 0b111)
                } else {
                    (n::PCNT6DISABLE, n::PCNT6MUX, n::PCNT6ENABLE, 0b11)
                };
                let word = match config.pair {
                    Some(pair) => pair,
                    None => code(0) | code(1) | code(2),
                };
                let going_off = self.on & !mask & all;
                if going_off != 0 {
                    self.long(disable, going_off)?;
                    self.on &= !going_off;
                }
                self.long(mux, word)?;
                let coming_on = mask & !self.on;
                if coming_on != 0 {
                    self.long(enable, coming_on)?;
                    self.on |= coming_on;
                }
            }
        }
        Ok(())
    }

    /// The fidelity the device reports for each counter of the current
    /// selection (`None`: off or unavailable).
    pub fn fidelity(&self) -> Result<[Option<Fidelity>; 3], Error> {
        let info = self.refresh_info()?;
        Ok(info.pi_fidelity.map(|f| match f {
            1 => Some(Fidelity::Exact),
            2 => Some(Fidelity::Approximate),
            _ => None,
        }))
    }

    /// Zeroes the counts and starts counting the programmed counters.
    pub fn start(&mut self, mask: u64) -> Result<(), Error> {
        self.call("PCNTCLEARCNT", self.none(n::PCNTCLEARCNT))?;
        match self.family() {
            Family::Ev4 => self.call("PCNTRENABLE", self.none(n::PCNTRENABLE)),
            Family::Ev5 => {
                self.call("PCNT5RESTART", self.long(n::PCNT5RESTART, mask))?;
                self.on |= mask;
                Ok(())
            }
            Family::Ev6 => {
                self.call("PCNT6RESTART", self.long(n::PCNT6RESTART, mask))?;
                self.on |= mask;
                Ok(())
            }
        }
    }

    pub fn stop(&self) -> Result<(), Error> {
        self.call("PCNTRDISABLE", self.none(n::PCNTRDISABLE))
    }

    /// Events per counter increment: EV4 counts interrupts (one per period
    /// events); EV5/EV6 `READCNTRS` counts events.
    pub fn resolution(&self) -> [u64; 3] {
        match self.family() {
            Family::Ev4 => [4096, 256, 0],
            Family::Ev5 => [1, 1, 1],
            Family::Ev6 => [1, 1, 0],
        }
    }

    /// Reads every CPU's counters.
    pub fn read(&self) -> Result<Reading, Error> {
        let cpus = self.ncpus();
        let per_cpu = match self.family() {
            Family::Ev4 => {
                let mut buf = vec![PfCntrs::default(); cpus];
                self.call("PCNTGETCNT", self.fill(n::PCNTGETCNT, &mut buf))?;
                let [p0, p1, _] = self.resolution();
                buf.iter()
                    .map(|c| [c.pf_cntr0 * p0, c.pf_cntr1 * p1, 0])
                    .collect()
            }
            Family::Ev5 => {
                let mut buf = vec![PfCntrsEv5::default(); cpus];
                self.call("PCNT5READCNTRS", self.fill(n::PCNT5READCNTRS, &mut buf))?;
                buf.iter()
                    .map(|c| [c.pf_cntr0, c.pf_cntr1, c.pf_cntr2])
                    .collect()
            }
            Family::Ev6 => {
                let mut buf = vec![PfCntrsEv6::default(); cpus];
                self.call("PCNT6READCNTRS", self.fill(n::PCNT6READCNTRS, &mut buf))?;
                buf.iter().map(|c| [c.pf_cntr0, c.pf_cntr1, 0]).collect()
            }
        };
        Ok(Reading {
            at: Instant::now(),
            per_cpu,
        })
    }
}
