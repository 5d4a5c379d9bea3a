//! `/proc/PID/maps`: where the executable and its libraries are mapped.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub inode: u64,
    pub path: Option<String>,
}

impl Mapping {
    pub fn executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

/// Parses `/proc/PID/maps`; lines that do not parse are skipped.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (word, tail) = trimmed.split_at(end);
        rest = tail;
        (!word.is_empty()).then_some(word)
    };
    let (start, end) = field()?.split_once('-')?;
    let perms = field()?.to_string();
    let offset = u64::from_str_radix(field()?, 16).ok()?;
    let _dev = field()?;
    let inode = field()?.parse().ok()?;
    let path = rest.trim_start();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset,
        inode,
        path: (!path.is_empty()).then(|| path.to_string()),
    })
}

/// The file-backed executable mappings (text of the executable, the loader
/// and each shared library), deleted files by their old name; `[vdso]` and
/// anonymous code (JIT) have no file to read symbols from.
pub fn text_mappings(maps: &[Mapping]) -> Vec<Mapping> {
    maps.iter()
        .filter(|m| m.executable() && m.path.as_deref().is_some_and(|p| p.starts_with('/')))
        .map(|m| {
            let mut m = m.clone();
            if let Some(p) = m.path.as_deref().and_then(|p| p.strip_suffix(" (deleted)")) {
                m.path = Some(p.to_string());
            }
            m
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c8a00000-55d0c8a01000 r--p 00000000 00:1f 1234                      /tmp/hot prog
55d0c8a01000-55d0c8a02000 r-xp 00001000 00:1f 1234                      /tmp/hot prog
55d0c8a02000-55d0c8a03000 r--p 00002000 00:1f 1234                      /tmp/hot prog
7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 
7ffd4a3f1000-7ffd4a412000 rw-p 00000000 00:00 0                          [stack]
garbage line
";

    #[test]
    fn parses_lines_with_spaces_in_paths_and_anonymous_ones() {
        let maps = parse_maps(MAPS);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[1].start, 0x55d0c8a01000);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(maps[1].inode, 1234);
        assert!(maps[1].executable() && !maps[0].executable());
        assert_eq!(maps[1].path.as_deref(), Some("/tmp/hot prog"));
        assert_eq!(maps[3].path, None);
        assert_eq!(maps[4].path.as_deref(), Some("[stack]"));
    }

    #[test]
    fn text_mappings_are_the_executable_files() {
        let maps = parse_maps(
            "55d0c8a01000-55d0c8a02000 r-xp 00001000 00:1f 1234 /tmp/hot prog\n\
             7f0000001000-7f0000002000 r-xp 00001000 00:01 5 /lib/libc.so.6 (deleted)\n\
             7f0000003000-7f0000004000 r--p 00000000 00:01 5 /lib/libc.so.6\n\
             7ffd4a3f1000-7ffd4a3f2000 r-xp 00000000 00:00 0 [vdso]\n",
        );
        let text = text_mappings(&maps);
        let paths: Vec<&str> = text.iter().filter_map(|m| m.path.as_deref()).collect();
        assert_eq!(paths, ["/tmp/hot prog", "/lib/libc.so.6"]);
    }
}
