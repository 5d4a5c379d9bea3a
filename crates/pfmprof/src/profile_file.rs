//! The `-o FILE` format: a text header, the symbols and source lines the
//! report needs, then the raw buckets exactly as read(2) returned them.
//!
//! ```text
//! pfmprof-profile 1
//! space user                  (or kernel)
//! open all                    (all, each or one)
//! start 0x55d0c8a01000        (profiled range, run-time addresses)
//! end 0x55d0c8a021d5
//! stride 4                    (instructions of 4 bytes per bucket; 0: one bucket)
//! slots 1                     (histograms in the data: ncpus for each)
//! image /tmp/hot              (the executable, or /proc/kallsyms)
//! bias 0x55d0c8a00000         (run-time minus link-time address)
//! build-id 3f1c...            (optional)
//! program /tmp/hot -n 3
//! model ev4                   (the model pfmd emulated; optional)
//! event PF_CYCLES             (on the EV67 with its pair or statistic)
//! period 4096
//! sample-period 81920
//! interrupts 12345
//! lost 0
//! throttled 0
//! ipl 30 0 0 0 0 0 0 0 12315
//! sym 0x55d0c8a01139 0x55d0c8a01180 hot      (start, end, name: symbols of sampled buckets)
//! loc 0x55d0c8a01140 hot.c:12
//! data 7512 little            (bytes of raw buckets that follow, byte order)
//! <raw native-endian unsigned int buckets, slot after slot>
//! ```

use super::ProfError;
use super::args::{open_mode_name, open_mode_named};
use super::report::{Header, IPL_ENTRIES, Profile, Space};
use super::symbols::Symbol;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

const MAGIC: &str = "pfmprof-profile 1";

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
    let _ = writeln!(out, "start {:#x}", h.start);
    let _ = writeln!(out, "end {:#x}", h.end);
    let _ = writeln!(out, "stride {}", h.stride);
    let _ = writeln!(out, "slots {}", h.slots);
    let _ = writeln!(out, "image {}", one_line(&h.image));
    let _ = writeln!(out, "bias {:#x}", h.bias);
    if let Some(id) = &h.build_id {
        let _ = writeln!(out, "build-id {id}");
    }
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
    for s in &profile.symbols {
        let _ = writeln!(out, "sym {:#x} {:#x} {}", s.start, s.end, one_line(&s.name));
    }
    for (addr, loc) in &profile.locations {
        let _ = writeln!(out, "loc {addr:#x} {}", one_line(loc));
    }
    let _ = writeln!(out, "data {} {}", profile.buckets.len() * 4, endian());
    for b in &profile.buckets {
        out.extend_from_slice(&b.to_ne_bytes());
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

/// Parses the file's bytes; errors carry the 1-based line.
pub fn decode(bytes: &[u8]) -> Result<Profile, (usize, String)> {
    let mut fields: BTreeMap<&str, String> = BTreeMap::new();
    let mut symbols = Vec::new();
    let mut locations = BTreeMap::new();
    let mut pos = 0;
    let mut line_no = 0;
    let data = loop {
        line_no += 1;
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            return Err((line_no, "no data line".into()));
        };
        let line = std::str::from_utf8(&bytes[pos..pos + nl])
            .map_err(|_| (line_no, "not text".to_string()))?;
        pos += nl + 1;
        if line_no == 1 {
            if line != MAGIC {
                return Err((1, format!("not a pfmprof profile (want {MAGIC:?})")));
            }
            continue;
        }
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let at = |r: Result<u64, String>| r.map_err(|e| (line_no, e));
        match key {
            "sym" => {
                let mut w = value.splitn(3, ' ');
                let (Some(s), Some(e), Some(name)) = (w.next(), w.next(), w.next()) else {
                    return Err((line_no, "sym needs start end name".into()));
                };
                symbols.push(Symbol {
                    start: at(number(s))?,
                    end: at(number(e))?,
                    name: name.to_string(),
                });
            }
            "loc" => {
                let (a, loc) = value
                    .split_once(' ')
                    .ok_or((line_no, "loc needs address text".to_string()))?;
                locations.insert(at(number(a))?, loc.to_string());
            }
            "data" => {
                let (n, order) = value.split_once(' ').unwrap_or((value, endian()));
                if order != endian() {
                    return Err((
                        line_no,
                        format!("{order}-endian data on a {} host", endian()),
                    ));
                }
                break (at(number(n))? as usize, line_no);
            }
            _ => {
                fields.insert(
                    match key {
                        "space" | "open" | "start" | "end" | "stride" | "slots" | "image"
                        | "bias" | "build-id" | "program" | "model" | "event" | "period"
                        | "sample-period" | "interrupts" | "lost" | "throttled" | "ipl" => key,
                        _ => return Err((line_no, format!("unknown field {key:?}"))),
                    },
                    value.to_string(),
                );
            }
        }
    };
    let (len, data_line) = data;
    let raw = &bytes[pos..];
    if raw.len() != len || len % 4 != 0 {
        return Err((
            data_line,
            format!("data says {len} bytes, the file has {}", raw.len()),
        ));
    }
    let get = |k: &str| {
        fields
            .get(k)
            .cloned()
            .ok_or((data_line, format!("missing {k}")))
    };
    let num =
        |k: &str| get(k).and_then(|v| number(&v).map_err(|e| (data_line, format!("{k}: {e}"))));
    let space = match get("space")?.as_str() {
        "user" => Space::User,
        "kernel" => Space::Kernel,
        other => return Err((data_line, format!("space {other:?}"))),
    };
    let open = open_mode_named(&get("open")?).ok_or((data_line, "bad open mode".to_string()))?;
    let mut ipl = [0u64; IPL_ENTRIES];
    let ipl_text = get("ipl")?;
    let values: Vec<&str> = ipl_text.split_whitespace().collect();
    if values.len() != IPL_ENTRIES {
        return Err((data_line, format!("ipl needs {IPL_ENTRIES} numbers")));
    }
    for (slot, v) in ipl.iter_mut().zip(values) {
        *slot = number(v).map_err(|e| (data_line, e))?;
    }
    let header = Header {
        space,
        open,
        start: num("start")?,
        end: num("end")?,
        stride: num("stride")?,
        slots: num("slots")? as usize,
        image: get("image")?,
        bias: num("bias")?,
        build_id: fields.get("build-id").cloned(),
        program: get("program")?,
        model: fields.get("model").cloned().unwrap_or_default(),
        event: get("event")?,
        period: num("period")?,
        sample_period: num("sample-period")?,
        interrupts: num("interrupts")?,
        lost: num("lost")?,
        throttled: num("throttled")?,
        ipl,
    };
    if header.end <= header.start || (header.stride != 0 && !header.stride.is_power_of_two()) {
        return Err((data_line, "bad range or stride".into()));
    }
    let buckets: Vec<u32> = raw
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if buckets.len() != header.buckets_per_slot() * header.slots.max(1) {
        return Err((
            data_line,
            format!(
                "{} buckets, the range and stride make {} per slot x {} slots",
                buckets.len(),
                header.buckets_per_slot(),
                header.slots
            ),
        ));
    }
    Ok(Profile {
        header,
        buckets,
        symbols,
        locations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::{header, sample_profile};

    #[test]
    fn round_trip_reproduces_the_report() {
        let mut p = sample_profile();
        p.header.build_id = Some("abcd".into());
        p.header.program = "prog with\nnewline".into();
        let bytes = encode(&p);
        let back = decode(&bytes).unwrap();
        assert_eq!(back.buckets, p.buckets);
        assert_eq!(back.symbols, p.symbols);
        assert_eq!(back.locations, p.locations);
        assert_eq!(back.header.program, "prog with newline");
        p.header.program = back.header.program.clone();
        assert_eq!(back, p);
        assert_eq!(back.report().text(), p.report().text());
    }

    #[test]
    fn names_with_spaces_survive() {
        let mut p = sample_profile();
        p.symbols[0].name = "foo(int, char const*)".into();
        let back = decode(&encode(&p)).unwrap();
        assert_eq!(back.symbols[0].name, "foo(int, char const*)");
    }

    #[test]
    fn damaged_files_are_refused_with_a_line() {
        let good = encode(&sample_profile());
        assert_eq!(decode(b"something else\n").unwrap_err().0, 1);
        // Truncated data.
        let err = decode(&good[..good.len() - 1]).unwrap_err();
        assert!(err.1.contains("bytes"), "{err:?}");
        // Wrong bucket count for the range.
        let mut h = header();
        h.end = 0x1200;
        let p = Profile {
            header: h,
            buckets: vec![0; 16],
            symbols: vec![],
            locations: BTreeMap::new(),
        };
        assert!(decode(&encode(&p)).unwrap_err().1.contains("buckets"));
        let text = String::from_utf8_lossy(&good).replace("stride 4", "stride 3");
        assert!(decode(text.as_bytes()).is_err());
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
}
