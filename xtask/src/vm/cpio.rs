//! A writer of "newc" cpio archives, the format the kernel unpacks as an
//! initramfs. Written here rather than by cpio(1) so that no host tool is
//! needed and device nodes can be added without being root.
//!
//! The kernel unpacks concatenated archives in order, so a cached base
//! archive followed by a small per-run archive makes one initramfs.

use std::io::{self, Read, Write};

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

/// Writes entries one by one; [`CpioWriter::finish`] adds the trailer.
pub struct CpioWriter<W: Write> {
    out: W,
    next_inode: u32,
    written: u64,
    mtime: u32,
}

impl<W: Write> CpioWriter<W> {
    /// Entries get modification time `mtime` (seconds since the epoch).
    pub fn new(out: W, mtime: u32) -> Self {
        CpioWriter {
            out,
            next_inode: 1,
            written: 0,
            mtime,
        }
    }

    /// A directory. The kernel does not create missing parents, so every
    /// directory must come before what is in it.
    pub fn dir(&mut self, path: &str, mode: u32) -> io::Result<()> {
        self.header(path, S_IFDIR | (mode & 0o7777), 0, 0, 0)?;
        self.pad()
    }

    /// A regular file with contents `data`.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) -> io::Result<()> {
        self.file_from(path, mode, data.len() as u64, &mut &data[..])
    }

    /// A regular file of `size` bytes read from `reader`.
    pub fn file_from(
        &mut self,
        path: &str,
        mode: u32,
        size: u64,
        reader: &mut dyn Read,
    ) -> io::Result<()> {
        let size32 = u32::try_from(size).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{path}: {size} bytes is too large for a cpio archive (4 GiB)"),
            )
        })?;
        self.header(path, S_IFREG | (mode & 0o7777), size32, 0, 0)?;
        let copied = io::copy(&mut reader.take(size), &mut self.out)?;
        if copied != size {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{path}: read {copied} bytes, expected {size} (changed while copying?)"),
            ));
        }
        self.written += size;
        self.pad()
    }

    /// A symbolic link to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.header(path, S_IFLNK | 0o777, target.len() as u32, 0, 0)?;
        self.write(target.as_bytes())?;
        self.pad()
    }

    /// A character device node.
    pub fn char_device(&mut self, path: &str, mode: u32, major: u32, minor: u32) -> io::Result<()> {
        self.header(path, S_IFCHR | (mode & 0o7777), 0, major, minor)?;
        self.pad()
    }

    /// Ends the archive and returns the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.header("TRAILER!!!", 0, 0, 0, 0)?;
        self.pad()?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn header(
        &mut self,
        path: &str,
        mode: u32,
        size: u32,
        rdev_major: u32,
        rdev_minor: u32,
    ) -> io::Result<()> {
        let name = path.trim_start_matches('/');
        let inode = self.next_inode;
        self.next_inode += 1;
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let mtime = if name == "TRAILER!!!" { 0 } else { self.mtime };
        let fields = [
            inode,
            mode,
            0, // uid: root
            0, // gid
            nlink,
            mtime,
            size,
            0, // device of the archived file: meaningless here
            0,
            rdev_major,
            rdev_minor,
            name.len() as u32 + 1, // with the terminating NUL
            0,                     // checksum: unused in "070701"
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for field in fields {
            header.push_str(&format!("{field:08x}"));
        }
        self.write(header.as_bytes())?;
        self.write(name.as_bytes())?;
        self.write(&[0])?;
        self.pad()
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Headers and data both start on 4-byte boundaries.
    fn pad(&mut self) -> io::Result<()> {
        let padding = (4 - self.written % 4) % 4;
        self.write(&[0u8; 3][..padding as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_of_one_file() {
        let mut writer = CpioWriter::new(Vec::new(), 0);
        writer.file("/a", 0o644, b"hello").unwrap();
        let bytes = writer.finish().unwrap();
        // header (110) + "a\0" = 112, data 5 padded to 8, trailer header
        // 110 + "TRAILER!!!\0" (11) = 121 padded to 124.
        assert_eq!(bytes.len(), 112 + 8 + 124);
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(&bytes[14..22], b"000081a4"); // S_IFREG | 0644
        assert_eq!(&bytes[54..62], b"00000005"); // size
        assert_eq!(&bytes[110..112], b"a\0");
        assert_eq!(&bytes[112..117], b"hello");
        assert_eq!(&bytes[120 + 110..120 + 120], b"TRAILER!!!");
    }

    #[test]
    fn device_numbers_and_symlinks() {
        let mut writer = CpioWriter::new(Vec::new(), 0);
        writer.char_device("dev/console", 0o600, 5, 1).unwrap();
        writer.symlink("bin/sh", "busybox").unwrap();
        let bytes = writer.finish().unwrap();
        assert_eq!(&bytes[14..22], b"00002180");
        assert_eq!(&bytes[78..86], b"00000005"); // rdevmajor
        assert_eq!(&bytes[86..94], b"00000001"); // rdevminor
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("bin/sh\0"));
        assert!(text.contains("busybox"));
    }
}
