//! FUSE/CUSE ioctls: the argument path, the compat rule and where a
//! pointer ioctl's bytes go, for every channel.
//!
//! Two kinds of request reach us:
//!
//! - **Restricted** (a FUSE file: the kernel allows nothing else there). The
//!   kernel reads direction and size from the command (`_IOC_DIR`,
//!   `_IOC_SIZE`; pfm-abi's numbers are Linux-encoded with LP64 sizes),
//!   copies the argument in with the request and `_IOC_SIZE` bytes of the
//!   reply out: one round trip. The ioctls that store through a pointer
//!   (`*GETCNT`, `*READCNTRS`, `PCNTGETIPLHIS`: their `_IOW` word is the
//!   address of the caller's array) come back as [`IoctlAnswer::Store`]:
//!   the kernel cannot copy them, so the channel has the store helper
//!   ([`super::store`]) write them with `process_vm_writev` into the
//!   calling thread, off every serving thread, and replies when it is done.
//! - **Unrestricted** (CUSE, which pfmd asks for at CUSE_INIT). The first
//!   request carries nothing; we answer `FUSE_IOCTL_RETRY` asking for the
//!   argument as its `_IOC` encoding describes it. For a pointer ioctl the
//!   second request brings the pointer and we retry once more, naming the
//!   caller's array (at most [`Device::max_store_len`](crate::device::Device::max_store_len)
//!   bytes) as the out-iovec; the third runs the device once and its bytes
//!   are the reply, which **the kernel** copies to the array in the
//!   caller's own thread, as a driver's `copyout` would: a page that is
//!   slow to fault in delays that caller alone. Nothing is remembered
//!   between the requests; a caller that changes its pointer between them
//!   gets its array at the address it passed first.
//!
//! A 32-bit caller gets `ENOTTY` for every ioctl, on every channel.

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
    /// Result 0 with `data` once `store` is in the caller's memory
    /// (restricted requests: the kernel cannot copy it).
    Store { store: CallerStore, data: Vec<u8> },
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
/// bytes; `max_store` bounds what a pointer ioctl may store (the out-iovec
/// an unrestricted retry names).
pub fn step(
    req: &FuseIoctlIn,
    data: &[u8],
    max_store: impl FnOnce() -> usize,
    device: impl FnOnce(&[u8]) -> Result<IoctlReply, DeviceError>,
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
    let unrestricted = req.flags & FUSE_IOCTL_UNRESTRICTED != 0;
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
        if !unrestricted {
            // The kernel copies _IOC_SIZE itself for restricted ioctls.
            return Err(DeviceError::Host(
                format!(
                    "restricted ioctl {:#x} arrived with in {in_size}, out {out_size}",
                    req.cmd
                ),
                Errno::EIO,
            ));
        }
        // The argument, as its _IOC encoding describes it.
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
    let pointer = numbers::pointer_argument(req.cmd, arg);
    if let Some(addr) = pointer
        && unrestricted
        && out_size == 0
    {
        // The caller's array as the out-iovec: the kernel copies our reply
        // there, in the caller's thread.
        return Ok(IoctlAnswer::Retry {
            in_iovs: vec![iovec(req.arg, want_in)],
            out_iovs: vec![iovec(addr, max_store())],
        });
    }
    let reply = device(arg)?;
    match reply.store.filter(|s| !s.bytes.is_empty()) {
        Some(store) => {
            check_store(req.cmd, arg, &store)?;
            if unrestricted {
                if store.bytes.len() > out_size {
                    return Err(DeviceError::Internal(format!(
                        "a store of {} bytes for ioctl {:#x} exceeds the {out_size} bytes asked for",
                        store.bytes.len(),
                        req.cmd
                    )));
                }
                return Ok(IoctlAnswer::Data(store.bytes));
            }
            let mut data = reply.out;
            data.resize(want_out, 0);
            Ok(IoctlAnswer::Store { store, data })
        }
        None => {
            let mut bytes = reply.out;
            bytes.resize(want_out, 0);
            Ok(IoctlAnswer::Data(bytes))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CallerStore;
    use pfm_abi::numbers as n;
    use std::cell::Cell;

    const ARG: u64 = 0x7ffd_0000_0100;
    const PTR: u64 = 0x5555_0000_2000;
    const MAX: usize = 4096;

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
                || MAX,
                |data| {
                    assert!(data.is_empty());
                    ran.set(true);
                    Ok(IoctlReply::default())
                },
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
            || MAX,
            |data| {
                assert_eq!(data, 1u64.to_le_bytes());
                Ok(IoctlReply::default())
            },
        )
        .unwrap();
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
        // _IOR long: the reply is padded to _IOC_SIZE.
        let answer = step(
            &restricted(n::PCNTGETRSIZE),
            &[],
            || MAX,
            |_| {
                Ok(IoctlReply {
                    out: vec![4, 0],
                    store: None,
                })
            },
        )
        .unwrap();
        assert_eq!(answer, IoctlAnswer::Data(vec![4, 0, 0, 0, 0, 0, 0, 0]));
    }

    /// `*GETCNT` over a restricted ioctl: the pointer comes in with the one
    /// request, the device runs once, and its bytes come back as a store
    /// for the channel to make before it replies.
    #[test]
    fn a_restricted_pointer_ioctl_is_one_request_and_a_store() {
        let runs = Cell::new(0);
        let answer = step(
            &restricted(n::PCNTGETCNT),
            &PTR.to_ne_bytes(),
            || MAX,
            |data| {
                assert_eq!(data, PTR.to_ne_bytes());
                runs.set(runs.get() + 1);
                Ok(IoctlReply::store(PTR, vec![7; 24]))
            },
        )
        .unwrap();
        assert_eq!(runs.get(), 1);
        assert_eq!(
            answer,
            IoctlAnswer::Store {
                store: CallerStore {
                    addr: PTR,
                    bytes: vec![7; 24]
                },
                data: vec![]
            }
        );
    }

    /// Unrestricted (CUSE): a retry for the argument, a retry naming the
    /// caller's array, then the device once with its bytes as the reply
    /// (the kernel copies them in the caller's thread).
    #[test]
    fn unrestricted_pointer_ioctls_let_the_kernel_copy() {
        let first = step(&unrestricted(n::PCNTGETCNT, 0, 0), &[], || MAX, never).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![]
            }
        );
        let second = step(
            &unrestricted(n::PCNTGETCNT, 8, 0),
            &PTR.to_ne_bytes(),
            || MAX,
            never,
        )
        .unwrap();
        assert_eq!(
            second,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![iovec(PTR, MAX)]
            }
        );
        let runs = Cell::new(0);
        let third = step(
            &unrestricted(n::PCNTGETCNT, 8, MAX),
            &PTR.to_ne_bytes(),
            || MAX,
            |_| {
                runs.set(runs.get() + 1);
                Ok(IoctlReply::store(PTR, vec![7; 24]))
            },
        )
        .unwrap();
        assert_eq!(runs.get(), 1);
        assert_eq!(third, IoctlAnswer::Data(vec![7; 24]));
        // A store larger than the array asked for is a bug: EIO.
        let err = step(
            &unrestricted(n::PCNTGETCNT, 8, 16),
            &PTR.to_ne_bytes(),
            || MAX,
            |_| Ok(IoctlReply::store(PTR, vec![7; 24])),
        )
        .unwrap_err();
        assert_eq!(err.errno(), Errno::EIO);
        // _IOR and _IOWR arguments are asked for both ways they go.
        assert_eq!(
            step(&unrestricted(n::PCNTGETRSIZE, 0, 0), &[], || MAX, never).unwrap(),
            IoctlAnswer::Retry {
                in_iovs: vec![],
                out_iovs: vec![iovec(ARG, 8)]
            }
        );
        assert_eq!(
            step(&unrestricted(n::PCNT5GETCNTRS, 0, 0), &[], || MAX, never).unwrap(),
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
                || MAX,
                |_| Ok(IoctlReply::store(addr, vec![1; 8])),
            )
            .unwrap_err();
            assert_eq!(err.errno(), Errno::EIO, "{cmd:#x}");
        }
    }

    #[test]
    fn device_errors_pass_through() {
        let err = step(
            &restricted(n::PCNTGETCNT),
            &PTR.to_ne_bytes(),
            || MAX,
            |_| Err(DeviceError::invalid("no PFM_COUNTERS")),
        )
        .unwrap_err();
        assert_eq!(err.errno(), Errno::EINVAL);
    }

    #[test]
    fn compat_and_32bit_callers_get_enotty() {
        for flags in [
            FUSE_IOCTL_COMPAT,
            FUSE_IOCTL_32BIT,
            FUSE_IOCTL_COMPAT | FUSE_IOCTL_32BIT,
            FUSE_IOCTL_COMPAT_X32,
        ] {
            for mut r in [
                restricted(n::PCNTRENABLE),
                unrestricted(n::PCNTRENABLE, 0, 0),
            ] {
                r.flags |= flags;
                let err = step(&r, &[], || MAX, never).unwrap_err();
                assert_eq!(err.errno(), Errno::ENOTTY, "flags {flags:#x}");
            }
        }
    }

    #[test]
    fn a_restricted_request_without_its_argument_is_eio() {
        let mut r = restricted(n::PCNTGETCNT);
        r.in_size = 0;
        assert_eq!(
            step(&r, &[], || MAX, never).unwrap_err().errno(),
            Errno::EIO
        );
    }
}
