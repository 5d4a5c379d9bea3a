//! Ioctl numbers: Linux `_IO/_IOR/_IOW/_IOWR` with type `'P'`, the Tru64 `nr`,
//! and LP64 sizes of the Tru64 declarations (docs/device.md §3).

use crate::structs::{AddrRange, AddrRangeT, PfmInfo};

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

// Family independent.
pub const PCNTRDISABLE: u32 = io(0);
pub const PCNTRENABLE: u32 = io(1);
pub const PCNTLOGALL: u32 = io(3);
pub const PCNTLOGSELECT: u32 = io(4);
pub const PCNTCLEARCNT: u32 = io(5);
pub const PCNTCLEARPCBPME: u32 = io(7);
pub const PCNTCALLER: u32 = io(8);
pub const PCNTGETRSIZE: u32 = ior(10, LONG);
pub const PCNTGETIPLHIS: u32 = iow(11, POINTER);
pub const PCNTSETITEMS: u32 = iow(31, LONG);
pub const PCNTSETUADDR: u32 = iow(32, ADDR_RANGE);
pub const PCNTSETKADDR: u32 = iow(33, ADDR_RANGE);
pub const PCNTSETURANGE: u32 = iow(34, ADDR_RANGE_T);
pub const PCNTSETKRANGE: u32 = iow(35, ADDR_RANGE_T);

// EV4.
pub const PCNTSETMUX: u32 = iow(2, 8);
pub const PCNTGETCNT: u32 = iow(6, POINTER);

// EV5.
pub const PCNT5CTXTS: u32 = iow(40, LONG);
pub const PCNT5MUX: u32 = iow(41, LONG);
pub const PCNT5FREQ: u32 = iow(42, LONG);
pub const PCNT5DISABLE: u32 = iow(43, LONG);
pub const PCNT5ENABLE: u32 = iow(44, LONG);
pub const PCNT5CLEAR: u32 = iow(45, LONG);
pub const PCNT5RESTART: u32 = iow(46, LONG);
pub const PCNT5SETCNTRS: u32 = iow(47, LONG);
pub const PCNT5GETCNTRS: u32 = iowr(48, LONG);
pub const PCNT5GETCNT: u32 = iow(49, POINTER);
pub const PCNT5READCNTRS: u32 = iow(50, POINTER);

// EV6 and EV67.
pub const PCNT6MUX: u32 = iow(51, LONG);
pub const PCNT6ENABWRITE: u32 = iow(52, LONG);
pub const PCNT6DISABLE: u32 = iow(53, LONG);
pub const PCNT6ENABLE: u32 = iow(54, LONG);
pub const PCNT6CLEAR: u32 = iow(55, LONG);
pub const PCNT6RESTART: u32 = iow(56, LONG);
pub const PCNT6SETCNTRS: u32 = iow(57, LONG);
pub const PCNT6GETCNTRS: u32 = iowr(58, LONG);
pub const PCNT6GETCNT: u32 = iow(59, POINTER);
pub const PCNT6READCNTRS: u32 = iow(60, POINTER);

// Extension (ours).
pub const PCNTGETINFO: u32 = ior(100, PFM_INFO);

/// Every ioctl with its C name, for the header check and logs.
pub const ALL: &[(&str, u32)] = &[
    ("PCNTRDISABLE", PCNTRDISABLE),
    ("PCNTRENABLE", PCNTRENABLE),
    ("PCNTLOGALL", PCNTLOGALL),
    ("PCNTLOGSELECT", PCNTLOGSELECT),
    ("PCNTCLEARCNT", PCNTCLEARCNT),
    ("PCNTCLEARPCBPME", PCNTCLEARPCBPME),
    ("PCNTCALLER", PCNTCALLER),
    ("PCNTGETRSIZE", PCNTGETRSIZE),
    ("PCNTGETIPLHIS", PCNTGETIPLHIS),
    ("PCNTSETITEMS", PCNTSETITEMS),
    ("PCNTSETUADDR", PCNTSETUADDR),
    ("PCNTSETKADDR", PCNTSETKADDR),
    ("PCNTSETURANGE", PCNTSETURANGE),
    ("PCNTSETKRANGE", PCNTSETKRANGE),
    ("PCNTSETMUX", PCNTSETMUX),
    ("PCNTGETCNT", PCNTGETCNT),
    ("PCNT5CTXTS", PCNT5CTXTS),
    ("PCNT5MUX", PCNT5MUX),
    ("PCNT5FREQ", PCNT5FREQ),
    ("PCNT5DISABLE", PCNT5DISABLE),
    ("PCNT5ENABLE", PCNT5ENABLE),
    ("PCNT5CLEAR", PCNT5CLEAR),
    ("PCNT5RESTART", PCNT5RESTART),
    ("PCNT5SETCNTRS", PCNT5SETCNTRS),
    ("PCNT5GETCNTRS", PCNT5GETCNTRS),
    ("PCNT5GETCNT", PCNT5GETCNT),
    ("PCNT5READCNTRS", PCNT5READCNTRS),
    ("PCNT6MUX", PCNT6MUX),
    ("PCNT6ENABWRITE", PCNT6ENABWRITE),
    ("PCNT6DISABLE", PCNT6DISABLE),
    ("PCNT6ENABLE", PCNT6ENABLE),
    ("PCNT6CLEAR", PCNT6CLEAR),
    ("PCNT6RESTART", PCNT6RESTART),
    ("PCNT6SETCNTRS", PCNT6SETCNTRS),
    ("PCNT6GETCNTRS", PCNT6GETCNTRS),
    ("PCNT6GETCNT", PCNT6GETCNT),
    ("PCNT6READCNTRS", PCNT6READCNTRS),
    ("PCNTGETINFO", PCNTGETINFO),
];

/// The C name of `cmd`, for logs.
pub fn name(cmd: u32) -> Option<&'static str> {
    ALL.iter().find(|(_, c)| *c == cmd).map(|(n, _)| *n)
}

/// True for the ioctls whose argument is a pointer to caller memory the
/// device fills (`*GETCNT`, `*READCNTRS`, `PCNTGETIPLHIS`): the `_IOW` word
/// is the address, the data goes wherever it points. Transports that can
/// ask the kernel to copy (CUSE) need to know this shape, not what it means.
pub fn stores_through_pointer(cmd: u32) -> bool {
    matches!(
        cmd,
        PCNTGETIPLHIS | PCNTGETCNT | PCNT5GETCNT | PCNT5READCNTRS | PCNT6GETCNT | PCNT6READCNTRS
    )
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
}
