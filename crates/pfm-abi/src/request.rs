//! Decoding a raw ioctl into a typed [`Request`].

use crate::Family;
use crate::counters::{CounterMask, CounterOp, RawCounters};
use crate::numbers::{self as n};
use crate::structs::{AddrRange, AddrRangeT, Iccsr};
use zerocopy::FromBytes;

/// A decoded ioctl. Pointer arguments (`*GETCNT`, `*READCNTRS`,
/// `PCNTGETIPLHIS`) carry the caller's address: the device returns the bytes
/// to store there and the transport stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// `PCNTRDISABLE`
    Disable,
    /// `PCNTRENABLE`
    Enable,
    /// `PCNTLOGALL`
    LogAll,
    /// `PCNTLOGSELECT`
    LogSelect,
    /// `PCNTCLEARCNT`
    ClearCnt,
    /// `PCNTCLEARPCBPME`
    ClearPcbPme,
    /// `PCNTCALLER`
    Caller,
    /// `PCNTGETRSIZE`
    GetRsize,
    /// `PCNTGETIPLHIS`
    GetIplHis { addr: u64 },
    /// `PCNTSETITEMS`: the whole word (items and the profile-me byte).
    SetItems(u64),
    /// `PCNTSET[UK]ADDR`, `PCNTSET[UK]RANGE`
    SetRange(RangeRequest),
    /// `PCNTGETINFO`
    GetInfo,
    /// EV4 `PCNTSETMUX`
    Ev4Mux(Iccsr),
    /// EV5 `PCNT5CTXTS`
    Ev5Contexts(u64),
    /// EV5 `PCNT5MUX`
    Ev5Mux(u64),
    /// EV5 `PCNT5FREQ`
    Ev5Freq(u64),
    /// EV6/EV67 `PCNT6MUX`
    Ev6Mux(u64),
    /// A per-counter operation of `family` (`PCNTGETCNT`, `PCNT5*`, `PCNT6*`).
    Counters(Family, CounterOp),
}

/// A PC-profile range request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RangeRequest {
    /// Kernel (`K`) rather than user (`U`) text.
    pub kernel: bool,
    pub start: u64,
    pub end: u64,
    /// `*RANGE`: instructions per bucket; `*ADDR`: `None`, the last stride set.
    pub stride: Option<u64>,
}

impl Request {
    /// The family an ioctl belongs to; `None` for family-independent ones.
    pub fn family(&self) -> Option<Family> {
        match self {
            Self::Ev4Mux(_) => Some(Family::Ev4),
            Self::Ev5Contexts(_) | Self::Ev5Mux(_) | Self::Ev5Freq(_) => Some(Family::Ev5),
            Self::Ev6Mux(_) => Some(Family::Ev6),
            Self::Counters(family, _) => Some(*family),
            _ => None,
        }
    }
}

/// The family an ioctl number belongs to (`None`: family-independent or
/// unknown).
pub fn family_of(cmd: u32) -> Option<Family> {
    let argument = [0u8; 64];
    let size = (crate::numbers::size(cmd) as usize).min(argument.len());
    decode(cmd, &argument[..size]).ok()?.family()
}

/// Why a raw ioctl is not a request. Both are `EINVAL` at the device, as the
/// original driver's default case.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown ioctl {cmd:#x} (type {:#x}, nr {})", n::kind(*cmd), n::nr(*cmd))]
    Unknown { cmd: u32 },
    #[error("{name}: argument of {got} bytes, need {need}")]
    ShortArgument {
        name: &'static str,
        got: usize,
        need: usize,
    },
}

fn arg<T: FromBytes>(cmd: u32, data: &[u8]) -> Result<T, DecodeError> {
    T::read_from_prefix(data)
        .map(|(v, _)| v)
        .map_err(|_| DecodeError::ShortArgument {
            name: n::name(cmd).unwrap_or("ioctl"),
            got: data.len(),
            need: size_of::<T>(),
        })
}

/// Decodes `cmd` with its input bytes (`_IOC_SIZE(cmd)` bytes for `_IOW`).
pub fn decode(cmd: u32, data: &[u8]) -> Result<Request, DecodeError> {
    let long = || arg::<u64>(cmd, data);
    let range = |kernel: bool| -> Result<Request, DecodeError> {
        let r: AddrRange = arg(cmd, data)?;
        Ok(Request::SetRange(RangeRequest {
            kernel,
            start: r.start,
            end: r.end,
            stride: None,
        }))
    };
    let range_t = |kernel: bool| -> Result<Request, DecodeError> {
        let r: AddrRangeT = arg(cmd, data)?;
        Ok(Request::SetRange(RangeRequest {
            kernel,
            start: r.start,
            end: r.end,
            stride: Some(r.stride),
        }))
    };
    let counters = |family: Family, op: fn(Family, u64) -> CounterOp| {
        long().map(|word| Request::Counters(family, op(family, word)))
    };
    let (ev5, ev6) = (Family::Ev5, Family::Ev6);
    Ok(match cmd {
        n::PCNTRDISABLE => Request::Disable,
        n::PCNTRENABLE => Request::Enable,
        n::PCNTLOGALL => Request::LogAll,
        n::PCNTLOGSELECT => Request::LogSelect,
        n::PCNTCLEARCNT => Request::ClearCnt,
        n::PCNTCLEARPCBPME => Request::ClearPcbPme,
        n::PCNTCALLER => Request::Caller,
        n::PCNTGETRSIZE => Request::GetRsize,
        n::PCNTGETIPLHIS => Request::GetIplHis { addr: long()? },
        n::PCNTSETITEMS => Request::SetItems(long()?),
        n::PCNTSETUADDR => range(false)?,
        n::PCNTSETKADDR => range(true)?,
        n::PCNTSETURANGE => range_t(false)?,
        n::PCNTSETKRANGE => range_t(true)?,
        n::PCNTGETINFO => Request::GetInfo,
        n::PCNTSETMUX => Request::Ev4Mux(arg(cmd, data)?),
        n::PCNTGETCNT => counters(Family::Ev4, |_, addr| CounterOp::GetCounts { addr })?,
        n::PCNT5CTXTS => Request::Ev5Contexts(long()?),
        n::PCNT5MUX => Request::Ev5Mux(long()?),
        n::PCNT5FREQ => Request::Ev5Freq(long()?),
        n::PCNT6MUX => Request::Ev6Mux(long()?),
        n::PCNT5DISABLE => counters(ev5, |f, w| CounterOp::Disable(CounterMask::from_word(f, w)))?,
        n::PCNT6DISABLE => counters(ev6, |f, w| CounterOp::Disable(CounterMask::from_word(f, w)))?,
        n::PCNT5ENABLE => counters(ev5, |f, w| CounterOp::Enable(CounterMask::from_word(f, w)))?,
        n::PCNT6ENABLE => counters(ev6, |f, w| CounterOp::Enable(CounterMask::from_word(f, w)))?,
        n::PCNT5CLEAR => counters(ev5, |f, w| CounterOp::Clear(CounterMask::from_word(f, w)))?,
        n::PCNT6CLEAR => counters(ev6, |f, w| CounterOp::Clear(CounterMask::from_word(f, w)))?,
        n::PCNT5RESTART => counters(ev5, |f, w| CounterOp::Restart(CounterMask::from_word(f, w)))?,
        n::PCNT6RESTART => counters(ev6, |f, w| CounterOp::Restart(CounterMask::from_word(f, w)))?,
        n::PCNT5SETCNTRS => counters(ev5, |f, w| {
            CounterOp::SetCounters(RawCounters::unpack(f, w))
        })?,
        n::PCNT6SETCNTRS => counters(ev6, |f, w| {
            CounterOp::SetCounters(RawCounters::unpack(f, w))
        })?,
        n::PCNT6ENABWRITE => counters(ev6, |f, w| {
            CounterOp::EnableWrite(RawCounters::unpack(f, w))
        })?,
        n::PCNT5GETCNTRS => counters(ev5, |f, w| {
            CounterOp::GetCounters(RawCounters::unpack(f, w))
        })?,
        n::PCNT6GETCNTRS => counters(ev6, |f, w| {
            CounterOp::GetCounters(RawCounters::unpack(f, w))
        })?,
        n::PCNT5GETCNT => counters(ev5, |_, addr| CounterOp::GetCounts { addr })?,
        n::PCNT6GETCNT => counters(ev6, |_, addr| CounterOp::GetCounts { addr })?,
        n::PCNT5READCNTRS => counters(ev5, |_, addr| CounterOp::ReadCounts { addr })?,
        n::PCNT6READCNTRS => counters(ev6, |_, addr| CounterOp::ReadCounts { addr })?,
        other => return Err(DecodeError::Unknown { cmd: other }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structs::PmctrsEv5;

    #[test]
    fn decodes_pointer_and_value_arguments() {
        let ptr = 0x7fff_0000_1000u64.to_ne_bytes();
        assert_eq!(
            decode(n::PCNTGETCNT, &ptr).unwrap(),
            Request::Counters(
                Family::Ev4,
                CounterOp::GetCounts {
                    addr: 0x7fff_0000_1000
                }
            )
        );
        assert_eq!(
            decode(n::PCNTSETITEMS, &5u64.to_ne_bytes()).unwrap(),
            Request::SetItems(5)
        );
        let mut range = [0u8; 32];
        range[16] = 8;
        let Request::SetRange(r) = decode(n::PCNTSETURANGE, &range).unwrap() else {
            panic!()
        };
        assert_eq!((r.kernel, r.stride), (false, Some(8)));
        let Request::SetRange(r) = decode(n::PCNTSETKADDR, &range[..16]).unwrap() else {
            panic!()
        };
        assert_eq!((r.kernel, r.stride), (true, None));
    }

    #[test]
    fn ev5_and_ev6_counter_ioctls_decode_to_one_shape() {
        let word = PmctrsEv5::new(3, 1, 10, 20, 30).0.to_ne_bytes();
        let Request::Counters(Family::Ev5, CounterOp::SetCounters(raw)) =
            decode(n::PCNT5SETCNTRS, &word).unwrap()
        else {
            panic!()
        };
        assert_eq!((raw.cpu, raw.values), (1, [10, 20, 30]));
        assert_eq!(
            decode(n::PCNT6RESTART, &7u64.to_ne_bytes()).unwrap(),
            Request::Counters(
                Family::Ev6,
                CounterOp::Restart(CounterMask::COUNTER_0 | CounterMask::COUNTER_1)
            )
        );
    }

    #[test]
    fn unknown_and_short_arguments_are_refused() {
        assert_eq!(
            decode(0x5063, &[]).unwrap_err(),
            DecodeError::Unknown { cmd: 0x5063 }
        );
        assert!(matches!(
            decode(n::PCNTSETITEMS, &[1, 2]).unwrap_err(),
            DecodeError::ShortArgument {
                got: 2,
                need: 8,
                ..
            }
        ));
    }

    #[test]
    fn every_known_number_decodes_with_a_full_argument() {
        for (name, cmd) in n::ALL {
            let data = vec![0u8; n::size(*cmd) as usize];
            assert!(decode(*cmd, &data).is_ok(), "{name}");
        }
    }
}
