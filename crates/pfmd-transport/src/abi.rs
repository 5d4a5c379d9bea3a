//! The one mirror of the kernel's FUSE/CUSE wire ABI (`linux/fuse.h`,
//! protocol 7.x) that every channel speaks: CUSE, classic `/dev/fuse` and
//! FUSE over io_uring. `#[repr(C)]` mirrors with zerocopy derives, opcodes
//! and flag bits; sizes are checked against the C header in the tests below
//! (the io_uring entry layout, 7.42+, against the protocol's numbers: the
//! header Debian ships is older).

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

/// A `#[repr(C)]` mirror of a kernel structure, readable from and
/// writable as the wire's bytes.
macro_rules! wire {
    ($(#[$m:meta])* pub struct $name:ident { $(pub $field:ident: $ty:ty,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
        #[repr(C)]
        pub struct $name { $(pub $field: $ty,)* }
    };
}

/// `FUSE_KERNEL_VERSION`: the only major the kernel speaks.
pub const FUSE_KERNEL_VERSION: u32 = 7;
/// The minor we implement: our structures are the 7.16+ layouts (64-bit
/// `fuse_ioctl_iovec` in retry replies), unchanged since for what CUSE uses.
/// We answer CUSE_INIT with `min(kernel's minor, this)`.
pub const PFMD_MINOR_VERSION: u32 = 31;
/// Below 7.16 a retry reply is `struct iovec` (same bytes on LP64, but we
/// do not claim to speak that dialect).
pub const MIN_KERNEL_MINOR: u32 = 16;

// Opcodes (`enum fuse_opcode`).
pub const FUSE_FORGET: u32 = 2;
pub const FUSE_OPEN: u32 = 14;
pub const FUSE_READ: u32 = 15;
pub const FUSE_WRITE: u32 = 16;
pub const FUSE_RELEASE: u32 = 18;
pub const FUSE_FSYNC: u32 = 20;
pub const FUSE_FLUSH: u32 = 25;
pub const FUSE_INTERRUPT: u32 = 36;
pub const FUSE_DESTROY: u32 = 38;
pub const FUSE_IOCTL: u32 = 39;
pub const FUSE_POLL: u32 = 40;
pub const FUSE_NOTIFY_REPLY: u32 = 41;
pub const FUSE_BATCH_FORGET: u32 = 42;
pub const CUSE_INIT: u32 = 4096;

/// `CUSE_UNRESTRICTED_IOCTL` (cuse_init_in/out flags).
pub const CUSE_UNRESTRICTED_IOCTL: u32 = 1 << 0;

// `fuse_ioctl_in.flags` / `fuse_ioctl_out.flags`.
pub const FUSE_IOCTL_COMPAT: u32 = 1 << 0;
pub const FUSE_IOCTL_UNRESTRICTED: u32 = 1 << 1;
pub const FUSE_IOCTL_RETRY: u32 = 1 << 2;
pub const FUSE_IOCTL_32BIT: u32 = 1 << 3;
pub const FUSE_IOCTL_DIR: u32 = 1 << 4;
pub const FUSE_IOCTL_COMPAT_X32: u32 = 1 << 5;
/// Most iovecs (in + out) a retry reply may name.
pub const FUSE_IOCTL_MAX_IOV: usize = 256;

// `fuse_open_out.open_flags`.
pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub const FOPEN_NONSEEKABLE: u32 = 1 << 2;
pub const FOPEN_STREAM: u32 = 1 << 4;

/// Bit set in `fuse_in_header.unique` of an INTERRUPT request.
pub const FUSE_INT_REQ_BIT: u64 = 1 << 0;
/// The kernel refuses reads with a smaller buffer.
pub const FUSE_MIN_READ_BUFFER: usize = 8192;
/// Room the kernel gives the CUSE_INIT device-info strings.
pub const CUSE_INIT_INFO_MAX: usize = 4096;
/// A CUSE connection never negotiates `max_pages`: the kernel's default
/// (`FUSE_DEFAULT_MAX_PAGES_PER_REQ`, 32 pages) bounds each direction of an
/// unrestricted ioctl, and a read piece.
pub const CUSE_MAX_TRANSFER: usize = 32 * 4096;

wire!(
    pub struct FuseInHeader {
        pub len: u32,
        pub opcode: u32,
        pub unique: u64,
        pub nodeid: u64,
        pub uid: u32,
        pub gid: u32,
        pub pid: u32,
        pub total_extlen: u16,
        pub padding: u16,
    }
);

wire!(
    pub struct FuseOutHeader {
        pub len: u32,
        pub error: i32,
        pub unique: u64,
    }
);

wire!(
    pub struct CuseInitIn {
        pub major: u32,
        pub minor: u32,
        pub unused: u32,
        pub flags: u32,
    }
);

wire!(
    pub struct CuseInitOut {
        pub major: u32,
        pub minor: u32,
        pub unused: u32,
        pub flags: u32,
        pub max_read: u32,
        pub max_write: u32,
        pub dev_major: u32,
        pub dev_minor: u32,
        pub spare: [u32; 10],
    }
);

wire!(
    pub struct FuseOpenIn {
        pub flags: u32,
        pub open_flags: u32,
    }
);

wire!(
    pub struct FuseOpenOut {
        pub fh: u64,
        pub open_flags: u32,
        pub padding: u32,
    }
);

wire!(
    pub struct FuseReleaseIn {
        pub fh: u64,
        pub flags: u32,
        pub release_flags: u32,
        pub lock_owner: u64,
    }
);

wire!(
    pub struct FuseFlushIn {
        pub fh: u64,
        pub unused: u32,
        pub padding: u32,
        pub lock_owner: u64,
    }
);

wire!(
    pub struct FuseReadIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub read_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
);

wire!(
    pub struct FuseWriteIn {
        pub fh: u64,
        pub offset: u64,
        pub size: u32,
        pub write_flags: u32,
        pub lock_owner: u64,
        pub flags: u32,
        pub padding: u32,
    }
);

wire!(
    pub struct FuseInterruptIn {
        pub unique: u64,
    }
);

wire!(
    pub struct FuseIoctlIn {
        pub fh: u64,
        pub flags: u32,
        pub cmd: u32,
        pub arg: u64,
        pub in_size: u32,
        pub out_size: u32,
    }
);

wire!(
    pub struct FuseIoctlIovec {
        pub base: u64,
        pub len: u64,
    }
);

wire!(
    pub struct FuseIoctlOut {
        pub result: i32,
        pub flags: u32,
        pub in_iovs: u32,
        pub out_iovs: u32,
    }
);

wire!(
    pub struct FusePollIn {
        pub fh: u64,
        pub kh: u64,
        pub flags: u32,
        pub events: u32,
    }
);

// What a FUSE *filesystem* server and FUSE over io_uring need beyond the
// device operations: INIT, LOOKUP, GETATTR, READDIR, STATFS, and the
// io_uring entry layout.

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

/// The minor we answer FUSE INIT with at most: the 64-byte `fuse_init_out` with
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
    use std::path::Path;
    use std::process::Command;

    /// Sizes and offsets as `linux/fuse.h` defines them (7.38 header; these
    /// structures have not changed since 7.16 apart from renamed padding).
    fn ours() -> Vec<(&'static str, usize)> {
        vec![
            ("sizeof(struct fuse_in_header)", size_of::<FuseInHeader>()),
            ("sizeof(struct fuse_out_header)", size_of::<FuseOutHeader>()),
            ("sizeof(struct cuse_init_in)", size_of::<CuseInitIn>()),
            ("sizeof(struct cuse_init_out)", size_of::<CuseInitOut>()),
            ("sizeof(struct fuse_open_in)", size_of::<FuseOpenIn>()),
            ("sizeof(struct fuse_open_out)", size_of::<FuseOpenOut>()),
            ("sizeof(struct fuse_release_in)", size_of::<FuseReleaseIn>()),
            ("sizeof(struct fuse_flush_in)", size_of::<FuseFlushIn>()),
            ("sizeof(struct fuse_read_in)", size_of::<FuseReadIn>()),
            ("sizeof(struct fuse_write_in)", size_of::<FuseWriteIn>()),
            (
                "sizeof(struct fuse_interrupt_in)",
                size_of::<FuseInterruptIn>(),
            ),
            ("sizeof(struct fuse_ioctl_in)", size_of::<FuseIoctlIn>()),
            (
                "sizeof(struct fuse_ioctl_iovec)",
                size_of::<FuseIoctlIovec>(),
            ),
            ("sizeof(struct fuse_ioctl_out)", size_of::<FuseIoctlOut>()),
            ("sizeof(struct fuse_poll_in)", size_of::<FusePollIn>()),
            (
                "offsetof(struct fuse_in_header, pid)",
                offset_of!(FuseInHeader, pid),
            ),
            (
                "offsetof(struct fuse_in_header, unique)",
                offset_of!(FuseInHeader, unique),
            ),
            (
                "offsetof(struct cuse_init_out, max_read)",
                offset_of!(CuseInitOut, max_read),
            ),
            (
                "offsetof(struct cuse_init_out, dev_minor)",
                offset_of!(CuseInitOut, dev_minor),
            ),
            (
                "offsetof(struct fuse_read_in, size)",
                offset_of!(FuseReadIn, size),
            ),
            (
                "offsetof(struct fuse_ioctl_in, arg)",
                offset_of!(FuseIoctlIn, arg),
            ),
            (
                "offsetof(struct fuse_ioctl_in, in_size)",
                offset_of!(FuseIoctlIn, in_size),
            ),
            (
                "offsetof(struct fuse_ioctl_out, out_iovs)",
                offset_of!(FuseIoctlOut, out_iovs),
            ),
            ("FUSE_KERNEL_VERSION", FUSE_KERNEL_VERSION as usize),
            ("FUSE_OPEN", FUSE_OPEN as usize),
            ("FUSE_READ", FUSE_READ as usize),
            ("FUSE_WRITE", FUSE_WRITE as usize),
            ("FUSE_RELEASE", FUSE_RELEASE as usize),
            ("FUSE_FLUSH", FUSE_FLUSH as usize),
            ("FUSE_INTERRUPT", FUSE_INTERRUPT as usize),
            ("FUSE_DESTROY", FUSE_DESTROY as usize),
            ("FUSE_IOCTL", FUSE_IOCTL as usize),
            ("FUSE_POLL", FUSE_POLL as usize),
            ("FUSE_NOTIFY_REPLY", FUSE_NOTIFY_REPLY as usize),
            ("FUSE_BATCH_FORGET", FUSE_BATCH_FORGET as usize),
            ("CUSE_INIT", CUSE_INIT as usize),
            ("CUSE_UNRESTRICTED_IOCTL", CUSE_UNRESTRICTED_IOCTL as usize),
            ("FUSE_IOCTL_COMPAT", FUSE_IOCTL_COMPAT as usize),
            ("FUSE_IOCTL_UNRESTRICTED", FUSE_IOCTL_UNRESTRICTED as usize),
            ("FUSE_IOCTL_RETRY", FUSE_IOCTL_RETRY as usize),
            ("FUSE_IOCTL_32BIT", FUSE_IOCTL_32BIT as usize),
            ("FUSE_IOCTL_DIR", FUSE_IOCTL_DIR as usize),
            ("FUSE_IOCTL_COMPAT_X32", FUSE_IOCTL_COMPAT_X32 as usize),
            ("FUSE_IOCTL_MAX_IOV", FUSE_IOCTL_MAX_IOV),
            ("FOPEN_DIRECT_IO", FOPEN_DIRECT_IO as usize),
            ("FOPEN_NONSEEKABLE", FOPEN_NONSEEKABLE as usize),
            ("FOPEN_STREAM", FOPEN_STREAM as usize),
            ("FUSE_MIN_READ_BUFFER", FUSE_MIN_READ_BUFFER),
            ("CUSE_INIT_INFO_MAX", CUSE_INIT_INFO_MAX),
        ]
    }

    /// The values the 7.38 header has, for hosts without it.
    #[test]
    fn sizes_match_the_protocol() {
        let want = [40, 16, 16, 72, 8, 16, 24, 24, 40, 40, 8, 32, 16, 16, 24];
        let got: Vec<usize> = ours().iter().take(want.len()).map(|(_, v)| *v).collect();
        assert_eq!(got, want);
    }

    /// Compiles a tiny C program against the host's `linux/fuse.h` and
    /// compares every size, offset and constant. Skipped (with a message)
    /// when gcc or the header (linux-libc-dev) is missing.
    #[test]
    fn layouts_match_linux_fuse_h() {
        if !Path::new("/usr/include/linux/fuse.h").exists() {
            eprintln!("SKIP: /usr/include/linux/fuse.h missing (apt-get install linux-libc-dev)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("pfmd-fuse-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut program = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <linux/fuse.h>\nint main(void) {\n",
        );
        for (expr, _) in ours() {
            program.push_str(&format!("\tprintf(\"%lu\\n\", (unsigned long)({expr}));\n"));
        }
        program.push_str("\treturn 0;\n}\n");
        let source = dir.join("abi.c");
        let exe = dir.join("abi");
        std::fs::write(&source, program).unwrap();
        let built = match Command::new("gcc")
            .arg("-o")
            .arg(&exe)
            .arg(&source)
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                eprintln!("SKIP: cannot run gcc: {e}");
                return;
            }
        };
        assert!(
            built.status.success(),
            "{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let out = Command::new(&exe).output().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let values: Vec<usize> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        for ((expr, ours), theirs) in ours().into_iter().zip(values) {
            assert_eq!(ours, theirs, "{expr}: ours {ours}, linux/fuse.h {theirs}");
        }
    }

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
