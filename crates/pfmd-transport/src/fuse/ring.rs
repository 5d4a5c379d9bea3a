//! The io_uring framing of FUSE requests and replies, translated to and from
//! the classic framing that [`crate::wire`] parses and
//! encodes, so one codec serves both channels.
//!
//! A ring entry is two buffers. On fetch the kernel writes `fuse_in_header`
//! to `in_out`, the request's first argument (`in_args[0]`, possibly empty)
//! to `op_in`, the other arguments back to back to the payload, and their
//! size to `payload_sz`; `header.len` still counts everything, so `op_in`'s
//! part is `len − 40 − payload_sz` bytes. On commit we write
//! `fuse_out_header` to `in_out`, every output argument to the payload, and
//! their size to `payload_sz`.

use crate::abi::*;
use io_uring::{opcode, squeue, types};
use std::os::fd::RawFd;
use zerocopy::{FromBytes, IntoBytes};

/// A ring entry that cannot be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("ring entry: payload_sz {said} exceeds the {room}-byte payload buffer")]
    PayloadOverflow { said: usize, room: usize },
    #[error("ring entry: header len {len} is less than 40 + payload_sz {payload}")]
    BadLength { len: usize, payload: usize },
    #[error("ring entry: first argument of {0} bytes does not fit op_in")]
    OpInOverflow(usize),
    #[error("reply of {0} bytes is shorter than its header")]
    ShortReply(usize),
    #[error("reply arguments of {len} bytes exceed the {room}-byte payload buffer")]
    ReplyTooLarge { len: usize, room: usize },
}

/// The unique of the request in an entry (what COMMIT_AND_FETCH names).
pub fn commit_id(header: &FuseUringReqHeader) -> u64 {
    header.ring_ent_in_out.commit_id
}

/// Rebuilds the request in `header` and `payload` as the classic channel
/// would have delivered it, into `buf`.
pub fn request_into(
    header: &FuseUringReqHeader,
    payload: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(), RingError> {
    let (h, _) = FuseInHeader::read_from_prefix(&header.in_out).expect("128 >= 40 bytes");
    let payload_sz = header.ring_ent_in_out.payload_sz as usize;
    if payload_sz > payload.len() {
        return Err(RingError::PayloadOverflow {
            said: payload_sz,
            room: payload.len(),
        });
    }
    let head = size_of::<FuseInHeader>();
    let op_len = (h.len as usize)
        .checked_sub(head + payload_sz)
        .ok_or(RingError::BadLength {
            len: h.len as usize,
            payload: payload_sz,
        })?;
    if op_len > FUSE_URING_OP_IN_OUT_SZ {
        return Err(RingError::OpInOverflow(op_len));
    }
    buf.clear();
    buf.extend_from_slice(&header.in_out[..head]);
    buf.extend_from_slice(&header.op_in[..op_len]);
    buf.extend_from_slice(&payload[..payload_sz]);
    Ok(())
}

/// Puts a classic reply (`fuse_out_header` and the arguments) into the
/// entry for COMMIT_AND_FETCH.
pub fn reply_into(
    reply: &[u8],
    header: &mut FuseUringReqHeader,
    payload: &mut [u8],
) -> Result<(), RingError> {
    let head = size_of::<FuseOutHeader>();
    if reply.len() < head {
        return Err(RingError::ShortReply(reply.len()));
    }
    let args = &reply[head..];
    if args.len() > payload.len() {
        return Err(RingError::ReplyTooLarge {
            len: args.len(),
            room: payload.len(),
        });
    }
    header.in_out[..head].copy_from_slice(&reply[..head]);
    payload[..args.len()].copy_from_slice(args);
    header.ring_ent_in_out.payload_sz = args.len() as u32;
    Ok(())
}

/// The 80-byte command area of a FUSE uring SQE.
pub fn command_area(qid: u16, commit_id: u64) -> [u8; 80] {
    let req = FuseUringCmdReq {
        flags: 0,
        commit_id,
        qid,
        padding: [0; 6],
    };
    let mut cmd = [0u8; 80];
    cmd[..size_of::<FuseUringCmdReq>()].copy_from_slice(req.as_bytes());
    cmd
}

/// Offset of `len` in `struct io_uring_sqe`.
const SQE_LEN_OFFSET: usize = 24;

/// A REGISTER or COMMIT_AND_FETCH SQE for the entry whose iovec pair is at
/// `iovecs`. Building it is safe; pushing it hands the entry to the kernel.
pub fn command(
    fd: RawFd,
    cmd_op: u32,
    qid: u16,
    commit_id: u64,
    iovecs: u64,
    user_data: u64,
) -> squeue::Entry128 {
    let sqe = opcode::UringCmd80::new(types::Fd(fd), cmd_op)
        .cmd(command_area(qid, commit_id))
        .addr(Some(iovecs))
        .build()
        .user_data(user_data);
    // The io-uring crate leaves `sqe->len` 0; FUSE wants the iovec count
    // there (EINVAL otherwise), and the crate has no setter for it.
    let mut bytes = sqe_bytes(sqe);
    bytes[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&FUSE_URING_IOV_SEGS.to_ne_bytes());
    sqe_from_bytes(bytes)
}

fn sqe_bytes(sqe: squeue::Entry128) -> [u8; 128] {
    // SAFETY: Entry128 is #[repr(C)] and 128 bytes (an io_uring_sqe of
    // integers and integer unions, then 64 command bytes), without padding
    // or Drop, so its bytes are all initialised and may be copied out.
    unsafe { std::mem::transmute::<squeue::Entry128, [u8; 128]>(sqe) }
}

fn sqe_from_bytes(bytes: [u8; 128]) -> squeue::Entry128 {
    // SAFETY: as above; every bit pattern is a valid Entry128.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(bytes) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, Op};

    fn entry(opcode: u32, op_in: &[u8], payload: &[u8]) -> (FuseUringReqHeader, Vec<u8>) {
        let mut header = FuseUringReqHeader::default();
        let h = FuseInHeader {
            len: (40 + op_in.len() + payload.len()) as u32,
            opcode,
            unique: 0x42,
            nodeid: 2,
            pid: 77,
            ..Default::default()
        };
        header.in_out[..40].copy_from_slice(h.as_bytes());
        header.op_in[..op_in.len()].copy_from_slice(op_in);
        header.ring_ent_in_out.commit_id = 0x42;
        header.ring_ent_in_out.payload_sz = payload.len() as u32;
        let mut buf = vec![0xa5u8; 8192];
        buf[..payload.len()].copy_from_slice(payload);
        (header, buf)
    }

    #[test]
    fn an_ioctl_with_data_becomes_the_classic_request() {
        let arg = FuseIoctlIn {
            fh: 3,
            flags: 0,
            cmd: 0x4008_5006,
            arg: 0x7fff_0000_1000,
            in_size: 8,
            out_size: 0,
        };
        let (header, payload) = entry(FUSE_IOCTL, arg.as_bytes(), &0xdead_beefu64.to_le_bytes());
        let mut buf = Vec::new();
        request_into(&header, &payload, &mut buf).unwrap();
        assert_eq!(buf.len(), 40 + 32 + 8);
        assert_eq!(&buf[..4], &80u32.to_le_bytes());
        assert_eq!(&buf[40..72], arg.as_bytes());
        assert_eq!(&buf[72..], &0xdead_beefu64.to_le_bytes());
        let r = wire::parse(&buf).unwrap();
        assert_eq!(r.header.pid, 77);
        let Op::Ioctl { arg: parsed, data } = r.op else {
            panic!("not an ioctl")
        };
        assert_eq!(parsed, arg);
        assert_eq!(data, 0xdead_beefu64.to_le_bytes());
        assert_eq!(commit_id(&header), 0x42);
    }

    #[test]
    fn lookup_has_an_empty_op_in_and_the_name_in_the_payload() {
        let (header, payload) = entry(FUSE_LOOKUP, &[], b"pfcntr\0");
        let mut buf = Vec::new();
        request_into(&header, &payload, &mut buf).unwrap();
        assert_eq!(&buf[40..], b"pfcntr\0");
    }

    #[test]
    fn inconsistent_entries_are_refused() {
        let (mut header, payload) = entry(FUSE_IOCTL, &[0; 32], &[]);
        let mut buf = Vec::new();
        header.ring_ent_in_out.payload_sz = 9000;
        assert_eq!(
            request_into(&header, &payload, &mut buf),
            Err(RingError::PayloadOverflow {
                said: 9000,
                room: 8192
            })
        );
        header.ring_ent_in_out.payload_sz = 100;
        assert_eq!(
            request_into(&header, &payload, &mut buf),
            Err(RingError::BadLength {
                len: 72,
                payload: 100
            })
        );
        let (header, payload) = entry(FUSE_IOCTL, &[0; 128], &[]);
        let mut h = FuseInHeader::read_from_prefix(&header.in_out).unwrap().0;
        h.len += 1;
        let mut header = header;
        header.in_out[..40].copy_from_slice(h.as_bytes());
        assert_eq!(
            request_into(&header, &payload, &mut buf),
            Err(RingError::OpInOverflow(129))
        );
    }

    #[test]
    fn a_reply_goes_header_to_in_out_and_arguments_to_the_payload() {
        let reply = wire::ioctl_data_reply(0x42, &7u64.to_le_bytes());
        let mut header = FuseUringReqHeader::default();
        header.in_out.fill(0xff);
        let mut payload = vec![0u8; 64];
        reply_into(&reply, &mut header, &mut payload).unwrap();
        assert_eq!(&header.in_out[..16], &reply[..16]);
        assert_eq!(&header.in_out[0..4], &40u32.to_le_bytes()); // out header len
        assert_eq!(&header.in_out[8..16], &0x42u64.to_le_bytes());
        assert_eq!(header.ring_ent_in_out.payload_sz, 24);
        assert_eq!(&payload[..16], &[0; 16]); // fuse_ioctl_out
        assert_eq!(&payload[16..24], &7u64.to_le_bytes());

        let error = wire::reply_error(9, nix::errno::Errno::EBUSY);
        reply_into(&error, &mut header, &mut payload).unwrap();
        assert_eq!(header.ring_ent_in_out.payload_sz, 0);
        assert_eq!(&header.in_out[4..8], &(-libc::EBUSY).to_le_bytes());

        assert_eq!(
            reply_into(&[0; 8], &mut header, &mut payload),
            Err(RingError::ShortReply(8))
        );
        let big = wire::reply(1, &[&[0; 65]]);
        assert_eq!(
            reply_into(&big, &mut header, &mut payload),
            Err(RingError::ReplyTooLarge { len: 65, room: 64 })
        );
    }

    #[test]
    fn command_sqe_layout() {
        let sqe = command(5, FUSE_IO_URING_CMD_COMMIT_AND_FETCH, 1, 0x1122, 0xabc0, 3);
        let b = sqe_bytes(sqe);
        assert_eq!(b[0], 46); // IORING_OP_URING_CMD
        assert_eq!(&b[4..8], &5i32.to_ne_bytes()); // fd
        assert_eq!(&b[8..12], &2u32.to_ne_bytes()); // cmd_op
        assert_eq!(&b[16..24], &0xabc0u64.to_ne_bytes()); // addr: the iovecs
        assert_eq!(&b[24..28], &2u32.to_ne_bytes()); // len: two iovecs
        assert_eq!(&b[32..40], &3u64.to_ne_bytes()); // user_data
        // The command area starts at byte 48: fuse_uring_cmd_req.
        assert_eq!(&b[48..56], &0u64.to_ne_bytes()); // flags
        assert_eq!(&b[56..64], &0x1122u64.to_ne_bytes()); // commit_id
        assert_eq!(&b[64..66], &1u16.to_ne_bytes()); // qid
        assert!(b[66..].iter().all(|&x| x == 0));
    }
}
