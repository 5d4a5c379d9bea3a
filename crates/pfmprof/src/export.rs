//! A report in the formats other profilers' tools read: folded stacks (one
//! `frame;frame count` line each, what flame-graph tools take), pprof's
//! protobuf (`go tool pprof`, speedscope; the message types are declared
//! here with prost's derive, no protoc), and a flame graph SVG drawn by
//! inferno from the folded lines.
//!
//! The device profiles PCs, not stacks: a stack is the program and the
//! function (`prog;func`). Interrupts that fell outside every profiled range
//! get a frame of their own, as do those of samples the kernel lost, so every
//! format sums to all interrupts.

use crate::ProfError;
use crate::args::{Format, Show};
use crate::report::Report;
use prost::Message;
use std::io::Write;

/// Writes `report` as `show` says: its format, to its file or to standard
/// output.
pub fn show(report: &Report, show: &Show) -> Result<(), ProfError> {
    let bytes = match show.format {
        Format::Text => report.text().into_bytes(),
        Format::Json => report.json().into_bytes(),
        Format::Folded => folded(report).into_bytes(),
        Format::Pprof => pprof(report),
        Format::Svg => svg(report).map_err(ProfError::Program)?,
    };
    match &show.to {
        Some(path) => {
            std::fs::write(path, bytes).map_err(ProfError::io(path.display().to_string()))
        }
        // A reader that stopped early (`| head`) took what it wanted.
        None => match std::io::stdout().lock().write_all(&bytes) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(ProfError::io("standard output")(e))
            }
            _ => Ok(()),
        },
    }
}

/// The frames for interrupts outside the profiled ranges and for those of
/// samples the kernel lost.
pub use crate::report::{LOST, OUTSIDE};

/// Every (stack, interrupts) of the report, the lost and outside frames
/// last.
fn stacks(report: &Report) -> Vec<(Vec<String>, u64)> {
    let program = report.program.clone();
    let mut out: Vec<(Vec<String>, u64)> = report
        .functions
        .iter()
        .filter(|row| row.samples > 0)
        .map(|row| (vec![program.clone(), row.name.clone()], row.samples))
        .collect();
    for (frame, interrupts) in [(LOST, report.lost), (OUTSIDE, report.outside)] {
        if interrupts > 0 {
            out.push((vec![program.clone(), frame.to_string()], interrupts));
        }
    }
    out
}

/// Folded stacks: `program;function interrupts`, one line each.
pub fn folded(report: &Report) -> String {
    stacks(report)
        .into_iter()
        .map(|(frames, count)| {
            // A `;` or a space inside a name would split it.
            let frames: Vec<String> = frames.iter().map(|f| f.replace([';', ' '], "_")).collect();
            format!("{} {count}\n", frames.join(";"))
        })
        .collect()
}

/// A flame graph of the folded stacks, as SVG.
pub fn svg(report: &Report) -> Result<Vec<u8>, String> {
    let folded = folded(report);
    let mut options = inferno::flamegraph::Options::default();
    options.title = format!("pfmprof: {} ({})", report.program, report.event);
    options.count_name = "interrupts".into();
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut out)
        .map_err(|e| format!("drawing the flame graph: {e}"))?;
    Ok(out)
}

/// The report as a pprof `Profile` (uncompressed protobuf: pprof and
/// speedscope read it as it is, or gzipped).
pub fn pprof(report: &Report) -> Vec<u8> {
    let mut strings = Strings::default();
    strings.id(""); // index 0 is the empty string
    let sample_type = vec![
        ValueType {
            r#type: strings.id("interrupts"),
            unit: strings.id("count"),
        },
        ValueType {
            r#type: strings.id(&report.event),
            unit: strings.id("events"),
        },
    ];
    let mut functions = Vec::new();
    let mut locations = Vec::new();
    let mut samples = Vec::new();
    for (frames, count) in stacks(report) {
        // One location per frame, leaf first as pprof wants.
        let mut location_ids = Vec::new();
        for name in frames.iter().rev() {
            let id = functions.len() as u64 + 1;
            functions.push(Function {
                id,
                name: strings.id(name),
                system_name: strings.id(name),
                filename: 0,
                start_line: 0,
            });
            locations.push(Location {
                id,
                mapping_id: 0,
                address: 0,
                line: vec![Line {
                    function_id: id,
                    line: 0,
                }],
                is_folded: false,
            });
            location_ids.push(id);
        }
        samples.push(Sample {
            location_id: location_ids,
            value: vec![count as i64, (count * report.period) as i64],
            label: Vec::new(),
        });
    }
    let period_type = sample_type.first().cloned();
    Profile {
        sample_type,
        sample: samples,
        mapping: Vec::new(),
        location: locations,
        function: functions,
        string_table: strings.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: 0,
        duration_nanos: 0,
        period_type,
        period: report.period as i64,
        comment: Vec::new(),
        default_sample_type: 0,
    }
    .encode_to_vec()
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        match self.table.iter().position(|t| t == s) {
            Some(i) => i as i64,
            None => {
                self.table.push(s.to_string());
                self.table.len() as i64 - 1
            }
        }
    }
}

// pprof's profile.proto (github.com/google/pprof/proto/profile.proto), the
// fields pfmprof fills, with their tag numbers.

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_profile;

    fn report() -> Report {
        let mut p = sample_profile();
        // Interrupts outside the range get a frame of their own, and those
        // of lost samples another (one sample of 20 here).
        p.header.interrupts = 93 + 20 + 7;
        p.header.lost = 1;
        let report = p.report();
        assert_eq!((report.lost, report.outside), (20, 7));
        report
    }

    #[test]
    fn folded_lines_sum_to_every_interrupt() {
        let report = report();
        let text = folded(&report);
        let mut total = 0;
        for line in text.lines() {
            let (stack, count) = line.rsplit_once(' ').unwrap();
            assert!(stack.starts_with(&format!("{};", report.program)), "{line}");
            assert_eq!(stack.matches(';').count(), 1, "{line}");
            total += count.parse::<u64>().unwrap();
        }
        assert_eq!(total, report.interrupts, "{text}");
        assert!(
            text.contains(&format!("{}_the_profiled_ranges] 7", "[outside")),
            "{text}"
        );
        assert!(text.contains(";[samples_the_kernel_lost] 20"), "{text}");
    }

    #[test]
    fn pprof_decodes_to_the_report() {
        let report = report();
        let profile = Profile::decode(pprof(&report).as_slice()).unwrap();
        let name = |id: i64| profile.string_table[id as usize].as_str();
        assert_eq!(profile.string_table[0], "");
        assert_eq!(name(profile.sample_type[0].r#type), "interrupts");
        assert_eq!(name(profile.sample_type[1].r#type), report.event);
        let total: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
        assert_eq!(total as u64, report.interrupts);
        // Each sample's leaf is a function of the report.
        for sample in &profile.sample {
            let leaf = &profile.location[sample.location_id[0] as usize - 1];
            let function = &profile.function[leaf.line[0].function_id as usize - 1];
            let leaf_name = name(function.name);
            assert!(
                [OUTSIDE, LOST].contains(&leaf_name)
                    || report.functions.iter().any(|r| r.name == leaf_name),
                "{leaf_name}"
            );
            assert_eq!(sample.value[1], sample.value[0] * report.period as i64);
        }
        assert_eq!(profile.period, report.period as i64);
    }

    #[test]
    fn the_flame_graph_is_svg_with_every_function() {
        let report = report();
        let svg = String::from_utf8(svg(&report).unwrap()).unwrap();
        let mut reader = quick_xml::Reader::from_str(&svg);
        let mut titles = Vec::new();
        let mut in_title = false;
        loop {
            match reader.read_event().expect("well-formed SVG") {
                quick_xml::events::Event::Start(e) if e.name().as_ref() == "title" => {
                    in_title = true
                }
                quick_xml::events::Event::Text(t) if in_title => {
                    titles.push(t.to_string());
                    in_title = false;
                }
                quick_xml::events::Event::Eof => break,
                _ => {}
            }
        }
        for row in report.functions.iter().filter(|r| r.samples > 0) {
            assert!(
                titles.iter().any(|t| t.starts_with(&row.name)),
                "{} not drawn: {titles:?}",
                row.name
            );
        }
    }
}
