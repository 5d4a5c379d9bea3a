//! pfmstat's counting on `/dev/pfcntr`, on top of [`pfm_client::Device`]
//! (open and ioctls only, exactly as a legacy C client; no back door into
//! the daemon): how it programs the counters of each family, reads them and
//! asks how faithfully the host counts them. The model comes from
//! `PCNTGETINFO`.
//!
//! Counter programming per family (docs/device.md §3, §5):
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
use pfm_abi::{Iccsr, PFM_INFO_USER_ONLY, PfmInfo};
use pfm_client::{CounterMask, Device, Family, Implementation, Items, OpenMode};
use pfm_model::{Model, ev4};
use std::path::Path;
use std::time::Instant;

/// `PCNT5CTXTS` words (docs/device.md, Appendix A).
pub const PF5_CTXT_ALL_PROC: u64 = 0;
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

/// The device opened in EACH mode, with the counters pfmstat turned on.
pub struct CountingDevice {
    device: Device,
    /// `PCNTGETINFO` as of the last [`CountingDevice::prepare`].
    info: PfmInfo,
    /// Counters currently on, as we last left them.
    on: CounterMask,
}

impl CountingDevice {
    /// Opens `path` in EACH mode (per-CPU data, which `-mp` reports and the
    /// totals are summed from) and reads the model.
    pub fn open(path: &Path) -> Result<CountingDevice, Error> {
        let device = Device::open(path, OpenMode::Each)?;
        let info = device.info()?;
        let on = CounterMask::all_of(device.family());
        Ok(CountingDevice { device, info, on })
    }

    /// The open device, for starting the command counted on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn path(&self) -> &Path {
        self.device.path()
    }

    pub fn model(&self) -> Implementation {
        self.device.implementation()
    }

    pub fn family(&self) -> Family {
        self.device.family()
    }

    pub fn ncpus(&self) -> usize {
        self.device.cpus()
    }

    pub fn clock_khz(&self) -> u64 {
        self.device.clock_khz()
    }

    /// Counting for the selected threads only, with none selected yet: the
    /// child selects itself before exec, so pfmstat's own work is never
    /// counted. EV5: `PCNT5CTXTS(SEL_PROC | modes)`; EV4/EV6 cannot choose
    /// modes: `PCNTLOGSELECT` then `PCNTCLEARPCBPME` (scope LOGSELECT, no
    /// thread marked). `system_wide` (`--pid`): every thread instead, EV5
    /// `PCNT5CTXTS(ALL_PROC | modes)`, EV4/EV6 `PCNTLOGALL`. Also selects
    /// PFM_COUNTERS and, on EV5, the full-width periods.
    pub fn prepare(
        &mut self,
        system_wide: bool,
        exception: bool,
        kernel: bool,
    ) -> Result<(), pfm_client::Error> {
        self.device.set_items(Items::COUNTERS)?;
        match self.family() {
            Family::Ev5 => {
                let mut word = if system_wide {
                    PF5_CTXT_ALL_PROC
                } else {
                    PF5_CTXT_SEL_PROC
                };
                if !exception {
                    word |= PF5_CTXT_NO_PAL;
                }
                if !kernel {
                    word |= PF5_CTXT_NO_KERNEL;
                }
                self.device.ev5_contexts(word)?;
                self.device.ev5_freq(PF5_FULL_WIDTH_PERIODS)?;
            }
            Family::Ev4 | Family::Ev6 if system_wide => self.device.log_all()?,
            Family::Ev4 | Family::Ev6 => {
                self.device.log_select()?;
                self.device.clear_pme()?;
            }
        }
        self.info = self.device.info()?;
        Ok(())
    }

    /// True when the device counts user mode only for us (no kernel-mode
    /// privilege, docs/device.md §8).
    pub fn user_only(&self) -> bool {
        self.info.pi_flags & PFM_INFO_USER_ONLY != 0
    }

    /// Programs `config`: its events on their counters, every other counter
    /// off. `EOPNOTSUPP` when the host cannot count one of them. Counters
    /// that go off are turned off before the new mux word, counters that
    /// come on after it, so the word never makes the device resolve an
    /// event on a counter we do not use.
    pub fn program(&mut self, config: &Config) -> Result<(), pfm_client::Error> {
        let family = self.family();
        let mask = CounterMask::from_word(family, config.mask());
        let code = |c: usize| config.counters[c].map_or(0, |e| e.code);
        match family {
            Family::Ev4 => {
                let mux0 = config.counters[0].map_or(0xa, |e| e.code);
                // Both counters off (an empty configuration) is EINVAL at
                // the device.
                let disable = !mask.bits() & 3;
                self.device.set_mux(Iccsr::new(
                    mux0,
                    code(1),
                    ev4::PF_C0_INT_EVERY_4096,
                    ev4::PF_C1_INT_EVERY_256,
                    disable,
                ))
            }
            Family::Ev5 | Family::Ev6 => {
                let word = config.pair.unwrap_or_else(|| code(0) | code(1) | code(2));
                let going_off = self.on - mask;
                if !going_off.is_empty() {
                    self.device.disable_counters(going_off)?;
                    self.on -= going_off;
                }
                if family == Family::Ev5 {
                    self.device.ev5_mux(word)?;
                } else {
                    self.device.ev6_mux(word)?;
                }
                let coming_on = mask - self.on;
                if !coming_on.is_empty() {
                    self.device.enable_counters(coming_on)?;
                    self.on |= coming_on;
                }
                Ok(())
            }
        }
    }

    /// The fidelity the device reports for each counter of the current
    /// selection (`None`: off or unavailable).
    pub fn fidelity(&self) -> Result<[Option<Fidelity>; 3], Error> {
        let info = self.device.info()?;
        Ok(info.pi_fidelity.map(|f| match f {
            1 => Some(Fidelity::Exact),
            2 => Some(Fidelity::Approximate),
            _ => None,
        }))
    }

    /// Zeroes the counts and starts counting `config`'s counters (the
    /// programmed ones).
    pub fn start(&mut self, config: &Config) -> Result<(), pfm_client::Error> {
        self.device.clear_counts()?;
        match self.family() {
            Family::Ev4 => self.device.enable()?,
            family @ (Family::Ev5 | Family::Ev6) => {
                let mask = CounterMask::from_word(family, config.mask());
                self.device.restart_counters(mask)?;
                self.on |= mask;
            }
        }
        Ok(())
    }

    pub fn stop(&self) -> Result<(), Error> {
        Ok(self.device.disable()?)
    }

    /// Events per counter increment (0 past the model's counters): EV4
    /// counts interrupts, one per period events, and [`Self::program`]
    /// chooses the shortest periods; EV5/EV6 `READCNTRS` counts events.
    pub fn resolution(&self) -> [u64; 3] {
        let model = Model::of(self.model());
        match self.family() {
            Family::Ev4 => model.shortest_periods(),
            Family::Ev5 | Family::Ev6 => std::array::from_fn(|c| u64::from(c < model.counters())),
        }
    }

    /// Reads every CPU's counters.
    pub fn read(&self) -> Result<Reading, Error> {
        let per_cpu = match self.family() {
            Family::Ev4 => {
                let [p0, p1, _] = self.resolution();
                self.device
                    .interrupt_counts()?
                    .iter()
                    .map(|c| [c.counters[0] * p0, c.counters[1] * p1, 0])
                    .collect()
            }
            Family::Ev5 | Family::Ev6 => self
                .device
                .full_counts()?
                .iter()
                .map(|c| c.counters)
                .collect(),
        };
        Ok(Reading {
            at: Instant::now(),
            per_cpu,
        })
    }
}
