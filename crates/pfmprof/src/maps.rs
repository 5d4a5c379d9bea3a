//! `/proc/PID/maps` and the load bias of an executable: where the kernel put
//! each PT_LOAD segment (PIE-aware; a non-PIE executable has bias 0).

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

/// A loadable segment of an ELF file, at link-time addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub vaddr: u64,
    pub memsz: u64,
    pub offset: u64,
    pub executable: bool,
}

/// `runtime address - link address` for the executable at `path`, from the
/// mapping of one of its executable segments: the mapping whose file offset
/// is the segment's, page aligned. None until the kernel has mapped it.
pub fn load_bias(segments: &[Segment], maps: &[Mapping], path: &str, page: u64) -> Option<u64> {
    let page_mask = !(page.max(1) - 1);
    let same_file = |m: &Mapping| {
        m.path
            .as_deref()
            .is_some_and(|p| p == path || p.strip_suffix(" (deleted)") == Some(path))
    };
    segments
        .iter()
        .filter(|s| s.executable)
        .find_map(|segment| {
            maps.iter()
                .filter(|m| same_file(m) && m.executable())
                .find(|m| m.offset == segment.offset & page_mask)
                .map(|m| m.start.wrapping_sub(segment.vaddr & page_mask))
        })
}

/// `[start, end)` spanning every executable segment, at link-time addresses.
pub fn text_span(segments: &[Segment]) -> Option<(u64, u64)> {
    let exec = segments.iter().filter(|s| s.executable && s.memsz > 0);
    let start = exec.clone().map(|s| s.vaddr).min()?;
    let end = exec.map(|s| s.vaddr + s.memsz).max()?;
    Some((start, end))
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
    fn pie_bias_is_where_the_text_segment_landed() {
        let maps = parse_maps(MAPS);
        let segments = [
            Segment {
                vaddr: 0,
                memsz: 0x6a0,
                offset: 0,
                executable: false,
            },
            Segment {
                vaddr: 0x1000,
                memsz: 0x1d5,
                offset: 0x1000,
                executable: true,
            },
        ];
        let bias = load_bias(&segments, &maps, "/tmp/hot prog", 4096).unwrap();
        assert_eq!(bias, 0x55d0c8a00000);
        assert_eq!(text_span(&segments), Some((0x1000, 0x11d5)));
        assert_eq!(load_bias(&segments, &maps, "/tmp/other", 4096), None);
    }

    #[test]
    fn non_pie_bias_is_zero_and_deleted_files_still_match() {
        let maps = parse_maps("00401000-00402000 r-xp 00001000 08:01 77 /usr/bin/x (deleted)\n");
        let segments = [Segment {
            vaddr: 0x401000,
            memsz: 0x800,
            offset: 0x1000,
            executable: true,
        }];
        assert_eq!(load_bias(&segments, &maps, "/usr/bin/x", 4096), Some(0));
    }

    #[test]
    fn unaligned_segments_use_their_page() {
        // Segment at vaddr 0x1234 file offset 0x1234: mapped from page 0x1000.
        let maps = parse_maps("7f0000001000-7f0000002000 r-xp 00001000 00:01 5 /p\n");
        let segments = [Segment {
            vaddr: 0x1234,
            memsz: 0x10,
            offset: 0x1234,
            executable: true,
        }];
        assert_eq!(
            load_bias(&segments, &maps, "/p", 4096),
            Some(0x7f0000000000)
        );
    }
}
