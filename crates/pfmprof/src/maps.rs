//! `/proc/PID/maps` (read by procfs): where the executable and its
//! libraries are mapped.

use procfs::ProcResult;
use procfs::process::{MMPermissions, MMapPath, MemoryMap, MemoryMaps, Process};

/// A file-backed executable mapping: part of an image's text, where it is
/// mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextMapping {
    pub start: u64,
    pub end: u64,
    /// Where `start` is in the file.
    pub offset: u64,
    /// The file mapped, by the name it had when mapped.
    pub path: String,
}

/// The text mappings of process `pid` (see [`text_mappings`]).
pub fn text_mappings_of(pid: i32) -> ProcResult<Vec<TextMapping>> {
    Ok(text_mappings(Process::new(pid)?.maps()?))
}

/// The file-backed executable mappings (text of the executable, the loader
/// and each shared library), deleted files by their old name; `[vdso]` and
/// anonymous code (JIT) have no file to read symbols from.
pub fn text_mappings(maps: MemoryMaps) -> Vec<TextMapping> {
    maps.into_iter().filter_map(text_mapping).collect()
}

fn text_mapping(map: MemoryMap) -> Option<TextMapping> {
    if !map.perms.contains(MMPermissions::EXECUTE) {
        return None;
    }
    let MMapPath::Path(path) = map.pathname else {
        return None;
    };
    // procfs read the file as UTF-8, so every path is a String.
    let path = path.into_os_string().into_string().ok()?;
    if !path.starts_with('/') {
        return None;
    }
    let path = match path.strip_suffix(" (deleted)") {
        Some(old_name) => old_name.to_string(),
        None => path,
    };
    Some(TextMapping {
        start: map.address.0,
        end: map.address.1,
        offset: map.offset,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use procfs::FromRead;

    fn parse(text: &str) -> ProcResult<MemoryMaps> {
        MemoryMaps::from_read(text.as_bytes())
    }

    const MAPS: &str = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 00:1f 1234                      /tmp/hot prog
55d0c8a01000-55d0c8a02000 r-xp 00001000 00:1f 1234                      /tmp/hot prog
55d0c8a02000-55d0c8a03000 r--p 00002000 00:1f 1234                      /tmp/hot prog
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7ffd4a3f1000-7ffd4a412000 rw-p 00000000 00:00 0                          [stack]
";

    // What text_mapping relies on procfs for.
    #[test]
    fn procfs_reads_paths_with_spaces_and_anonymous_mappings() {
        let maps = parse(MAPS).unwrap().0;
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[1].address, (0x55d0c8a01000, 0x55d0c8a02000));
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].inode, 1234);
        assert!(maps[1].perms.contains(MMPermissions::EXECUTE));
        assert!(!maps[0].perms.contains(MMPermissions::EXECUTE));
        assert_eq!(maps[1].pathname, MMapPath::Path("/tmp/hot prog".into()));
        assert_eq!(maps[3].pathname, MMapPath::Anonymous);
        assert_eq!(maps[4].pathname, MMapPath::Stack);
        // A line the kernel would not write is an error, not skipped.
        assert!(parse("garbage line\n").is_err());
    }

    #[test]
    fn text_mappings_are_the_executable_files() {
        let maps = parse(
            "55d0c8a01000-55d0c8a02000 r-xp 00001000 00:1f 1234 /tmp/hot prog\n\
             7f0000001000-7f0000002000 r-xp 00001000 00:01 5 /lib/libc.so.6 (deleted)\n\
             7f0000003000-7f0000004000 r--p 00000000 00:01 5 /lib/libc.so.6\n\
             7f0000005000-7f0000006000 r-xp 00000000 00:00 0 \n\
             7ffd4a3f1000-7ffd4a3f2000 r-xp 00000000 00:00 0 [vdso]\n",
        )
        .unwrap();
        let text = text_mappings(maps);
        let paths: Vec<&str> = text.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(paths, ["/tmp/hot prog", "/lib/libc.so.6"]);
        assert_eq!(
            text[1],
            TextMapping {
                start: 0x7f0000001000,
                end: 0x7f0000002000,
                offset: 0x1000,
                path: "/lib/libc.so.6".into(),
            }
        );
    }
}
