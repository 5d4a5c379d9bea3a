//! The ioctl edge: the only `unsafe` of the crate. Each function takes an
//! argument whose size is the one its command declares, or a buffer the
//! caller sized for what the device will store through the pointer.

use nix::errno::Errno;
use pfm_abi::numbers;
use std::os::fd::{AsRawFd, BorrowedFd};
use zerocopy::{FromBytes, Immutable, IntoBytes};

fn raw(fd: BorrowedFd<'_>, cmd: u32, arg: *mut libc::c_void) -> Result<(), Errno> {
    // SAFETY: callers pass null for `_IO` commands, a pointer to an owned,
    // live value of exactly `_IOC_SIZE(cmd)` bytes for `_IOR`/`_IOW`/`_IOWR`
    // commands (checked by `value`/`read`), or, for the commands that store
    // through a pointer, a pointer to a pointer to a buffer sized for what
    // the device stores there (`fill`).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), cmd as libc::c_ulong, arg) };
    if r < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// `_IO` commands: no argument.
pub fn none(fd: BorrowedFd<'_>, cmd: u32) -> Result<(), Errno> {
    debug_assert_eq!(numbers::size(cmd), 0);
    raw(fd, cmd, std::ptr::null_mut())
}

/// `_IOW`/`_IOWR` commands: `value` in, and for `_IOWR` the device's reply
/// in its place.
pub fn value<T: IntoBytes + FromBytes + Immutable>(
    fd: BorrowedFd<'_>,
    cmd: u32,
    value: &mut T,
) -> Result<(), Errno> {
    assert_eq!(
        numbers::size(cmd) as usize,
        size_of::<T>(),
        "argument size of {}",
        numbers::name(cmd).unwrap_or("?")
    );
    raw(fd, cmd, (value as *mut T).cast())
}

/// `_IOR` commands: the device's reply.
pub fn read<T: IntoBytes + FromBytes + Immutable>(
    fd: BorrowedFd<'_>,
    cmd: u32,
) -> Result<T, Errno> {
    let mut out = T::new_zeroed();
    value(fd, cmd, &mut out)?;
    Ok(out)
}

/// The commands that store through a pointer (`*GETCNT`, `*READCNTRS`,
/// `PCNTGETIPLHIS`): `elements` elements the device fills, which the caller
/// computes from the open mode and the CPU count the device reported.
pub fn fill<T: IntoBytes + FromBytes + Clone>(
    fd: BorrowedFd<'_>,
    cmd: u32,
    elements: usize,
) -> Result<Vec<T>, Errno> {
    assert!(numbers::stores_through_pointer(cmd));
    let mut buffer = vec![T::new_zeroed(); elements.max(1)];
    let mut pointer = buffer.as_mut_ptr();
    raw(fd, cmd, (&raw mut pointer).cast())?;
    Ok(buffer)
}
