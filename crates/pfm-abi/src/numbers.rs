//! Ioctl numbers: Linux `_IO/_IOR/_IOW/_IOWR` with type `'P'`, the Tru64 `nr`,
//! and LP64 sizes of the Tru64 declarations (docs/device.md §3); and the one
//! table of ioctls from which the constants, [`ALL`], [`name`],
//! [`stores_through_pointer`], [`family_of`] and [`decode`] are generated.

use crate::counters::{CounterMask, RawCounters};
use crate::structs::{AddrRange, AddrRangeT, Iccsr, PfmInfo};

pub const IOC_NONE: u32 = 0;
pub const IOC_WRITE: u32 = 1;
pub const IOC_READ: u32 = 2;
pub const IOC_TYPE_PFM: u32 = b'P' as u32;

const LONG: u32 = 8;
const POINTER: u32 = 8;

pub const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | (IOC_TYPE_PFM << 8) | nr
}
const fn io(nr: u32) -> u32 {
    ioc(IOC_NONE, nr, 0)
}
const fn iow(nr: u32, size: u32) -> u32 {
    ioc(IOC_WRITE, nr, size)
}
const fn ior(nr: u32, size: u32) -> u32 {
    ioc(IOC_READ, nr, size)
}
const fn iowr(nr: u32, size: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, nr, size)
}

/// `_IOC_DIR(cmd)`.
pub const fn dir(cmd: u32) -> u32 {
    cmd >> 30
}
/// `_IOC_SIZE(cmd)`.
pub const fn size(cmd: u32) -> u32 {
    (cmd >> 16) & 0x3fff
}
/// `_IOC_TYPE(cmd)`.
pub const fn kind(cmd: u32) -> u32 {
    (cmd >> 8) & 0xff
}
/// `_IOC_NR(cmd)`.
pub const fn nr(cmd: u32) -> u32 {
    cmd & 0xff
}

const ADDR_RANGE: u32 = size_of::<AddrRange>() as u32;
const ADDR_RANGE_T: u32 = size_of::<AddrRangeT>() as u32;
const PFM_INFO: u32 = size_of::<PfmInfo>() as u32;

// The ioctl table: one line per ioctl, the grammar in `table.rs`.
ioctls! {
    // Family independent.
    PCNTRDISABLE    = io(0)                             => Disable;
    PCNTRENABLE     = io(1)                             => Enable;
    PCNTLOGALL      = io(3)                             => LogAll;
    PCNTLOGSELECT   = io(4)                             => LogSelect;
    PCNTCLEARCNT    = io(5)                             => ClearCnt;
    PCNTCLEARPCBPME = io(7)                             => ClearPcbPme;
    PCNTCALLER      = io(8)                             => Caller;
    PCNTGETRSIZE    = ior(10, LONG)                     => GetRsize;
    PCNTGETIPLHIS   = iow(11, POINTER), stores          => GetIplHis { addr: u64 };
    PCNTSETITEMS    = iow(31, LONG)                     => SetItems(u64);
    PCNTSETUADDR    = iow(32, ADDR_RANGE)               => SetRange(user AddrRange);
    PCNTSETKADDR    = iow(33, ADDR_RANGE)               => SetRange(kernel AddrRange);
    PCNTSETURANGE   = iow(34, ADDR_RANGE_T)             => SetRange(user AddrRangeT);
    PCNTSETKRANGE   = iow(35, ADDR_RANGE_T)             => SetRange(kernel AddrRangeT);

    // EV4.
    PCNTSETMUX      = iow(2, 8), Ev4                    => Ev4Mux(Iccsr);
    PCNTGETCNT      = iow(6, POINTER), Ev4, stores      => Counters(GetCounts { addr: u64 });

    // EV5.
    PCNT5CTXTS      = iow(40, LONG), Ev5                => Ev5Contexts(u64);
    PCNT5MUX        = iow(41, LONG), Ev5                => Ev5Mux(u64);
    PCNT5FREQ       = iow(42, LONG), Ev5                => Ev5Freq(u64);
    PCNT5DISABLE    = iow(43, LONG), Ev5                => Counters(Disable(CounterMask));
    PCNT5ENABLE     = iow(44, LONG), Ev5                => Counters(Enable(CounterMask));
    PCNT5CLEAR      = iow(45, LONG), Ev5                => Counters(Clear(CounterMask));
    PCNT5RESTART    = iow(46, LONG), Ev5                => Counters(Restart(CounterMask));
    PCNT5SETCNTRS   = iow(47, LONG), Ev5                => Counters(SetCounters(RawCounters));
    PCNT5GETCNTRS   = iowr(48, LONG), Ev5               => Counters(GetCounters(RawCounters));
    PCNT5GETCNT     = iow(49, POINTER), Ev5, stores     => Counters(GetCounts { addr: u64 });
    PCNT5READCNTRS  = iow(50, POINTER), Ev5, stores     => Counters(ReadCounts { addr: u64 });

    // EV6 and EV67.
    PCNT6MUX        = iow(51, LONG), Ev6                => Ev6Mux(u64);
    PCNT6ENABWRITE  = iow(52, LONG), Ev6                => Counters(EnableWrite(RawCounters));
    PCNT6DISABLE    = iow(53, LONG), Ev6                => Counters(Disable(CounterMask));
    PCNT6ENABLE     = iow(54, LONG), Ev6                => Counters(Enable(CounterMask));
    PCNT6CLEAR      = iow(55, LONG), Ev6                => Counters(Clear(CounterMask));
    PCNT6RESTART    = iow(56, LONG), Ev6                => Counters(Restart(CounterMask));
    PCNT6SETCNTRS   = iow(57, LONG), Ev6                => Counters(SetCounters(RawCounters));
    PCNT6GETCNTRS   = iowr(58, LONG), Ev6               => Counters(GetCounters(RawCounters));
    PCNT6GETCNT     = iow(59, POINTER), Ev6, stores     => Counters(GetCounts { addr: u64 });
    PCNT6READCNTRS  = iow(60, POINTER), Ev6, stores     => Counters(ReadCounts { addr: u64 });

    // Extension (ours).
    PCNTGETINFO     = ior(100, PFM_INFO)                => GetInfo;
}

/// For an ioctl that [stores through a pointer](stores_through_pointer):
/// the address the caller passed, read from the argument bytes (the `_IOW`
/// word). `None` for any other ioctl, or bytes too short to hold it. A
/// transport checks a store against it, so pfmd only ever writes where the
/// caller pointed.
pub fn pointer_argument(cmd: u32, arg: &[u8]) -> Option<u64> {
    if !stores_through_pointer(cmd) {
        return None;
    }
    let word: [u8; POINTER as usize] = arg.get(..POINTER as usize)?.try_into().ok()?;
    Some(u64::from_ne_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CounterOp, DecodeError, Family, Request};

    #[test]
    fn pointer_arguments_are_the_iow_word_of_pointer_ioctls_only() {
        let word = 0x5555_0000_2000u64.to_ne_bytes();
        for cmd in [PCNTGETCNT, PCNT5READCNTRS, PCNT6GETCNT, PCNTGETIPLHIS] {
            assert_eq!(dir(cmd), IOC_WRITE);
            assert_eq!(size(cmd), 8);
            assert_eq!(pointer_argument(cmd, &word), Some(0x5555_0000_2000));
            assert_eq!(pointer_argument(cmd, &word[..4]), None);
        }
        assert_eq!(pointer_argument(PCNTSETITEMS, &word), None);
        assert_eq!(pointer_argument(PCNTRENABLE, &[]), None);
    }

    #[test]
    fn encodings_match_linux_macros() {
        // _IO('P', 1) and _IOW('P', 6, void *) computed by hand from <asm-generic/ioctl.h>.
        assert_eq!(PCNTRENABLE, 0x5001);
        assert_eq!(PCNTGETCNT, 0x4008_5006);
        assert_eq!(PCNTGETRSIZE, 0x8008_500a);
        assert_eq!(PCNT5GETCNTRS, 0xc008_5030);
        assert_eq!(size(PCNTSETURANGE), 32);
        assert_eq!(nr(PCNTGETINFO), 100);
        assert_eq!(kind(PCNTSETMUX), u32::from(b'P'));
    }

    #[test]
    fn numbers_are_unique() {
        for (i, (a, x)) in ALL.iter().enumerate() {
            for (b, y) in &ALL[i + 1..] {
                assert_ne!(x, y, "{a} and {b} share a number");
            }
        }
    }

    /// The table's lines against what they generate and against
    /// `Request::family`, which is written by hand.
    #[test]
    fn table_lines_agree_with_what_they_generate() {
        let word = 0x1234_5678_9abc_def0u64;
        for &(label, cmd) in ALL {
            assert_eq!(name(cmd), Some(label));
            assert_eq!(kind(cmd), IOC_TYPE_PFM, "{label}");
            let size = size(cmd) as usize;
            let mut argument = vec![0u8; size];
            if size >= 8 {
                argument[..8].copy_from_slice(&word.to_ne_bytes());
            }
            let request = decode(cmd, &argument).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(request.family(), family_of(cmd), "{label}");

            // An argument the device reads is exactly `_IOC_SIZE` bytes.
            if dir(cmd) & IOC_WRITE != 0 {
                assert_eq!(
                    decode(cmd, &argument[..size - 1]),
                    Err(DecodeError::ShortArgument {
                        name: label,
                        got: size - 1,
                        need: size
                    })
                );
            } else {
                assert!(decode(cmd, &[]).is_ok(), "{label}");
            }

            // A pointer store's request carries the address it stores to.
            let addr = match request {
                Request::GetIplHis { addr }
                | Request::Counters(
                    _,
                    CounterOp::GetCounts { addr } | CounterOp::ReadCounts { addr },
                ) => Some(addr),
                _ => None,
            };
            assert_eq!(stores_through_pointer(cmd), addr.is_some(), "{label}");
            assert_eq!(pointer_argument(cmd, &argument), addr, "{label}");
            if stores_through_pointer(cmd) {
                assert_eq!((dir(cmd), size), (IOC_WRITE, POINTER as usize));
            }
        }
    }

    #[test]
    fn numbers_outside_the_table_are_nothing() {
        let strangers = [
            PCNTGETCNT + 1,
            ioc(IOC_WRITE, 6, 4),
            io(63),
            ioc(IOC_NONE, 1, 0) | 0x100,
        ];
        for cmd in strangers {
            assert_eq!(name(cmd), None);
            assert_eq!(family_of(cmd), None);
            assert!(!stores_through_pointer(cmd));
            assert_eq!(decode(cmd, &[0; 64]), Err(DecodeError::Unknown { cmd }));
        }
        assert_eq!(family_of(PCNTSETMUX), Some(Family::Ev4));
        assert_eq!(family_of(PCNT5GETCNT), Some(Family::Ev5));
        assert_eq!(family_of(PCNT6ENABWRITE), Some(Family::Ev6));
        assert_eq!(family_of(PCNTGETIPLHIS), None);
    }
}
