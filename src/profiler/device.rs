//! The ioctl edge: `/dev/pfcntr` as a legacy client sees it.

use super::ProfError;
use super::args::OpenMode;
use crate::ioctl::abi::{self, AddrRangeT, Iccsr, PfCntrs, PfIpls, PfmInfo};
use crate::ioctl::numbers as n;
use nix::errno::Errno;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub struct PfmDevice {
    file: File,
}

impl PfmDevice {
    /// Opens the device read-only in `mode`, close-on-exec.
    pub fn open(path: &Path, mode: OpenMode) -> Result<PfmDevice, ProfError> {
        let flags = match mode {
            OpenMode::All => abi::PCNTOPENALL,
            OpenMode::Each => abi::PCNTOPENEACH,
            OpenMode::One => abi::PCNTOPENONE,
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags | libc::O_CLOEXEC)
            .open(path)
            .map_err(ProfError::io(format!("open {}", path.display())))?;
        Ok(PfmDevice { file })
    }

    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn ioctl(&self, what: &'static str, cmd: u32, arg: *mut libc::c_void) -> Result<(), ProfError> {
        // SAFETY: every caller passes null for argument-less commands or a
        // pointer to live memory of the size the command declares (or, for
        // the pointer-typed commands, a pointer to a pointer to an array of
        // the length the device writes).
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), cmd as libc::c_ulong, arg) };
        if r < 0 {
            Err(ProfError::Ioctl {
                what,
                errno: Errno::last(),
            })
        } else {
            Ok(())
        }
    }

    fn ioctl_long(&self, what: &'static str, cmd: u32, mut value: u64) -> Result<(), ProfError> {
        self.ioctl(what, cmd, (&raw mut value).cast())
    }

    pub fn info(&self) -> Result<PfmInfo, ProfError> {
        let mut info = PfmInfo::default();
        self.ioctl("PCNTGETINFO", n::PCNTGETINFO, (&raw mut info).cast())?;
        Ok(info)
    }

    pub fn set_items(&self, items: u64) -> Result<(), ProfError> {
        self.ioctl_long("PCNTSETITEMS", n::PCNTSETITEMS, items)
    }

    pub fn set_mux(&self, iccsr: Iccsr) -> Result<(), ProfError> {
        let mut iccsr = iccsr;
        self.ioctl("PCNTSETMUX", n::PCNTSETMUX, (&raw mut iccsr).cast())
    }

    pub fn log_all(&self) -> Result<(), ProfError> {
        self.ioctl("PCNTLOGALL", n::PCNTLOGALL, std::ptr::null_mut())
    }

    /// PCNTLOGSELECT: the calling thread (and what it creates afterwards)
    /// gets the PME bit.
    pub fn log_select(&self) -> Result<(), ProfError> {
        self.ioctl("PCNTLOGSELECT", n::PCNTLOGSELECT, std::ptr::null_mut())
    }

    pub fn clear(&self) -> Result<(), ProfError> {
        self.ioctl("PCNTCLEARCNT", n::PCNTCLEARCNT, std::ptr::null_mut())
    }

    pub fn enable(&self) -> Result<(), ProfError> {
        self.ioctl("PCNTRENABLE", n::PCNTRENABLE, std::ptr::null_mut())
    }

    pub fn disable(&self) -> Result<(), ProfError> {
        self.ioctl("PCNTRDISABLE", n::PCNTRDISABLE, std::ptr::null_mut())
    }

    /// PCNTSETURANGE or PCNTSETKRANGE.
    pub fn set_range(
        &self,
        kernel: bool,
        start: u64,
        end: u64,
        stride: u64,
    ) -> Result<(), ProfError> {
        let mut range = AddrRangeT {
            start,
            end,
            stride,
            res0: 0,
        };
        let (what, cmd) = if kernel {
            ("PCNTSETKRANGE", n::PCNTSETKRANGE)
        } else {
            ("PCNTSETURANGE", n::PCNTSETURANGE)
        };
        self.ioctl(what, cmd, (&raw mut range).cast())
    }

    /// PCNTGETCNT into `n` elements (1, or ncpus in EACH).
    pub fn counts(&self, n: usize) -> Result<Vec<PfCntrs>, ProfError> {
        let mut out = vec![PfCntrs::default(); n.max(1)];
        let mut p = out.as_mut_ptr();
        self.ioctl("PCNTGETCNT", n::PCNTGETCNT, (&raw mut p).cast())?;
        Ok(out)
    }

    /// PCNTGETIPLHIS into `n` elements.
    pub fn ipl(&self, n: usize) -> Result<Vec<PfIpls>, ProfError> {
        let mut out = vec![PfIpls::default(); n.max(1)];
        let mut p = out.as_mut_ptr();
        self.ioctl("PCNTGETIPLHIS", n::PCNTGETIPLHIS, (&raw mut p).cast())?;
        Ok(out)
    }

    pub fn rsize(&self) -> Result<u64, ProfError> {
        let mut size: u64 = 0;
        self.ioctl("PCNTGETRSIZE", n::PCNTGETRSIZE, (&raw mut size).cast())?;
        Ok(size)
    }

    /// One read(2) of the whole profile (it always starts at byte 0).
    pub fn read_buckets(&mut self, rsize: u64) -> Result<Vec<u32>, ProfError> {
        let mut bytes = vec![0u8; rsize as usize];
        let got = self
            .file
            .read(&mut bytes)
            .map_err(ProfError::io("read(2) of the profile"))?;
        if got as u64 != rsize {
            return Err(ProfError::Device(format!(
                "read(2) returned {got} bytes, PCNTGETRSIZE said {rsize}"
            )));
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}
