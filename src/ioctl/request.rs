use super::DeviceError;
use super::abi::{AddrRange, AddrRangeT, Iccsr, PmctrsEv5, PmctrsEv6};
use super::numbers::{self as n};
use crate::model::Family;
use zerocopy::FromBytes;

/// A decoded ioctl. Pointer arguments (`*GETCNT`, `*READCNTRS`,
/// `PCNTGETIPLHIS`) carry the caller's address: the device returns the bytes
/// to store there and the transport stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Disable,
    Enable,
    LogAll,
    LogSelect,
    ClearCnt,
    ClearPcbPme,
    Caller,
    GetRsize,
    GetIplHis { addr: u64 },
    SetItems(u64),
    SetUaddr(AddrRange),
    SetKaddr(AddrRange),
    SetUrange(AddrRangeT),
    SetKrange(AddrRangeT),
    GetInfo,
    Ev4(Ev4Request),
    Ev5(Ev5Request),
    Ev6(Ev6Request),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev4Request {
    SetMux(Iccsr),
    GetCnt { addr: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev5Request {
    Ctxts(u64),
    Mux(u64),
    Freq(u64),
    Disable(u64),
    Enable(u64),
    Clear(u64),
    Restart(u64),
    SetCntrs(PmctrsEv5),
    GetCntrs(PmctrsEv5),
    GetCnt { addr: u64 },
    ReadCntrs { addr: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ev6Request {
    Mux(u64),
    EnabWrite(PmctrsEv6),
    Disable(u64),
    Enable(u64),
    Clear(u64),
    Restart(u64),
    SetCntrs(PmctrsEv6),
    GetCntrs(PmctrsEv6),
    GetCnt { addr: u64 },
    ReadCntrs { addr: u64 },
}

impl Request {
    /// The family an ioctl belongs to; `None` for family-independent ones.
    pub fn family(&self) -> Option<Family> {
        match self {
            Self::Ev4(_) => Some(Family::Ev4),
            Self::Ev5(_) => Some(Family::Ev5),
            Self::Ev6(_) => Some(Family::Ev6),
            _ => None,
        }
    }
}

fn arg<T: FromBytes>(cmd: u32, data: &[u8]) -> Result<T, DeviceError> {
    T::read_from_prefix(data).map(|(v, _)| v).map_err(|_| {
        DeviceError::invalid(format!(
            "{}: argument of {} bytes, need {}",
            n::name(cmd).unwrap_or("ioctl"),
            data.len(),
            size_of::<T>()
        ))
    })
}

/// Decodes `cmd` with its input bytes (`_IOC_SIZE(cmd)` bytes for `_IOW`).
/// Unknown numbers are `EINVAL`, as the original driver's default case.
pub fn decode(cmd: u32, data: &[u8]) -> Result<Request, DeviceError> {
    let long = || arg::<u64>(cmd, data);
    let addr = || arg::<u64>(cmd, data);
    Ok(match cmd {
        n::PCNTRDISABLE => Request::Disable,
        n::PCNTRENABLE => Request::Enable,
        n::PCNTLOGALL => Request::LogAll,
        n::PCNTLOGSELECT => Request::LogSelect,
        n::PCNTCLEARCNT => Request::ClearCnt,
        n::PCNTCLEARPCBPME => Request::ClearPcbPme,
        n::PCNTCALLER => Request::Caller,
        n::PCNTGETRSIZE => Request::GetRsize,
        n::PCNTGETIPLHIS => Request::GetIplHis { addr: addr()? },
        n::PCNTSETITEMS => Request::SetItems(long()?),
        n::PCNTSETUADDR => Request::SetUaddr(arg(cmd, data)?),
        n::PCNTSETKADDR => Request::SetKaddr(arg(cmd, data)?),
        n::PCNTSETURANGE => Request::SetUrange(arg(cmd, data)?),
        n::PCNTSETKRANGE => Request::SetKrange(arg(cmd, data)?),
        n::PCNTGETINFO => Request::GetInfo,
        n::PCNTSETMUX => Request::Ev4(Ev4Request::SetMux(arg(cmd, data)?)),
        n::PCNTGETCNT => Request::Ev4(Ev4Request::GetCnt { addr: addr()? }),
        n::PCNT5CTXTS => Request::Ev5(Ev5Request::Ctxts(long()?)),
        n::PCNT5MUX => Request::Ev5(Ev5Request::Mux(long()?)),
        n::PCNT5FREQ => Request::Ev5(Ev5Request::Freq(long()?)),
        n::PCNT5DISABLE => Request::Ev5(Ev5Request::Disable(long()?)),
        n::PCNT5ENABLE => Request::Ev5(Ev5Request::Enable(long()?)),
        n::PCNT5CLEAR => Request::Ev5(Ev5Request::Clear(long()?)),
        n::PCNT5RESTART => Request::Ev5(Ev5Request::Restart(long()?)),
        n::PCNT5SETCNTRS => Request::Ev5(Ev5Request::SetCntrs(arg(cmd, data)?)),
        n::PCNT5GETCNTRS => Request::Ev5(Ev5Request::GetCntrs(arg(cmd, data)?)),
        n::PCNT5GETCNT => Request::Ev5(Ev5Request::GetCnt { addr: addr()? }),
        n::PCNT5READCNTRS => Request::Ev5(Ev5Request::ReadCntrs { addr: addr()? }),
        n::PCNT6MUX => Request::Ev6(Ev6Request::Mux(long()?)),
        n::PCNT6ENABWRITE => Request::Ev6(Ev6Request::EnabWrite(arg(cmd, data)?)),
        n::PCNT6DISABLE => Request::Ev6(Ev6Request::Disable(long()?)),
        n::PCNT6ENABLE => Request::Ev6(Ev6Request::Enable(long()?)),
        n::PCNT6CLEAR => Request::Ev6(Ev6Request::Clear(long()?)),
        n::PCNT6RESTART => Request::Ev6(Ev6Request::Restart(long()?)),
        n::PCNT6SETCNTRS => Request::Ev6(Ev6Request::SetCntrs(arg(cmd, data)?)),
        n::PCNT6GETCNTRS => Request::Ev6(Ev6Request::GetCntrs(arg(cmd, data)?)),
        n::PCNT6GETCNT => Request::Ev6(Ev6Request::GetCnt { addr: addr()? }),
        n::PCNT6READCNTRS => Request::Ev6(Ev6Request::ReadCntrs { addr: addr()? }),
        other => {
            return Err(DeviceError::invalid(format!(
                "unknown ioctl {other:#x} (type {:#x}, nr {})",
                n::kind(other),
                n::nr(other)
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pointer_and_value_arguments() {
        let ptr = 0x7fff_0000_1000u64.to_ne_bytes();
        assert_eq!(
            decode(n::PCNTGETCNT, &ptr).unwrap(),
            Request::Ev4(Ev4Request::GetCnt {
                addr: 0x7fff_0000_1000
            })
        );
        assert_eq!(
            decode(n::PCNTSETITEMS, &5u64.to_ne_bytes()).unwrap(),
            Request::SetItems(5)
        );
        let mut range = [0u8; 32];
        range[16] = 8;
        let Request::SetUrange(r) = decode(n::PCNTSETURANGE, &range).unwrap() else {
            panic!()
        };
        assert_eq!(r.stride, 8);
    }

    #[test]
    fn unknown_and_short_arguments_are_einval() {
        use nix::errno::Errno;
        assert_eq!(decode(0x5063, &[]).unwrap_err().errno(), Errno::EINVAL);
        assert_eq!(decode(0x7401, &[]).unwrap_err().errno(), Errno::EINVAL);
        assert_eq!(
            decode(n::PCNTSETITEMS, &[1, 2]).unwrap_err().errno(),
            Errno::EINVAL
        );
    }
}
