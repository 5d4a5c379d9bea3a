//! The typed [`Request`] a raw ioctl decodes to, and the argument readers
//! the ioctl table in [`numbers`](crate::numbers) decodes with.

use crate::Family;
use crate::counters::{CounterMask, CounterOp, RawCounters};
use crate::numbers as n;
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

/// Reads an ioctl's argument, a `T`, from its input bytes; `name` is the
/// ioctl's, for the error.
pub(crate) fn arg<T: FromBytes>(name: &'static str, data: &[u8]) -> Result<T, DecodeError> {
    T::read_from_prefix(data)
        .map(|(v, _)| v)
        .map_err(|_| DecodeError::ShortArgument {
            name,
            got: data.len(),
            need: size_of::<T>(),
        })
}

/// What a per-counter ioctl's `u64` word carries, unpacked the way
/// `family` packs it (`Counters` lines of the table).
pub(crate) trait CounterWord {
    fn from_word(family: Family, word: u64) -> Self;
}

impl CounterWord for CounterMask {
    fn from_word(family: Family, word: u64) -> Self {
        CounterMask::from_word(family, word)
    }
}

impl CounterWord for RawCounters {
    fn from_word(family: Family, word: u64) -> Self {
        RawCounters::unpack(family, word)
    }
}

/// The arguments of `PCNTSET[UK]ADDR` (no stride: the last one stays) and
/// `PCNTSET[UK]RANGE`.
pub(crate) trait Range {
    fn request(self, kernel: bool) -> RangeRequest;
}

impl Range for AddrRange {
    fn request(self, kernel: bool) -> RangeRequest {
        RangeRequest {
            kernel,
            start: self.start,
            end: self.end,
            stride: None,
        }
    }
}

impl Range for AddrRangeT {
    fn request(self, kernel: bool) -> RangeRequest {
        RangeRequest {
            kernel,
            start: self.start,
            end: self.end,
            stride: Some(self.stride),
        }
    }
}

/// `SetRange(user T)` in the table: a `PCNTSETU*` range.
pub(crate) fn user(range: impl Range) -> RangeRequest {
    range.request(false)
}

/// `SetRange(kernel T)` in the table: a `PCNTSETK*` range.
pub(crate) fn kernel(range: impl Range) -> RangeRequest {
    range.request(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::numbers::decode;
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
