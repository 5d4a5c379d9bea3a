//! The `-o FILE` format: a text header, then each profiled range (its line,
//! the symbols and source lines the report needs, then its raw buckets).
//!
//! ```text
//! pfmprof-profile 2
//! space user                  (what was asked: user, or kernel for -k)
//! open all                    (all, each or one)
//! stride 4                    (instructions of 4 bytes per bucket; 0: one bucket)
//! slots 1                     (histograms per range: ncpus for each)
//! program /tmp/hot -n 3
//! model ev4                   (the model pfmd emulated; optional)
//! event PF_CYCLES             (on the EV67 with its pair or statistic)
//! period 4096
//! sample-period 81920
//! interrupts 12345            (every interrupt of the run)
//! lost 0
//! throttled 0
//! ipl 30 0 0 0 0 0 0 0 12315
//! range user 0x55d0c8a01000 0x55d0c8a021d5 0x1000 4 4242 6100 12300 /tmp/hot
//!                             (space, start, end, file offset of start, stride, pid,
//!                              interrupts while profiled, while in the rotation, image)
//! build-id 3f1c...            (of the range above; optional)
//! sym 0x55d0c8a01139 0x55d0c8a01180 hot      (start, end, name: symbols of sampled buckets)
//! loc 0x55d0c8a01140 /src/hot.c:12
//! data 7512 little            (bytes of the range's buckets that follow, byte order)
//! <raw native-endian u64 buckets, slot after slot>
//! range ...                   (the next range)
//! ```
//!
//! Version 1 files (one range, `start`/`end`/`image`/`bias`/`build-id` in
//! the header, u32 buckets) still read: as one range profiled all the time.

use super::ProfError;
use super::args::{open_mode_name, open_mode_named};
use super::report::{Header, Profile, Range, Space};
use super::symbols::Symbol;
use pfm_abi::PFIPL_ENTRIES;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const MAGIC: &str = "pfmprof-profile 2";
const MAGIC_V1: &str = "pfmprof-profile 1";

fn endian() -> &'static str {
    if cfg!(target_endian = "little") {
        "little"
    } else {
        "big"
    }
}

/// The file's bytes.
pub fn encode(profile: &Profile) -> Vec<u8> {
    let h = &profile.header;
    let mut out = Vec::new();
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    let _ = writeln!(out, "{MAGIC}");
    let _ = writeln!(out, "space {}", h.space.name());
    let _ = writeln!(out, "open {}", open_mode_name(h.open));
    let _ = writeln!(out, "stride {}", h.stride);
    let _ = writeln!(out, "slots {}", h.slots);
    let _ = writeln!(out, "program {}", one_line(&h.program));
    if !h.model.is_empty() {
        let _ = writeln!(out, "model {}", h.model);
    }
    let _ = writeln!(out, "event {}", h.event);
    let _ = writeln!(out, "period {}", h.period);
    let _ = writeln!(out, "sample-period {}", h.sample_period);
    let _ = writeln!(out, "interrupts {}", h.interrupts);
    let _ = writeln!(out, "lost {}", h.lost);
    let _ = writeln!(out, "throttled {}", h.throttled);
    let ipl: Vec<String> = h.ipl.iter().map(u64::to_string).collect();
    let _ = writeln!(out, "ipl {}", ipl.join(" "));
    for r in &profile.ranges {
        let _ = writeln!(
            out,
            "range {} {:#x} {:#x} {:#x} {} {} {} {} {}",
            r.space.name(),
            r.start,
            r.end,
            r.offset,
            r.stride,
            r.pid,
            r.sampled,
            r.alive,
            one_line(&r.image)
        );
        if let Some(id) = &r.build_id {
            let _ = writeln!(out, "build-id {id}");
        }
        for s in &r.symbols {
            let _ = writeln!(out, "sym {:#x} {:#x} {}", s.start, s.end, one_line(&s.name));
        }
        for (addr, loc) in &r.locations {
            let _ = writeln!(out, "loc {addr:#x} {}", one_line(loc));
        }
        let _ = writeln!(out, "data {} {}", r.buckets.len() * 8, endian());
        for b in &r.buckets {
            out.extend_from_slice(&b.to_ne_bytes());
        }
    }
    out
}

pub fn write(path: &Path, profile: &Profile) -> Result<(), ProfError> {
    std::fs::write(path, encode(profile)).map_err(ProfError::io(path.display().to_string()))
}

pub fn read(path: &Path) -> Result<Profile, ProfError> {
    let bytes = std::fs::read(path).map_err(ProfError::io(path.display().to_string()))?;
    decode(&bytes).map_err(|(line, reason)| ProfError::ProfileFormat {
        path: path.to_path_buf(),
        line,
        reason,
    })
}

fn number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.map_err(|_| format!("{text:?} is not a number"))
}

type Failure = (usize, String);

/// A `range` line's range, without buckets yet.
fn range_line(value: &str) -> Result<Range, String> {
    let mut w = value.splitn(9, ' ');
    let mut next = |what: &str| w.next().ok_or(format!("range needs {what}"));
    let space = next("a space")?;
    let space = Space::named(space).ok_or(format!("space {space:?}"))?;
    let start = number(next("a start")?)?;
    let end = number(next("an end")?)?;
    let offset = number(next("a file offset")?)?;
    let stride = number(next("a stride")?)?;
    if stride != 0 && !stride.is_power_of_two() {
        return Err(format!("stride {stride}: not 0 or a power of two"));
    }
    let pid = number(next("a pid")?)? as u32;
    let sampled = number(next("its sampled interrupts")?)?;
    let alive = number(next("its interrupts in the rotation")?)?;
    let image = next("an image")?.to_string();
    if end <= start {
        return Err(format!("empty range {start:#x}-{end:#x}"));
    }
    Ok(Range {
        space,
        start,
        end,
        image,
        offset,
        stride,
        pid,
        sampled,
        alive,
        ..Range::default()
    })
}

/// Parses the file's bytes; errors carry the 1-based line.
pub fn decode(bytes: &[u8]) -> Result<Profile, Failure> {
    // Each header field with the line it was on, for the error.
    let mut fields: BTreeMap<&str, (String, usize)> = BTreeMap::new();
    if bytes.is_empty() {
        return Err((
            1,
            "an empty file, not a pfmprof profile (pfmprof -o writes one)".into(),
        ));
    }
    let mut ranges: Vec<Range> = Vec::new();
    let mut v1 = false;
    let mut pos = 0;
    let mut line_no = 0;
    // The v1 range, made from the header at its first sym, loc or data.
    let v1_range = |fields: &BTreeMap<&str, (String, usize)>, line_no| -> Result<Range, Failure> {
        let get = |k: &str| {
            fields
                .get(k)
                .map(|(v, _)| v.clone())
                .ok_or((line_no, format!("missing {k}")))
        };
        let num = |k: &str| get(k).and_then(|v| number(&v).map_err(|e| (line_no, e)));
        let mut r = range_line(&format!(
            "{} {} {} 0 {} 0 0 0 {}",
            get("space")?,
            get("start")?,
            get("end")?,
            get("stride")?,
            get("image")?
        ))
        .map_err(|e| (line_no, e))?;
        num("bias")?;
        r.build_id = fields.get("build-id").map(|(v, _)| v.clone());
        Ok(r)
    };
    while pos < bytes.len() {
        line_no += 1;
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            return Err((line_no, "a line without its end".into()));
        };
        let line = std::str::from_utf8(&bytes[pos..pos + nl])
            .map_err(|_| (line_no, "not text".to_string()))?;
        pos += nl + 1;
        if line_no == 1 {
            v1 = line == MAGIC_V1;
            if line != MAGIC && !v1 {
                return Err((1, format!("not a pfmprof profile (want {MAGIC:?})")));
            }
            continue;
        }
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let at = |r: Result<u64, String>| r.map_err(|e| (line_no, e));
        if v1 && ranges.is_empty() && matches!(key, "sym" | "loc" | "data") {
            ranges.push(v1_range(&fields, line_no)?);
        }
        let current = ranges.last_mut();
        match (key, current) {
            ("range", _) if !v1 => ranges.push(range_line(value).map_err(|e| (line_no, e))?),
            ("build-id", Some(r)) if !v1 => r.build_id = Some(value.to_string()),
            ("sym", Some(r)) => {
                let mut w = value.splitn(3, ' ');
                let (Some(s), Some(e), Some(name)) = (w.next(), w.next(), w.next()) else {
                    return Err((line_no, "sym needs start end name".into()));
                };
                r.symbols.push(Symbol {
                    start: at(number(s))?,
                    end: at(number(e))?,
                    name: name.to_string(),
                });
            }
            ("loc", Some(r)) => {
                let (a, loc) = value
                    .split_once(' ')
                    .ok_or((line_no, "loc needs address text".to_string()))?;
                r.locations.insert(at(number(a))?, loc.to_string());
            }
            ("data", Some(r)) => {
                let (n, order) = value.split_once(' ').unwrap_or((value, endian()));
                if order != endian() {
                    return Err((
                        line_no,
                        format!("{order}-endian data on a {} host", endian()),
                    ));
                }
                let len = at(number(n))? as usize;
                let width = if v1 { 4 } else { 8 };
                let raw = bytes.get(pos..pos.saturating_add(len)).ok_or((
                    line_no,
                    format!("data says {len} bytes, the file has {}", bytes.len() - pos),
                ))?;
                if !len.is_multiple_of(width) || (v1 && pos + len != bytes.len()) {
                    return Err((
                        line_no,
                        format!("data says {len} bytes, the file has {}", bytes.len() - pos),
                    ));
                }
                r.buckets = if v1 {
                    raw.chunks_exact(4)
                        .map(|c| u64::from(u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
                        .collect()
                } else {
                    raw.chunks_exact(8)
                        .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect()
                };
                pos += len;
            }
            (
                "space" | "open" | "stride" | "slots" | "program" | "model" | "event" | "period"
                | "sample-period" | "interrupts" | "lost" | "throttled" | "ipl",
                None,
            ) => {
                fields.insert(key, (value.to_string(), line_no));
            }
            ("start" | "end" | "image" | "bias" | "build-id", None) if v1 => {
                fields.insert(key, (value.to_string(), line_no));
            }
            _ => return Err((line_no, format!("unexpected {key:?} here"))),
        }
    }
    // A field's line, or the end for one that is missing.
    let line = |k: &str| fields.get(k).map_or(line_no, |(_, l)| *l);
    let get = |k: &str| {
        fields
            .get(k)
            .map(|(v, _)| v.clone())
            .ok_or((line_no, format!("missing {k}")))
    };
    let num = |k: &str| get(k).and_then(|v| number(&v).map_err(|e| (line(k), format!("{k}: {e}"))));
    let space = get("space")?;
    let space = Space::named(&space).ok_or((line("space"), format!("space {space:?}")))?;
    let open = open_mode_named(&get("open")?).ok_or((line("open"), "bad open mode".to_string()))?;
    let mut ipl = [0u64; PFIPL_ENTRIES];
    let ipl_text = get("ipl")?;
    let values: Vec<&str> = ipl_text.split_whitespace().collect();
    if values.len() != PFIPL_ENTRIES {
        return Err((line("ipl"), format!("ipl needs {PFIPL_ENTRIES} numbers")));
    }
    for (slot, v) in ipl.iter_mut().zip(values) {
        *slot = number(v).map_err(|e| (line("ipl"), e))?;
    }
    let header = Header {
        space,
        open,
        stride: num("stride")?,
        slots: num("slots")? as usize,
        program: get("program")?,
        model: fields
            .get("model")
            .map(|(v, _)| v.clone())
            .unwrap_or_default(),
        event: get("event")?,
        period: num("period")?,
        sample_period: num("sample-period")?,
        interrupts: num("interrupts")?,
        lost: num("lost")?,
        throttled: num("throttled")?,
        ipl,
    };
    if header.stride != 0 && !header.stride.is_power_of_two() {
        return Err((line("stride"), "bad stride: not 0 or a power of two".into()));
    }
    if header.period == 0 {
        return Err((
            line("period"),
            "period 0: a counter interrupts every 1 event at least".into(),
        ));
    }
    for r in &mut ranges {
        if v1 {
            (r.sampled, r.alive) = (header.interrupts, header.interrupts);
        }
        let want = r.buckets_per_slot() * header.slots.max(1);
        if r.buckets.len() != want {
            return Err((
                line_no,
                format!(
                    "{} buckets in range {:#x}-{:#x}; the range and stride make {} per slot x {} slots",
                    r.buckets.len(),
                    r.start,
                    r.end,
                    r.buckets_per_slot(),
                    header.slots
                ),
            ));
        }
    }
    Ok(Profile { header, ranges })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{range, sample_profile};

    #[test]
    fn round_trip_reproduces_the_report() {
        let mut p = sample_profile();
        p.ranges[0].build_id = Some("abcd".into());
        p.header.program = "prog with\nnewline".into();
        let mut lib = range(vec![1; 16]);
        lib.image = "/lib/libc.so.6".into();
        lib.sampled = 10;
        p.ranges.push(lib);
        let bytes = encode(&p);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.ranges, p.ranges);
        assert_eq!(back.header.program, "prog with newline");
        p.header.program = back.header.program.clone();
        assert_eq!(back, p);
        assert_eq!(back.report().text(), p.report().text());
    }

    #[test]
    fn names_with_spaces_survive() {
        let mut p = sample_profile();
        p.ranges[0].symbols[0].name = "foo(int, char const*)".into();
        let back = decode(&encode(&p)).unwrap();
        assert_eq!(back.ranges[0].symbols[0].name, "foo(int, char const*)");
    }

    #[test]
    fn damaged_files_are_refused_with_a_line() {
        let good = encode(&sample_profile());
        assert_eq!(decode(b"something else\n").unwrap_err().0, 1);
        // Truncated data.
        let err = decode(&good[..good.len() - 1]).unwrap_err();
        assert!(err.1.contains("bytes"), "{err:?}");
        // Wrong bucket count for the range.
        let mut p = sample_profile();
        p.ranges[0].end = 0x1200;
        assert!(decode(&encode(&p)).unwrap_err().1.contains("buckets"));
        // A bad header field names its own line (it named the last).
        let text = String::from_utf8_lossy(&good).replace("stride 4\n", "stride 3\n");
        let stride_line = text.lines().position(|l| l == "stride 3").unwrap() + 1;
        assert_eq!(decode(text.as_bytes()).unwrap_err().0, stride_line);
        let text = String::from_utf8_lossy(&good).replace("\nperiod 4096\n", "\nperiod 0\n");
        assert!(decode(text.as_bytes()).unwrap_err().1.contains("period 0"));
        let empty = decode(b"").unwrap_err();
        assert_eq!(empty.0, 1);
        assert!(empty.1.contains("empty file"), "{}", empty.1);
        let text = String::from_utf8_lossy(&good).replace("lost 0\n", "");
        assert!(decode(text.as_bytes()).unwrap_err().1.contains("lost"));
    }

    #[test]
    fn files_without_a_model_line_still_read() {
        let mut p = sample_profile();
        p.header.model = String::new();
        let bytes = encode(&p);
        assert!(!String::from_utf8_lossy(&bytes).contains("\nmodel "));
        let back = decode(&bytes).unwrap();
        assert_eq!(back.header.model, "");
        assert!(!back.report().json().contains("\"model\""));
        let mut p = sample_profile();
        p.header.model = "ev67".into();
        p.header.event = "PF67_PM_RETIRE (profile-me, sampled on PF67_C0_CYCLES)".into();
        assert_eq!(decode(&encode(&p)).unwrap(), p);
    }

    #[test]
    fn version_1_files_read_as_one_range() {
        let mut v1 = b"pfmprof-profile 1\nspace user\nopen all\nstart 0x1000\nend 0x1100\n\
stride 4\nslots 1\nimage /bin/prog\nbias 0x0\nprogram prog\nmodel ev4\nevent PF_CYCLES\n\
period 4096\nsample-period 81920\ninterrupts 100\nlost 0\nthrottled 0\n\
ipl 5 0 0 0 0 0 0 0 95\nsym 0x1040 0x10c0 hot\nloc 0x1040 hot.c:7\ndata 64 "
            .to_vec();
        v1.extend_from_slice(endian().as_bytes());
        v1.push(b'\n');
        let mut buckets = [0u32; 16];
        buckets[4] = 80;
        for b in buckets {
            v1.extend_from_slice(&b.to_ne_bytes());
        }
        let p = decode(&v1).unwrap();
        assert_eq!(p.ranges.len(), 1);
        let r = p.report();
        assert_eq!(r.functions[0].name, "hot");
        assert_eq!(r.functions[0].samples, 80);
        assert_eq!(r.outside, 20);
    }
}
