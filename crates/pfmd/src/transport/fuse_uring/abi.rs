//! What a FUSE *filesystem* server and FUSE over io_uring need from
//! `linux/fuse.h` beyond the CUSE subset in [`crate::transport::cuse::abi`]
//! (headers, open/read/write/release/flush/ioctl, shared from there): INIT,
//! LOOKUP, GETATTR, READDIR, STATFS, and the io_uring entry layout (7.42+,
//! not in the 7.38 header Debian ships; sizes are checked below).

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

pub const FUSE_LOOKUP: u32 = 1;
pub const FUSE_GETATTR: u32 = 3;
pub const FUSE_SETATTR: u32 = 4;
pub const FUSE_UNLINK: u32 = 10;
pub const FUSE_STATFS: u32 = 17;
pub const FUSE_INIT: u32 = 26;
pub const FUSE_OPENDIR: u32 = 27;
pub const FUSE_READDIR: u32 = 28;
pub const FUSE_RELEASEDIR: u32 = 29;
pub const FUSE_CREATE: u32 = 35;

/// The minor we answer INIT with at most: the 64-byte `fuse_init_out` with
/// `flags2`, and FUSE_OVER_IO_URING (7.42).
pub const PFMD_FUSE_MINOR: u32 = 42;
/// `fuse_init_in/out.flags`.
pub const FUSE_MAX_PAGES: u32 = 1 << 22;
pub const FUSE_INIT_EXT: u32 = 1 << 30;
/// `FUSE_OVER_IO_URING` is bit 41 of the 64-bit flags: bit 9 of `flags2`.
pub const FUSE_OVER_IO_URING_FLAGS2: u32 = 1 << 9;
/// `fuse_setattr_in.valid` bits.
pub const FATTR_MODE: u32 = 1 << 0;
pub const FATTR_UID: u32 = 1 << 1;
pub const FATTR_GID: u32 = 1 << 2;
pub const FATTR_SIZE: u32 = 1 << 3;
/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
pub const FUSE_DEV_IOC_CLONE: u32 = 0x8004_e500;

/// `enum fuse_uring_cmd`, in `sqe->cmd_op`.
pub const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
pub const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;
pub const FUSE_URING_IN_OUT_HEADER_SZ: usize = 128;
pub const FUSE_URING_OP_IN_OUT_SZ: usize = 128;
/// `sqe->len` of every FUSE uring command: two iovecs, header and payload.
pub const FUSE_URING_IOV_SEGS: u32 = 2;

macro_rules! wire {
    ($(#[$m:meta])* pub struct $name:ident { $(pub $field:ident: $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
        #[repr(C)]
        pub struct $name { $(pub $field: $ty,)* }
    };
}

wire!(
    pub struct FuseInitIn {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub flags2: u32,
        pub unused: [u32; 11],
    }
);
wire!(
    pub struct FuseInitOut {
        pub major: u32,
        pub minor: u32,
        pub max_readahead: u32,
        pub flags: u32,
        pub max_background: u16,
        pub congestion_threshold: u16,
        pub max_write: u32,
        pub time_gran: u32,
        pub max_pages: u16,
        pub map_alignment: u16,
        pub flags2: u32,
        pub max_stack_depth: u32,
        pub unused: [u32; 6],
    }
);
wire!(
    pub struct FuseAttr {
        pub ino: u64,
        pub size: u64,
        pub blocks: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub rdev: u32,
        pub blksize: u32,
        pub flags: u32,
    }
);
wire!(
    pub struct FuseEntryOut {
        pub nodeid: u64,
        pub generation: u64,
        pub entry_valid: u64,
        pub attr_valid: u64,
        pub entry_valid_nsec: u32,
        pub attr_valid_nsec: u32,
        pub attr: FuseAttr,
    }
);
wire!(
    pub struct FuseAttrOut {
        pub attr_valid: u64,
        pub attr_valid_nsec: u32,
        pub dummy: u32,
        pub attr: FuseAttr,
    }
);
wire!(
    pub struct FuseSetattrIn {
        pub valid: u32,
        pub padding: u32,
        pub fh: u64,
        pub size: u64,
        pub lock_owner: u64,
        pub atime: u64,
        pub mtime: u64,
        pub ctime: u64,
        pub atimensec: u32,
        pub mtimensec: u32,
        pub ctimensec: u32,
        pub mode: u32,
        pub unused4: u32,
        pub uid: u32,
        pub gid: u32,
        pub unused5: u32,
    }
);
wire!(
    pub struct FuseStatfsOut {
        pub blocks: u64,
        pub bfree: u64,
        pub bavail: u64,
        pub files: u64,
        pub ffree: u64,
        pub bsize: u32,
        pub namelen: u32,
        pub frsize: u32,
        pub padding: u32,
        pub spare: [u32; 6],
    }
);
wire!(
    /// `struct fuse_dirent` without its name, which follows, padded to 8.
    pub struct FuseDirentHead {
        pub ino: u64,
        pub off: u64,
        pub namelen: u32,
        pub kind: u32,
    }
);
wire!(
    /// The tail of a ring entry's header: the kernel writes it with a
    /// request, we write `payload_sz` with the reply.
    pub struct FuseUringEntInOut {
        pub flags: u64,
        pub commit_id: u64,
        pub payload_sz: u32,
        pub padding: u32,
        pub reserved: u64,
    }
);
wire!(
    /// The request data in the SQE's 80-byte command area.
    pub struct FuseUringCmdReq {
        pub flags: u64,
        pub commit_id: u64,
        pub qid: u16,
        pub padding: [u8; 6],
    }
);

/// `iov[0]` of a ring entry: `fuse_in_header` (request) or
/// `fuse_out_header` (reply) in `in_out`, the request's first argument in
/// `op_in`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct FuseUringReqHeader {
    pub in_out: [u8; FUSE_URING_IN_OUT_HEADER_SZ],
    pub op_in: [u8; FUSE_URING_OP_IN_OUT_SZ],
    pub ring_ent_in_out: FuseUringEntInOut,
}

impl Default for FuseUringReqHeader {
    fn default() -> Self {
        FromZeros::new_zeroed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// As the 7.45 `linux/fuse.h` lays them out.
    #[test]
    fn sizes_and_offsets_match_the_protocol() {
        assert_eq!(size_of::<FuseInitIn>(), 64);
        assert_eq!(offset_of!(FuseInitIn, flags2), 16);
        assert_eq!(size_of::<FuseInitOut>(), 64);
        assert_eq!(offset_of!(FuseInitOut, max_write), 20);
        assert_eq!(offset_of!(FuseInitOut, max_pages), 28);
        assert_eq!(offset_of!(FuseInitOut, flags2), 32);
        assert_eq!(size_of::<FuseAttr>(), 88);
        assert_eq!(offset_of!(FuseAttr, mode), 60);
        assert_eq!(size_of::<FuseEntryOut>(), 128);
        assert_eq!(offset_of!(FuseEntryOut, attr), 40);
        assert_eq!(size_of::<FuseAttrOut>(), 104);
        assert_eq!(size_of::<FuseStatfsOut>(), 80);
        assert_eq!(size_of::<FuseSetattrIn>(), 88);
        assert_eq!(offset_of!(FuseSetattrIn, size), 16);
        assert_eq!(offset_of!(FuseSetattrIn, mode), 68);
        assert_eq!(size_of::<FuseDirentHead>(), 24);
        assert_eq!(size_of::<FuseUringEntInOut>(), 32);
        assert_eq!(offset_of!(FuseUringEntInOut, payload_sz), 16);
        assert_eq!(size_of::<FuseUringReqHeader>(), 288);
        assert_eq!(offset_of!(FuseUringReqHeader, op_in), 128);
        assert_eq!(offset_of!(FuseUringReqHeader, ring_ent_in_out), 256);
        assert_eq!(size_of::<FuseUringCmdReq>(), 24);
        assert_eq!(offset_of!(FuseUringCmdReq, qid), 16);
    }
}
