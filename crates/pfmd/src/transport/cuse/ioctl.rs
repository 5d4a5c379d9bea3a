//! FUSE/CUSE ioctls: one request each, the device run once.
//!
//! pfmd answers CUSE_INIT without `CUSE_UNRESTRICTED_IOCTL`, so CUSE
//! ioctls are *restricted*, as FUSE ioctls on a regular file always are:
//! the kernel reads the direction and size from the command
//! (`_IOC_DIR`, `_IOC_SIZE`; pfm-abi's numbers are Linux-encoded with LP64
//! sizes), copies the argument in with the request and copies `_IOC_SIZE`
//! bytes of the reply out. Every ioctl is then one round trip. The
//! ioctls that store through a pointer (`*GETCNT`, `*READCNTRS`,
//! `PCNTGETIPLHIS`: their `_IOW` word is the address of the caller's
//! array) have the device's bytes written with `process_vm_writev` into
//! the calling thread, after checking (pfm-abi's
//! [`numbers::pointer_argument`]) that the address is the one the caller
//! passed; a pointer that faults is `EFAULT`, as a failed `copyout`.
//!
//! Unrestricted requests (a kernel that sends them anyway) take two round
//! trips: the first asks (`FUSE_IOCTL_RETRY`) for the argument as its
//! `_IOC` encoding describes it, the second runs the device once and
//! stores like the restricted case. Nothing is remembered between them.
//! (Before, the store went through a third request whose out-iovec was the
//! caller's array, and the device ran twice.)

use super::abi::{
    FUSE_IOCTL_32BIT, FUSE_IOCTL_COMPAT, FUSE_IOCTL_COMPAT_X32, FUSE_IOCTL_DIR,
    FUSE_IOCTL_UNRESTRICTED, FuseIoctlIn, FuseIoctlIovec,
};
use crate::device::DeviceError;
use crate::device::{CallerStore, IoctlReply};
use nix::errno::Errno;
use pfm_abi::numbers;

/// The errno a 32-bit (compat or x32) caller gets for every ioctl. Our ioctl
/// numbers encode LP64 sizes and the structures are `unsigned long` arrays,
/// so an ILP32 caller's arguments cannot be understood. A native driver
/// without a `compat_ioctl` method gives 32-bit callers `ENOTTY`; so do we,
/// rather than `EINVAL`, so that "wrong ABI" stays distinguishable from the
/// device's "unknown ioctl" (`EINVAL`).
pub const COMPAT_ERRNO: Errno = Errno::ENOTTY;

/// What to answer one IOCTL request with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoctlAnswer {
    /// FUSE_IOCTL_RETRY with these iovecs (unrestricted requests only).
    Retry {
        in_iovs: Vec<FuseIoctlIovec>,
        out_iovs: Vec<FuseIoctlIovec>,
    },
    /// Result 0; these bytes go to the out-iovecs in order.
    Data(Vec<u8>),
}

fn iovec(base: u64, len: usize) -> FuseIoctlIovec {
    FuseIoctlIovec {
        base,
        len: len as u64,
    }
}

/// Checks that `store`, which the device asked for in answer to `cmd` with
/// argument bytes `arg`, goes where the caller pointed: `cmd` is an ioctl
/// that stores through a pointer, and the address is that pointer.
pub fn check_store(cmd: u32, arg: &[u8], store: &CallerStore) -> Result<(), DeviceError> {
    match numbers::pointer_argument(cmd, arg) {
        Some(addr) if addr == store.addr => Ok(()),
        passed => Err(DeviceError::Internal(format!(
            "a store of {} bytes at {:#x} for ioctl {cmd:#x}, whose pointer argument is {passed:x?}",
            store.bytes.len(),
            store.addr
        ))),
    }
}

/// One request of one ioctl. `device` runs the device on the argument
/// bytes; `store` writes caller memory (`process_vm_writev`) for the
/// ioctls that store through a pointer.
pub fn step(
    req: &FuseIoctlIn,
    data: &[u8],
    device: impl FnOnce(&[u8]) -> Result<IoctlReply, DeviceError>,
    store: impl FnOnce(&CallerStore) -> Result<(), DeviceError>,
) -> Result<IoctlAnswer, DeviceError> {
    if req.flags & (FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT | FUSE_IOCTL_COMPAT_X32) != 0 {
        return Err(DeviceError::Host(
            format!(
                "32-bit caller (ioctl flags {:#x}): pfm ioctls are LP64 only",
                req.flags
            ),
            COMPAT_ERRNO,
        ));
    }
    if req.flags & FUSE_IOCTL_DIR != 0 {
        return Err(DeviceError::Host(
            "ioctl on a directory".into(),
            Errno::ENOTTY,
        ));
    }
    let size = numbers::size(req.cmd) as usize;
    let dir = numbers::dir(req.cmd);
    let want_in = if dir & numbers::IOC_WRITE != 0 {
        size
    } else {
        0
    };
    let want_out = if dir & numbers::IOC_READ != 0 {
        size
    } else {
        0
    };
    let (in_size, out_size) = (req.in_size as usize, req.out_size as usize);

    if in_size < want_in || out_size < want_out {
        if req.flags & FUSE_IOCTL_UNRESTRICTED == 0 {
            // The kernel copies _IOC_SIZE itself for restricted ioctls.
            return Err(DeviceError::Host(
                format!(
                    "restricted ioctl {:#x} arrived with in {in_size}, out {out_size}",
                    req.cmd
                ),
                Errno::EIO,
            ));
        }
        // The one retry: the argument, as its _IOC encoding describes it.
        return Ok(IoctlAnswer::Retry {
            in_iovs: (want_in > 0)
                .then(|| iovec(req.arg, want_in))
                .into_iter()
                .collect(),
            out_iovs: (want_out > 0)
                .then(|| iovec(req.arg, want_out))
                .into_iter()
                .collect(),
        });
    }

    let arg = &data[..want_in.min(data.len())];
    let reply = device(arg)?;
    if let Some(caller_store) = reply.store.as_ref().filter(|s| !s.bytes.is_empty()) {
        check_store(req.cmd, arg, caller_store)?;
        store(caller_store)?;
    }
    let mut bytes = reply.out;
    bytes.resize(want_out, 0);
    Ok(IoctlAnswer::Data(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CallerStore;
    use pfm_abi::numbers as n;
    use std::cell::Cell;

    const ARG: u64 = 0x7ffd_0000_0100;
    const PTR: u64 = 0x5555_0000_2000;

    fn unrestricted(cmd: u32, in_size: usize, out_size: usize) -> FuseIoctlIn {
        FuseIoctlIn {
            fh: 1,
            flags: FUSE_IOCTL_UNRESTRICTED,
            cmd,
            arg: ARG,
            in_size: in_size as u32,
            out_size: out_size as u32,
        }
    }

    /// What the kernel sends for a restricted ioctl: `_IOC_SIZE` each way
    /// the direction says.
    fn restricted(cmd: u32) -> FuseIoctlIn {
        let size = n::size(cmd);
        let dir = n::dir(cmd);
        FuseIoctlIn {
            fh: 1,
            flags: 0,
            cmd,
            arg: ARG,
            in_size: if dir & n::IOC_WRITE != 0 { size } else { 0 },
            out_size: if dir & n::IOC_READ != 0 { size } else { 0 },
        }
    }

    fn never(_: &[u8]) -> Result<IoctlReply, DeviceError> {
        panic!("the device must not run before the argument arrived")
    }

    fn no_store(_: &CallerStore) -> Result<(), DeviceError> {
        panic!("no store expected")
    }

    #[test]
    fn no_argument_runs_at_once() {
        for req in [
            unrestricted(n::PCNTRENABLE, 0, 0),
            restricted(n::PCNTRENABLE),
        ] {
            let ran = Cell::new(false);
            let answer = step(
                &req,
                &[],
                |data| {
                    assert!(data.is_empty());
                    ran.set(true);
                    Ok(IoctlReply::default())
                },
                no_store,
            )
            .unwrap();
            assert!(ran.get());
            assert_eq!(answer, IoctlAnswer::Data(vec![]));
        }
    }

    #[test]
    fn restricted_arguments_arrive_with_the_one_request() {
        let answer = step(
            &restricted(n::PCNTSETITEMS),
            &1u64.to_le_bytes(),
            |data| {
                assert_eq!(data, 1u64.to_le_bytes());
                Ok(IoctlReply::default())
            },
            no_store,
        )
        .unwrap();
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
        // _IOR long: the reply is padded to _IOC_SIZE.
        let answer = step(
            &restricted(n::PCNTGETRSIZE),
            &[],
            |_| {
                Ok(IoctlReply {
                    out: vec![4, 0],
                    store: None,
                })
            },
            no_store,
        )
        .unwrap();
        assert_eq!(answer, IoctlAnswer::Data(vec![4, 0, 0, 0, 0, 0, 0, 0]));
    }

    /// `*GETCNT` over a restricted ioctl: the pointer comes in with the one
    /// request, the device runs once, its bytes go to the pointer.
    #[test]
    fn a_pointer_ioctl_is_one_request_and_one_device_run() {
        let runs = Cell::new(0);
        let stored = Cell::new(None);
        let answer = step(
            &restricted(n::PCNTGETCNT),
            &PTR.to_ne_bytes(),
            |data| {
                assert_eq!(data, PTR.to_ne_bytes());
                runs.set(runs.get() + 1);
                Ok(IoctlReply::store(PTR, vec![7; 24]))
            },
            |s| {
                stored.set(Some((s.addr, s.bytes.len())));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(runs.get(), 1);
        assert_eq!(stored.get(), Some((PTR, 24)));
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
    }

    /// Unrestricted: a retry for the argument as `_IOC` says, then the
    /// device once; a pointer ioctl stores directly instead of a third
    /// request.
    #[test]
    fn unrestricted_takes_two_requests_and_one_device_run() {
        let first = step(&unrestricted(n::PCNTGETCNT, 0, 0), &[], never, no_store).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![]
            }
        );
        let stored = Cell::new(false);
        let second = step(
            &unrestricted(n::PCNTGETCNT, 8, 0),
            &PTR.to_ne_bytes(),
            |_| Ok(IoctlReply::store(PTR, vec![7; 24])),
            |s| {
                assert_eq!((s.addr, s.bytes.len()), (PTR, 24));
                stored.set(true);
                Ok(())
            },
        )
        .unwrap();
        assert!(stored.get());
        assert_eq!(second, IoctlAnswer::Data(vec![]));
        // _IOR and _IOWR arguments are asked for both ways they go.
        assert_eq!(
            step(&unrestricted(n::PCNTGETRSIZE, 0, 0), &[], never, no_store).unwrap(),
            IoctlAnswer::Retry {
                in_iovs: vec![],
                out_iovs: vec![iovec(ARG, 8)]
            }
        );
        assert_eq!(
            step(&unrestricted(n::PCNT5GETCNTRS, 0, 0), &[], never, no_store).unwrap(),
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![iovec(ARG, 8)]
            }
        );
    }

    #[test]
    fn stores_go_only_where_the_caller_pointed() {
        // The device answering a store for an ioctl without a pointer
        // argument, or at another address, is a bug; nothing is written.
        for (cmd, arg, addr) in [
            (n::PCNTSETITEMS, PTR.to_ne_bytes(), PTR),
            (n::PCNTGETCNT, PTR.to_ne_bytes(), PTR + 8),
        ] {
            let err = step(
                &restricted(cmd),
                &arg,
                |_| Ok(IoctlReply::store(addr, vec![1; 8])),
                no_store,
            )
            .unwrap_err();
            assert_eq!(err.errno(), Errno::EIO, "{cmd:#x}");
        }
    }

    #[test]
    fn device_and_store_errors_pass_through() {
        let err = step(
            &restricted(n::PCNTGETCNT),
            &PTR.to_ne_bytes(),
            |_| Err(DeviceError::invalid("no PFM_COUNTERS")),
            no_store,
        )
        .unwrap_err();
        assert_eq!(err.errno(), Errno::EINVAL);
        let err = step(
            &restricted(n::PCNTGETCNT),
            &PTR.to_ne_bytes(),
            |_| Ok(IoctlReply::store(PTR, vec![0; 24])),
            |_| Err(DeviceError::Fault("bad address".into())),
        )
        .unwrap_err();
        assert_eq!(err.errno(), Errno::EFAULT);
    }

    #[test]
    fn compat_and_32bit_callers_get_enotty() {
        for flags in [
            FUSE_IOCTL_COMPAT,
            FUSE_IOCTL_32BIT,
            FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT,
            FUSE_IOCTL_COMPAT_X32,
        ] {
            let mut r = restricted(n::PCNTRENABLE);
            r.flags |= flags;
            let err = step(&r, &[], never, no_store).unwrap_err();
            assert_eq!(err.errno(), Errno::ENOTTY, "flags {flags:#x}");
        }
    }

    #[test]
    fn a_restricted_request_without_its_argument_is_eio() {
        let mut r = restricted(n::PCNTGETCNT);
        r.in_size = 0;
        assert_eq!(
            step(&r, &[], never, no_store).unwrap_err().errno(),
            Errno::EIO
        );
    }
}
