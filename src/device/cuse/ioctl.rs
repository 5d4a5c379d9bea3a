//! Unrestricted CUSE ioctls: the FUSE_IOCTL_RETRY protocol, stateless.
//!
//! The kernel first sends an ioctl with no data (`in_size == out_size == 0`),
//! since it cannot know what `arg` points at. We answer from the command
//! alone: RETRY with an in-iovec `(arg, _IOC_SIZE)` for `_IOC_WRITE` and an
//! out-iovec `(arg, _IOC_SIZE)` for `_IOC_READ`. The kernel copies the
//! argument in and asks again; now the device runs. If it answers with bytes
//! to store at a pointer the caller passed (`*GETCNT`: `CallerStore`), we
//! answer RETRY once more, adding the out-iovec `(store.addr, len)`; the third
//! request runs the device again and its reply is the out bytes followed by
//! the store bytes, which the kernel copies to the out-iovecs in order. A
//! pointer that faults fails the kernel's copy: `EFAULT`, as the FUSE
//! transport's `process_vm_writev` gives. Nothing is remembered between the
//! requests of one ioctl: each step is recomputed from the request.

use super::abi::{
    CUSE_MAX_TRANSFER, FUSE_IOCTL_32BIT, FUSE_IOCTL_COMPAT, FUSE_IOCTL_COMPAT_X32, FUSE_IOCTL_DIR,
    FUSE_IOCTL_UNRESTRICTED, FuseIoctlIn, FuseIoctlIovec,
};
use crate::device::{CallerStore, IoctlReply};
use crate::ioctl::{DeviceError, numbers};
use nix::errno::Errno;

/// The errno a 32-bit (compat or x32) caller gets for every ioctl. Our ioctl
/// numbers encode LP64 sizes and the structures are `unsigned long` arrays,
/// so an ILP32 caller's arguments cannot be understood. A native driver
/// without a `compat_ioctl` method gives 32-bit callers `ENOTTY`; so do we,
/// rather than `EINVAL`, so that "wrong ABI" stays distinguishable from the
/// contract's "unknown ioctl" (`EINVAL`).
pub const COMPAT_ERRNO: Errno = Errno::ENOTTY;

/// What to answer one IOCTL request with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IoctlAnswer {
    /// FUSE_IOCTL_RETRY with these iovecs.
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

/// One step of one ioctl. `device` runs the device on the argument bytes;
/// `store_directly` writes caller memory without the kernel (the restricted
/// case, and a store too large for one CUSE transfer), like the FUSE transport.
pub fn step(
    req: &FuseIoctlIn,
    data: &[u8],
    device: impl FnOnce(&[u8]) -> Result<IoctlReply, DeviceError>,
    store_directly: impl FnOnce(&CallerStore) -> Result<(), DeviceError>,
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

    let arg_in = || (want_in > 0).then(|| iovec(req.arg, want_in));
    let arg_out = || (want_out > 0).then(|| iovec(req.arg, want_out));

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
        return Ok(IoctlAnswer::Retry {
            in_iovs: arg_in().into_iter().collect(),
            out_iovs: arg_out().into_iter().collect(),
        });
    }

    let reply = device(&data[..want_in.min(data.len())])?;
    let mut bytes = reply.out;
    bytes.resize(want_out, 0);
    match reply.store {
        Some(store) if !store.bytes.is_empty() => {
            let need = want_out + store.bytes.len();
            if out_size >= need {
                bytes.extend_from_slice(&store.bytes);
            } else if unrestricted && need <= CUSE_MAX_TRANSFER {
                return Ok(IoctlAnswer::Retry {
                    in_iovs: arg_in().into_iter().collect(),
                    out_iovs: arg_out()
                        .into_iter()
                        .chain([iovec(store.addr, store.bytes.len())])
                        .collect(),
                });
            } else {
                // The kernel could not carry it (its limit is 32 pages a
                // direction, ENOMEM beyond): store as the FUSE transport does.
                store_directly(&store)?;
            }
        }
        _ => {}
    }
    Ok(IoctlAnswer::Data(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::CallerStore;
    use crate::ioctl::numbers as n;
    use std::cell::Cell;

    const ARG: u64 = 0x7ffd_0000_0100;
    const PTR: u64 = 0x5555_0000_2000;

    fn req(cmd: u32, in_size: usize, out_size: usize) -> FuseIoctlIn {
        FuseIoctlIn {
            fh: 1,
            flags: FUSE_IOCTL_UNRESTRICTED,
            cmd,
            arg: ARG,
            in_size: in_size as u32,
            out_size: out_size as u32,
        }
    }

    fn never(_: &[u8]) -> Result<IoctlReply, DeviceError> {
        panic!("the device must not run before the argument arrived")
    }

    fn no_direct_store(_: &CallerStore) -> Result<(), DeviceError> {
        panic!("no direct store expected")
    }

    #[test]
    fn no_argument_runs_at_once() {
        let ran = Cell::new(false);
        let answer = step(
            &req(n::PCNTRENABLE, 0, 0),
            &[],
            |data| {
                assert!(data.is_empty());
                ran.set(true);
                Ok(IoctlReply::default())
            },
            no_direct_store,
        )
        .unwrap();
        assert!(ran.get());
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
    }

    #[test]
    fn write_argument_is_fetched_then_used() {
        let first = step(&req(n::PCNTSETITEMS, 0, 0), &[], never, no_direct_store).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![]
            }
        );
        let second = step(
            &req(n::PCNTSETITEMS, 8, 0),
            &1u64.to_le_bytes(),
            |data| {
                assert_eq!(data, 1u64.to_le_bytes());
                Ok(IoctlReply::default())
            },
            no_direct_store,
        )
        .unwrap();
        assert_eq!(second, IoctlAnswer::Data(vec![]));
    }

    #[test]
    fn read_argument_gets_an_out_iovec_and_padded_bytes() {
        let first = step(&req(n::PCNTGETRSIZE, 0, 0), &[], never, no_direct_store).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![],
                out_iovs: vec![iovec(ARG, 8)]
            }
        );
        let second = step(
            &req(n::PCNTGETRSIZE, 0, 8),
            &[],
            |_| {
                Ok(IoctlReply {
                    out: vec![4, 0],
                    store: None,
                })
            },
            no_direct_store,
        )
        .unwrap();
        assert_eq!(second, IoctlAnswer::Data(vec![4, 0, 0, 0, 0, 0, 0, 0]));
    }

    #[test]
    fn read_write_argument_goes_both_ways() {
        let first = step(&req(n::PCNT5GETCNTRS, 0, 0), &[], never, no_direct_store).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![iovec(ARG, 8)]
            }
        );
    }

    #[test]
    fn pointer_argument_takes_three_requests() {
        let store = vec![7u8; 24];
        let device = |data: &[u8]| {
            assert_eq!(data, PTR.to_le_bytes());
            Ok(IoctlReply {
                out: vec![],
                store: Some(CallerStore {
                    addr: PTR,
                    bytes: store.clone(),
                }),
            })
        };
        let first = step(&req(n::PCNTGETCNT, 0, 0), &[], never, no_direct_store).unwrap();
        assert_eq!(
            first,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![]
            }
        );
        let second = step(
            &req(n::PCNTGETCNT, 8, 0),
            &PTR.to_le_bytes(),
            device,
            no_direct_store,
        )
        .unwrap();
        assert_eq!(
            second,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![iovec(PTR, 24)]
            }
        );
        let third = step(
            &req(n::PCNTGETCNT, 8, 24),
            &PTR.to_le_bytes(),
            device,
            no_direct_store,
        )
        .unwrap();
        assert_eq!(third, IoctlAnswer::Data(store.clone()));
    }

    #[test]
    fn out_bytes_come_before_store_bytes() {
        let cmd = n::ioc(n::IOC_READ | n::IOC_WRITE, 99, 8);
        let device = |_: &[u8]| {
            Ok(IoctlReply {
                out: vec![1; 8],
                store: Some(CallerStore {
                    addr: PTR,
                    bytes: vec![2; 4],
                }),
            })
        };
        let second = step(&req(cmd, 8, 8), &[0; 8], device, no_direct_store).unwrap();
        assert_eq!(
            second,
            IoctlAnswer::Retry {
                in_iovs: vec![iovec(ARG, 8)],
                out_iovs: vec![iovec(ARG, 8), iovec(PTR, 4)]
            }
        );
        let third = step(&req(cmd, 8, 12), &[0; 8], device, no_direct_store).unwrap();
        assert_eq!(
            third,
            IoctlAnswer::Data(vec![1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2])
        );
    }

    #[test]
    fn device_errors_pass_through_on_any_step() {
        let err = step(
            &req(n::PCNTGETCNT, 8, 0),
            &PTR.to_le_bytes(),
            |_| Err(DeviceError::invalid("no PFM_COUNTERS")),
            no_direct_store,
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
            let mut r = req(n::PCNTRENABLE, 0, 0);
            r.flags |= flags;
            let err = step(&r, &[], never, no_direct_store).unwrap_err();
            assert_eq!(err.errno(), Errno::ENOTTY, "flags {flags:#x}");
        }
    }

    #[test]
    fn restricted_ioctls_store_like_fuse() {
        let mut r = req(n::PCNTGETCNT, 8, 0);
        r.flags = 0;
        let stored = Cell::new(false);
        let answer = step(
            &r,
            &PTR.to_le_bytes(),
            |_| Ok(IoctlReply::store(PTR, vec![3; 24])),
            |s| {
                assert_eq!((s.addr, s.bytes.len()), (PTR, 24));
                stored.set(true);
                Ok(())
            },
        )
        .unwrap();
        assert!(stored.get());
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
        // A restricted request that lacks its argument is the kernel's bug.
        let mut r = req(n::PCNTGETCNT, 0, 0);
        r.flags = 0;
        assert_eq!(
            step(&r, &[], never, no_direct_store).unwrap_err().errno(),
            Errno::EIO
        );
    }

    #[test]
    fn oversized_store_is_written_directly() {
        let big = CUSE_MAX_TRANSFER + 8;
        let stored = Cell::new(false);
        let answer = step(
            &req(n::PCNTGETCNT, 8, 0),
            &PTR.to_le_bytes(),
            |_| Ok(IoctlReply::store(PTR, vec![0; big])),
            |s| {
                assert_eq!(s.bytes.len(), big);
                stored.set(true);
                Ok(())
            },
        )
        .unwrap();
        assert!(stored.get());
        assert_eq!(answer, IoctlAnswer::Data(vec![]));
        // And a failed direct store is the device's EFAULT.
        let err = step(
            &req(n::PCNTGETCNT, 8, 0),
            &PTR.to_le_bytes(),
            |_| Ok(IoctlReply::store(PTR, vec![0; big])),
            |_| Err(DeviceError::Fault("bad address".into())),
        )
        .unwrap_err();
        assert_eq!(err.errno(), Errno::EFAULT);
    }
}
