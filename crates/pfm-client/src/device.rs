//! An open of the device and every ioctl as a typed call.

use crate::error::{Error, daemon_gone};
use crate::ioctl;
use nix::errno::Errno;
use pfm_abi::numbers as n;
use pfm_abi::{
    AddrRange, AddrRangeT, CounterMask, Family, Iccsr, Implementation, Items, OpenMode, PfCntrs,
    PfCntrsEv5, PfCntrsEv6, PfIpls, PfmInfo, RawCounters,
};
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The device a client should open: `explicit` (a `--device` option), else
/// `$PFM_DEVICE` (unless empty, as the C clients read it), else
/// `/dev/pfcntr`.
pub fn device_path(explicit: Option<&Path>) -> PathBuf {
    choose_device(explicit, std::env::var_os("PFM_DEVICE"))
}

fn choose_device(explicit: Option<&Path>, environment: Option<OsString>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| environment.filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/dev/pfcntr"))
}

/// One CPU's counts (or, in ONE and ALL modes, the open's), whatever the
/// family's structure: `pr_cycle` and up to three counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuCounts {
    pub pr_cycle: u64,
    pub counters: [u64; 3],
}

/// An open of the device.
#[derive(Debug)]
pub struct Device {
    file: File,
    path: PathBuf,
    mode: OpenMode,
    /// `PCNTGETINFO` at open: the model and the CPU count never change
    /// while the device is open.
    info: PfmInfo,
    implementation: Implementation,
}

impl AsFd for Device {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl Device {
    /// Opens `path` read-only in `mode`, close-on-exec, and asks the device
    /// what it emulates.
    pub fn open(path: impl AsRef<Path>, mode: OpenMode) -> Result<Device, Error> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(mode.open_flags() | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| Error::Open {
                path: path.to_path_buf(),
                source,
            })?;
        let info: PfmInfo =
            ioctl::read(file.as_fd(), n::PCNTGETINFO).map_err(|errno| Error::Ioctl {
                op: "PCNTGETINFO",
                errno,
                hint: if daemon_gone(errno) {
                    " (is pfmd running? systemctl start pfmd)".into()
                } else {
                    format!(" ({} is not a pfm device served by pfmd?)", path.display())
                },
            })?;
        let implementation = Implementation::ALL
            .into_iter()
            .find(|m| *m as u64 == info.pi_impl)
            .ok_or_else(|| {
                Error::Protocol(format!(
                    "{}: the device emulates implementation {}, which this client does not know",
                    path.display(),
                    info.pi_impl
                ))
            })?;
        Ok(Device {
            file,
            path: path.to_path_buf(),
            mode,
            info,
            implementation,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    /// The emulated Alpha implementation.
    pub fn implementation(&self) -> Implementation {
        self.implementation
    }

    pub fn family(&self) -> Family {
        self.implementation.family()
    }

    /// Configured CPUs: the length of an EACH-mode array.
    pub fn cpus(&self) -> usize {
        usize::try_from(self.info.pi_ncpus).unwrap_or(1).max(1)
    }

    /// Elements of a counts or IPL reply in this open's mode.
    pub fn elements(&self) -> usize {
        self.mode.elements(self.cpus())
    }

    /// Nominal CPU clock of the daemon, kHz.
    pub fn clock_khz(&self) -> u64 {
        self.info.pi_cpu_khz
    }

    /// `PCNTGETINFO`, now: the open's items, flags, fidelity per counter,
    /// periods and sampling losses.
    pub fn info(&self) -> Result<PfmInfo, Error> {
        ioctl::read(self.as_fd(), n::PCNTGETINFO).map_err(|e| self.refused(n::PCNTGETINFO, e))
    }

    /// The error for a refused `cmd`, with what explains it: a device that
    /// is gone, or one emulating another family than the call is for.
    fn refused(&self, cmd: u32, errno: Errno) -> Error {
        let op = n::name(cmd).unwrap_or("ioctl");
        let other_family = pfm_abi::family_of(cmd).is_some_and(|f| f != self.family());
        let hint = if daemon_gone(errno) {
            " (is pfmd running? systemctl start pfmd)".to_string()
        } else if errno == Errno::EINVAL && other_family {
            format!(
                " (the daemon emulates {} ({}), which has no {op}; start pfmd with another --model)",
                self.implementation,
                self.implementation.chip()
            )
        } else {
            String::new()
        };
        Error::Ioctl { op, errno, hint }
    }

    fn none(&self, cmd: u32) -> Result<(), Error> {
        ioctl::none(self.as_fd(), cmd).map_err(|e| self.refused(cmd, e))
    }

    fn long(&self, cmd: u32, mut word: u64) -> Result<(), Error> {
        ioctl::value(self.as_fd(), cmd, &mut word).map_err(|e| self.refused(cmd, e))
    }

    /// The family's ioctl (EV5 or EV6); `EINVAL` locally where the family
    /// has none, as the device would answer.
    fn per_family(&self, ev5: u32, ev6: Option<u32>) -> Result<u32, Error> {
        match self.family() {
            Family::Ev5 => Ok(ev5),
            Family::Ev6 => ev6.ok_or_else(|| self.refused(ev5, Errno::EINVAL)),
            Family::Ev4 => Err(self.refused(ev5, Errno::EINVAL)),
        }
    }

    /// `PCNTRENABLE`: start counting.
    pub fn enable(&self) -> Result<(), Error> {
        self.none(n::PCNTRENABLE)
    }

    /// `PCNTRDISABLE`: stop counting.
    pub fn disable(&self) -> Result<(), Error> {
        self.none(n::PCNTRDISABLE)
    }

    /// `PCNTLOGALL`: count everything on the open's CPUs (needs privilege).
    pub fn log_all(&self) -> Result<(), Error> {
        self.none(n::PCNTLOGALL)
    }

    /// `PCNTLOGSELECT`: count only threads with the PME bit, and give it to
    /// the calling thread (and what it creates from now on).
    pub fn log_select(&self) -> Result<(), Error> {
        self.none(n::PCNTLOGSELECT)
    }

    /// `PCNTCLEARPCBPME`: take the PME bit from the calling thread.
    pub fn clear_pme(&self) -> Result<(), Error> {
        self.none(n::PCNTCLEARPCBPME)
    }

    /// `PCNTCLEARCNT`: zero the counts (and IPL histograms) of the items.
    pub fn clear_counts(&self) -> Result<(), Error> {
        self.none(n::PCNTCLEARCNT)
    }

    /// `PCNTCALLER`: charge kernel samples in caller ranges to their caller.
    pub fn caller_mode(&self) -> Result<(), Error> {
        self.none(n::PCNTCALLER)
    }

    /// `PCNTSETITEMS`.
    pub fn set_items(&self, items: Items) -> Result<(), Error> {
        self.long(n::PCNTSETITEMS, items.bits())
    }

    /// `PCNTSETITEMS` with an EV67 profile-me statistic (`PF67_PM_*`).
    pub fn set_items_with_statistic(&self, items: Items, statistic: u8) -> Result<(), Error> {
        let word = items.bits() | u64::from(statistic) << pfm_abi::PFM_PROFME_MODE_SHIFT;
        self.long(n::PCNTSETITEMS, word)
    }

    /// EV4 `PCNTSETMUX`.
    pub fn set_mux(&self, iccsr: Iccsr) -> Result<(), Error> {
        let mut iccsr = iccsr;
        ioctl::value(self.as_fd(), n::PCNTSETMUX, &mut iccsr)
            .map_err(|e| self.refused(n::PCNTSETMUX, e))
    }

    /// EV5 `PCNT5MUX`.
    pub fn ev5_mux(&self, word: u64) -> Result<(), Error> {
        self.long(n::PCNT5MUX, word)
    }

    /// EV5 `PCNT5FREQ`.
    pub fn ev5_freq(&self, word: u64) -> Result<(), Error> {
        self.long(n::PCNT5FREQ, word)
    }

    /// EV5 `PCNT5CTXTS`.
    pub fn ev5_contexts(&self, word: u64) -> Result<(), Error> {
        self.long(n::PCNT5CTXTS, word)
    }

    /// EV6/EV67 `PCNT6MUX`.
    pub fn ev6_mux(&self, word: u64) -> Result<(), Error> {
        self.long(n::PCNT6MUX, word)
    }

    /// `PCNT5DISABLE` / `PCNT6DISABLE`.
    pub fn disable_counters(&self, mask: CounterMask) -> Result<(), Error> {
        let cmd = self.per_family(n::PCNT5DISABLE, Some(n::PCNT6DISABLE))?;
        self.long(cmd, mask.bits())
    }

    /// `PCNT5ENABLE` / `PCNT6ENABLE`.
    pub fn enable_counters(&self, mask: CounterMask) -> Result<(), Error> {
        let cmd = self.per_family(n::PCNT5ENABLE, Some(n::PCNT6ENABLE))?;
        self.long(cmd, mask.bits())
    }

    /// `PCNT5CLEAR` / `PCNT6CLEAR`.
    pub fn clear_counters(&self, mask: CounterMask) -> Result<(), Error> {
        let cmd = self.per_family(n::PCNT5CLEAR, Some(n::PCNT6CLEAR))?;
        self.long(cmd, mask.bits())
    }

    /// `PCNT5RESTART` / `PCNT6RESTART`: zero, enable and start.
    pub fn restart_counters(&self, mask: CounterMask) -> Result<(), Error> {
        let cmd = self.per_family(n::PCNT5RESTART, Some(n::PCNT6RESTART))?;
        self.long(cmd, mask.bits())
    }

    /// `PCNT5SETCNTRS` / `PCNT6SETCNTRS`: preload raw counters.
    pub fn set_counters(&self, raw: RawCounters) -> Result<(), Error> {
        let cmd = self.per_family(n::PCNT5SETCNTRS, Some(n::PCNT6SETCNTRS))?;
        self.long(cmd, raw.pack(self.family()))
    }

    /// `PCNT6ENABWRITE`: preload, enable and start.
    pub fn enable_write_counters(&self, raw: RawCounters) -> Result<(), Error> {
        if self.family() != Family::Ev6 {
            return Err(self.refused(n::PCNT6ENABWRITE, Errno::EINVAL));
        }
        self.long(n::PCNT6ENABWRITE, raw.pack(Family::Ev6))
    }

    /// `PCNT5GETCNTRS` / `PCNT6GETCNTRS`: the raw counters of one CPU
    /// (`PMCTRS_ALL_CPUS` in a ONE open: its CPU).
    pub fn raw_counters(&self, cpu: u64) -> Result<RawCounters, Error> {
        let cmd = self.per_family(n::PCNT5GETCNTRS, Some(n::PCNT6GETCNTRS))?;
        let family = self.family();
        let request = RawCounters {
            select: CounterMask::all_of(family),
            cpu,
            values: [0; 3],
        };
        let mut word = request.pack(family);
        ioctl::value(self.as_fd(), cmd, &mut word).map_err(|e| self.refused(cmd, e))?;
        Ok(RawCounters::unpack(family, word))
    }

    /// The driver's interrupt counts (`PCNTGETCNT`, `PCNT5GETCNT`,
    /// `PCNT6GETCNT`): one element per configured CPU in EACH mode, else one.
    pub fn interrupt_counts(&self) -> Result<Vec<CpuCounts>, Error> {
        match self.family() {
            Family::Ev4 => Ok(self.ev4_counts()?.iter().map(from_ev4).collect()),
            Family::Ev5 => self.ev5_counts(n::PCNT5GETCNT),
            Family::Ev6 => self.ev6_counts(n::PCNT6GETCNT),
        }
    }

    /// Full counts, `(interrupts << width) + raw counter`
    /// (`PCNT5READCNTRS`, `PCNT6READCNTRS`); EV4 has none (`EINVAL`).
    pub fn full_counts(&self) -> Result<Vec<CpuCounts>, Error> {
        match self.family() {
            Family::Ev4 => Err(self.refused(n::PCNT5READCNTRS, Errno::EINVAL)),
            Family::Ev5 => self.ev5_counts(n::PCNT5READCNTRS),
            Family::Ev6 => self.ev6_counts(n::PCNT6READCNTRS),
        }
    }

    /// EV4 `PCNTGETCNT` as the structures it stores.
    pub fn ev4_counts(&self) -> Result<Vec<PfCntrs>, Error> {
        ioctl::fill(self.as_fd(), n::PCNTGETCNT, self.elements())
            .map_err(|e| self.refused(n::PCNTGETCNT, e))
    }

    fn ev5_counts(&self, cmd: u32) -> Result<Vec<CpuCounts>, Error> {
        let raw: Vec<PfCntrsEv5> =
            ioctl::fill(self.as_fd(), cmd, self.elements()).map_err(|e| self.refused(cmd, e))?;
        Ok(raw
            .iter()
            .map(|c| CpuCounts {
                pr_cycle: c.pr_cycle,
                counters: [c.pf_cntr0, c.pf_cntr1, c.pf_cntr2],
            })
            .collect())
    }

    fn ev6_counts(&self, cmd: u32) -> Result<Vec<CpuCounts>, Error> {
        let raw: Vec<PfCntrsEv6> =
            ioctl::fill(self.as_fd(), cmd, self.elements()).map_err(|e| self.refused(cmd, e))?;
        Ok(raw
            .iter()
            .map(|c| CpuCounts {
                pr_cycle: c.pr_cycle,
                counters: [c.pf_cntr0, c.pf_cntr1, 0],
            })
            .collect())
    }

    /// `PCNTGETIPLHIS`: the IPL histograms, one per configured CPU in EACH
    /// mode, else one.
    pub fn ipl_histograms(&self) -> Result<Vec<PfIpls>, Error> {
        ioctl::fill(self.as_fd(), n::PCNTGETIPLHIS, self.elements())
            .map_err(|e| self.refused(n::PCNTGETIPLHIS, e))
    }

    /// `PCNTSETURANGE` / `PCNTSETKRANGE` with a stride (instructions per
    /// bucket; 0 is one bucket for the whole range), or with `None`
    /// `PCNTSETUADDR` / `PCNTSETKADDR`, which keep the last stride.
    pub fn set_range(
        &self,
        kernel: bool,
        start: u64,
        end: u64,
        stride: Option<u64>,
    ) -> Result<(), Error> {
        let fd = self.as_fd();
        match (kernel, stride) {
            (false, Some(stride)) => {
                let mut r = AddrRangeT {
                    start,
                    end,
                    stride,
                    res0: 0,
                };
                ioctl::value(fd, n::PCNTSETURANGE, &mut r)
                    .map_err(|e| self.refused(n::PCNTSETURANGE, e))
            }
            (true, Some(stride)) => {
                let mut r = AddrRangeT {
                    start,
                    end,
                    stride,
                    res0: 0,
                };
                ioctl::value(fd, n::PCNTSETKRANGE, &mut r)
                    .map_err(|e| self.refused(n::PCNTSETKRANGE, e))
            }
            (false, None) => ioctl::value(fd, n::PCNTSETUADDR, &mut AddrRange { start, end })
                .map_err(|e| self.refused(n::PCNTSETUADDR, e)),
            (true, None) => ioctl::value(fd, n::PCNTSETKADDR, &mut AddrRange { start, end })
                .map_err(|e| self.refused(n::PCNTSETKADDR, e)),
        }
    }

    /// `PCNTGETRSIZE`: bytes a read of the profile returns.
    pub fn profile_size(&self) -> Result<u64, Error> {
        ioctl::read(self.as_fd(), n::PCNTGETRSIZE).map_err(|e| self.refused(n::PCNTGETRSIZE, e))
    }

    /// The profile buckets (one `read(2)`, from byte 0), CPU slots one after
    /// another in EACH mode.
    pub fn read_profile(&self) -> Result<Vec<u32>, Error> {
        let size = self.profile_size()?;
        let size = usize::try_from(size)
            .map_err(|_| Error::Protocol(format!("PCNTGETRSIZE says {size} bytes")))?;
        let mut bytes = vec![0u8; size];
        let got = (&self.file)
            .read(&mut bytes)
            .map_err(|e| Error::Read(e.to_string()))?;
        if got != size {
            return Err(Error::Read(format!(
                "{got} bytes, PCNTGETRSIZE said {size}"
            )));
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

fn from_ev4(c: &PfCntrs) -> CpuCounts {
    CpuCounts {
        pr_cycle: c.pr_cycle,
        counters: [c.pf_cntr0, c.pf_cntr1, 0],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_is_the_option_else_a_non_empty_environment_else_the_default() {
        let env = |v: &str| Some(OsString::from(v));
        assert_eq!(
            choose_device(Some(Path::new("/x")), env("/env")),
            Path::new("/x")
        );
        assert_eq!(choose_device(None, env("/env")), Path::new("/env"));
        assert_eq!(choose_device(None, env("")), Path::new("/dev/pfcntr"));
        assert_eq!(choose_device(None, None), Path::new("/dev/pfcntr"));
    }
}
