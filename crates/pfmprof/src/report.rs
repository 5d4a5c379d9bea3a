//! From buckets to a report. The device profiles one address range per open
//! and only one open may hold the device, so pfmprof profiles several ranges
//! (the executable, each shared library, the kernel) *in turn* on one open:
//! each [`Range`] was sampled during some windows of the run (`sampled`
//! interrupts) out of the time it was in the rotation (`alive` interrupts),
//! and its bucket counts are scaled by `alive / sampled` to estimate its
//! share of the whole run, as perf scales multiplexed counters.
//!
//! Each bucket's count is charged to the function containing the bucket's
//! first address; functions are sorted by samples, descending, and their
//! percentages are of **every** interrupt of the run (user and kernel,
//! inside a range or not); what fell outside every range is a row of its
//! own. A [`Profile`] carries everything the report needs (the symbols that
//! cover a sampled bucket and the source line of each sampled bucket), so
//! `pfmprof --report FILE` prints the same report without the binaries.

use super::args::open_mode_name;
use super::symbolize::short_location;
use super::symbols::{Symbol, SymbolTable};
use pfm_client::OpenMode;
use serde::Serialize;
use std::collections::BTreeMap;

use pfm_abi::{PFIPL_DEVICE, PFIPL_ENTRIES, PFIPL_IDLE, PFIPL_KERNEL, PFIPL_USER};

/// The text report's lines are at most this wide.
const WIDTH: usize = 100;
/// Bytes between the addresses resolved in a bucket (x86-64 compilers
/// start functions on 16-byte boundaries), and the most resolved in one.
const PROBE: u64 = 16;
const MAX_PROBES: u64 = 64;

/// The row for interrupts no range held.
pub const OUTSIDE: &str = "[outside the profiled ranges]";
/// The row for the interrupts of samples the kernel lost (its ring full):
/// their IPs are unknown, so they are in no range and not outside either.
pub const LOST: &str = "[samples the kernel lost]";

/// User or kernel text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Space {
    #[default]
    User,
    Kernel,
}

impl Space {
    pub fn name(self) -> &'static str {
        match self {
            Space::User => "user",
            Space::Kernel => "kernel",
        }
    }

    pub fn named(name: &str) -> Option<Space> {
        match name {
            "user" => Some(Space::User),
            "kernel" => Some(Space::Kernel),
            _ => None,
        }
    }
}

/// What was profiled and what the device said about the whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// What was asked: user (uprofile, with the kernel range where allowed)
    /// or kernel (`-k`, kprofile).
    pub space: Space,
    pub open: OpenMode,
    pub stride: u64,
    /// Histograms per range: 1, or one per CPU for EACH.
    pub slots: usize,
    pub program: String,
    /// The model pfmd emulated (`ev5`); empty in files from before it was
    /// recorded.
    pub model: String,
    /// What was sampled: the event, and on the EV67 its pair or profile-me
    /// statistic.
    pub event: String,
    /// Events per interrupt.
    pub period: u64,
    /// Events per sample (PCNTGETINFO pi_sample_period): each sample counts
    /// `sample_period / period` interrupts.
    pub sample_period: u64,
    /// The counter's interrupt count over the run (PCNTGETCNT): every
    /// sample, in any range or none.
    pub interrupts: u64,
    pub lost: u64,
    pub throttled: u64,
    /// IPL histogram summed over CPUs (PCNTGETIPLHIS).
    pub ipl: [u64; PFIPL_ENTRIES],
}

impl Header {
    pub fn bucket_bytes(&self) -> u64 {
        self.stride * 4
    }
}

/// One profiled range and what it collected (`Default`: nothing yet).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Range {
    pub space: Space,
    /// Run-time addresses.
    pub start: u64,
    pub end: u64,
    /// The file mapped there, or `/proc/kallsyms`.
    pub image: String,
    /// File offset of `start` (0 for the kernel).
    pub offset: u64,
    /// Its own stride: the user's, or for the kernel range of a user
    /// profile a coarser one (see [`crate::rotation`]).
    pub stride: u64,
    pub build_id: Option<String>,
    /// The process whose map gave the range (0 for the kernel).
    pub pid: u32,
    /// Interrupts of the run while this range was the one profiled.
    pub sampled: u64,
    /// Interrupts of the run while this range was in the rotation.
    pub alive: u64,
    /// Slots one after another, summed over the range's windows.
    pub buckets: Vec<u64>,
    /// Symbols covering sampled buckets, at run-time addresses.
    pub symbols: Vec<Symbol>,
    /// Source locations (`/dir/file.c:12`) of sampled buckets.
    pub locations: BTreeMap<u64, String>,
}

impl Range {
    pub fn buckets_per_slot(&self) -> usize {
        let stride = self.stride;
        if stride == 0 {
            1
        } else {
            (self.end - self.start).div_ceil(stride * 4) as usize
        }
    }

    /// First address of bucket `i`.
    pub fn bucket_address(&self, i: usize) -> u64 {
        self.start + i as u64 * self.stride * 4
    }

    /// `alive / sampled`: what one of its samples stands for in the run.
    pub fn scale(&self) -> f64 {
        if self.sampled == 0 || self.alive <= self.sampled {
            1.0
        } else {
            self.alive as f64 / self.sampled as f64
        }
    }

    /// Buckets summed over slots.
    pub fn summed(&self) -> Vec<u64> {
        let n = self.buckets_per_slot();
        let mut sum = vec![0u64; n];
        for slot in self.buckets.chunks(n.max(1)) {
            for (s, &b) in sum.iter_mut().zip(slot) {
                *s += b;
            }
        }
        sum
    }

    /// The name of the range's module in the report.
    pub fn module(&self) -> String {
        match self.space {
            Space::Kernel => "[kernel]".to_string(),
            Space::User => self
                .image
                .rsplit('/')
                .next()
                .unwrap_or(&self.image)
                .to_string(),
        }
    }

    /// Resolves the symbols of each sampled bucket with `resolve` and keeps
    /// the source line of each sampled bucket's first address (`resolve`
    /// takes run-time addresses, all at once, and answers each). A bucket
    /// wider than [`PROBE`] bytes is probed every `PROBE` bytes (at most
    /// [`MAX_PROBES`] times), so that the functions that start inside it
    /// are known too ([`straddle`]).
    pub fn resolve(
        &mut self,
        resolve: impl FnOnce(&[u64]) -> Vec<Option<crate::symbolize::Resolved>>,
    ) {
        if self.stride == 0 {
            return;
        }
        let bytes = self.stride.saturating_mul(4);
        let step = PROBE.max(bytes.div_ceil(MAX_PROBES));
        let starts: Vec<u64> = self
            .summed()
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, _)| self.bucket_address(i))
            .collect();
        let addrs: Vec<u64> = starts
            .iter()
            .flat_map(|&start| (0..bytes).step_by(step as usize).map(move |o| start + o))
            .collect();
        let mut last: Option<(u64, u64)> = None;
        for (addr, answer) in addrs.iter().zip(resolve(&addrs)) {
            let Some(r) = answer else { continue };
            if let Some(location) = r.location
                && starts.binary_search(addr).is_ok()
            {
                self.locations.insert(*addr, location);
            }
            // Buckets ascend: a symbol already kept covers the next ones.
            if last.is_some_and(|(s, e)| (s..e).contains(addr)) {
                continue;
            }
            let end = if r.symbol.end > r.symbol.start {
                r.symbol.end
            } else {
                addr + 1
            };
            last = Some((r.symbol.start, end));
            self.symbols.push(r.symbol);
        }
    }
}

/// Everything a report is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub header: Header,
    pub ranges: Vec<Range>,
}

/// Whose bucket `i` (at `addr`, `bytes` long) is: the function at its first
/// address, unless another function starts inside it (x86 functions need not
/// start on a bucket boundary). Then the count is split between the first
/// and the last that starts inside it (at coarse strides a bucket holds
/// several) by the samples of the neighbouring buckets, each counted only
/// for the function that runs on into it: the samples of a bucket that
/// holds the tail of a cold function and the entry of a hot one are the hot
/// one's. Where neither runs on into a neighbour, nothing tells them apart:
/// the bucket is charged to them together, named `first..last`.
fn straddle(
    table: &SymbolTable,
    summed: &[u64],
    i: usize,
    addr: u64,
    bytes: u64,
) -> Vec<(String, f64)> {
    let unknown = || "[unknown]".to_string();
    let end = addr + bytes.max(1);
    let first = table.lookup(addr);
    let last = table
        .last_starting_in(addr, end)
        .or_else(|| table.lookup(end - 1));
    let (Some(a), Some(b)) = (first, last) else {
        return vec![(first.or(last).map_or_else(unknown, |s| s.name.clone()), 1.0)];
    };
    if a.start == b.start {
        return vec![(a.name.clone(), 1.0)];
    }
    let before = match a.start < addr {
        true => i.checked_sub(1).map_or(0, |j| summed[j]) as f64,
        false => 0.0,
    };
    let after = match b.end > end {
        true => summed.get(i + 1).copied().unwrap_or(0) as f64,
        false => 0.0,
    };
    if before + after == 0.0 {
        return vec![(format!("{}..{}", a.name, b.name), 1.0)];
    }
    let to_a = before / (before + after);
    vec![(a.name.clone(), to_a), (b.name.clone(), 1.0 - to_a)]
}

struct RawRow {
    name: String,
    module: String,
    samples: f64,
    hottest: u64,
    hottest_count: u64,
    hottest_range: usize,
}

impl Profile {
    /// What each of `space`'s ranges' samples count for: the range's scale
    /// (its time in the rotation over its windows), fitted within the ticks
    /// the IPL histogram counted in that mode. Those cover the whole run
    /// (within about 1 %, pfm(7)), and the ranges profiled in turn can
    /// overshoot them: a user program's kernel rows once came to 2-3x the
    /// kernel interrupts of the same report.
    fn range_scale(&self, range: &Range) -> f64 {
        let ipl = &self.header.ipl;
        let counted = match range.space {
            Space::User => ipl[PFIPL_USER],
            Space::Kernel => ipl[PFIPL_KERNEL] + ipl[PFIPL_DEVICE],
        } as f64;
        let estimate: f64 = self
            .ranges
            .iter()
            .filter(|r| r.space == range.space)
            .map(|r| r.buckets.iter().sum::<u64>() as f64 * r.scale())
            .sum();
        let fit = if ipl.iter().any(|&n| n > 0) && estimate > counted {
            counted / estimate
        } else {
            1.0
        };
        range.scale() * fit
    }

    /// Functions (by name and module) with their estimated samples, sorted
    /// descending (ties by name).
    fn rows(&self) -> Vec<RawRow> {
        let mut by_name: BTreeMap<(String, String), RawRow> = BTreeMap::new();
        for (r, range) in self.ranges.iter().enumerate() {
            let module = range.module();
            let scale = self.range_scale(range);
            let summed = range.summed();
            let table = SymbolTable::new(range.symbols.clone(), range.end);
            for (i, &count) in summed.iter().enumerate().filter(|(_, c)| **c > 0) {
                let addr = range.bucket_address(i);
                let shares = if range.stride == 0 {
                    vec![(format!("[range {:#x}-{:#x}]", range.start, range.end), 1.0)]
                } else {
                    straddle(&table, &summed, i, addr, range.stride * 4)
                };
                for (name, share) in shares.into_iter().filter(|(_, s)| *s > 0.0) {
                    let row = by_name
                        .entry((name.clone(), module.clone()))
                        .or_insert(RawRow {
                            name,
                            module: module.clone(),
                            samples: 0.0,
                            hottest: addr,
                            hottest_count: 0,
                            hottest_range: r,
                        });
                    row.samples += count as f64 * scale * share;
                    if count > row.hottest_count {
                        (row.hottest, row.hottest_count, row.hottest_range) = (addr, count, r);
                    }
                }
            }
        }
        let mut rows: Vec<RawRow> = by_name.into_values().collect();
        rows.sort_by(|a, b| {
            b.samples
                .total_cmp(&a.samples)
                .then_with(|| a.name.cmp(&b.name))
        });
        rows
    }

    pub fn report(&self) -> Report {
        self.report_annotating(None)
    }

    /// The report, with the per-line annotation of `function` if given.
    pub fn report_annotating(&self, function: Option<&str>) -> Report {
        let h = &self.header;
        let rows = self.rows();
        // Scaled estimates can overshoot the count a little: then they are
        // scaled down to it (every format sums to the interrupts).
        let estimated = rows.iter().map(|r| r.samples).sum::<f64>();
        let fit = if h.interrupts > 0 && estimated > h.interrupts as f64 {
            h.interrupts as f64 / estimated
        } else {
            1.0
        };
        let mut counts: Vec<u64> = rows
            .iter()
            .map(|r| (r.samples * fit).round() as u64)
            .collect();
        let mut profiled: u64 = counts.iter().sum();
        if h.interrupts > 0 && profiled > h.interrupts {
            // Rounding: the top row gives back the excess.
            counts[0] -= (profiled - h.interrupts).min(counts[0]);
            profiled = counts.iter().sum();
        }
        let weight = h.sample_period.checked_div(h.period).unwrap_or(0);
        let lost = h
            .lost
            .saturating_mul(weight)
            .min(h.interrupts.saturating_sub(profiled));
        let outside = h.interrupts.saturating_sub(profiled + lost);
        let total = h.interrupts.max(profiled);
        let mut cumulative = 0.0;
        let functions: Vec<Row> = rows
            .into_iter()
            .zip(counts)
            .map(|(r, samples)| {
                let percent = percent(samples, total);
                cumulative += percent;
                Row {
                    location: self.ranges[r.hottest_range]
                        .locations
                        .get(&r.hottest)
                        .map(|l| short_location(l).to_string()),
                    name: r.name,
                    module: r.module,
                    samples,
                    percent,
                    cumulative,
                    address: format!("{:#x}", r.hottest),
                }
            })
            .collect();
        // The headline is the function's row(s): the top row may have given
        // back a sample to rounding, which the lines' own sum does not see.
        let annotation = function.map(|f| {
            let mut annotation = self.annotate(f, total, fit);
            annotation.samples = functions
                .iter()
                .filter(|r| r.name == f)
                .map(|r| r.samples)
                .sum();
            annotation.percent = percent(annotation.samples, total);
            annotation
        });
        let first = self.ranges.first();
        let stride = h.stride;
        let mut per_cpu = Vec::new();
        if h.slots > 1 {
            per_cpu = vec![0.0f64; h.slots];
            for range in &self.ranges {
                let n = range.buckets_per_slot().max(1);
                let scale = self.range_scale(range) * fit;
                for (cpu, slot) in range.buckets.chunks(n).enumerate() {
                    if let Some(sum) = per_cpu.get_mut(cpu) {
                        *sum += slot.iter().sum::<u64>() as f64 * scale;
                    }
                }
            }
        }
        Report {
            version: REPORT_VERSION,
            program: h.program.clone(),
            space: h.space.name(),
            open: open_mode_name(h.open),
            image: first.map(|r| r.image.clone()).unwrap_or_default(),
            start: format!("{:#x}", first.map_or(0, |r| r.start)),
            end: format!("{:#x}", first.map_or(0, |r| r.end)),
            stride,
            bucket_bytes: h.bucket_bytes(),
            buckets: first.map_or(0, |r| r.buckets_per_slot()),
            model: h.model.clone(),
            event: h.event.clone(),
            period: h.period,
            sample_period: h.sample_period,
            weight,
            interrupts: h.interrupts,
            profiled,
            outside,
            outside_percent: percent(outside, total),
            lost_samples: h.lost,
            lost,
            lost_percent: percent(lost, total),
            throttled: h.throttled,
            ipl: h.ipl,
            per_cpu: per_cpu.iter().map(|v| v.round() as u64).collect(),
            ranges: self
                .ranges
                .iter()
                .map(|r| RangeRow {
                    space: r.space.name(),
                    image: r.image.clone(),
                    pid: r.pid,
                    start: format!("{:#x}", r.start),
                    end: format!("{:#x}", r.end),
                    stride: r.stride,
                    sampled: r.sampled,
                    alive: r.alive,
                    samples: (r.buckets.iter().sum::<u64>() as f64 * self.range_scale(r) * fit)
                        .round() as u64,
                })
                .collect(),
            functions,
            annotation,
        }
    }

    /// Samples of `function` by source line (from the locations of its
    /// sampled buckets), in file and line order, scaled as its row is
    /// (`fit`: the scale-down of the estimates to the interrupt count).
    fn annotate(&self, function: &str, total: u64, fit: f64) -> Annotation {
        let mut lines: BTreeMap<(String, u32), f64> = BTreeMap::new();
        let mut samples = 0.0;
        let mut without_line = 0.0;
        for range in &self.ranges {
            if range.stride == 0 {
                continue;
            }
            let table = SymbolTable::new(range.symbols.clone(), range.end);
            let scale = self.range_scale(range) * fit;
            let summed = range.summed();
            for (i, &count) in summed.iter().enumerate() {
                let addr = range.bucket_address(i);
                if count == 0 {
                    continue;
                }
                let share: f64 = straddle(&table, &summed, i, addr, range.stride * 4)
                    .into_iter()
                    .filter(|(name, _)| name == function)
                    .map(|(_, s)| s)
                    .sum();
                if share == 0.0 {
                    continue;
                }
                let weight = count as f64 * scale * share;
                samples += weight;
                let parsed = range.locations.get(&addr).and_then(|l| {
                    let (file, line) = l.rsplit_once(':')?;
                    Some((file.to_string(), line.parse().ok()?))
                });
                match parsed {
                    Some(key) => *lines.entry(key).or_insert(0.0) += weight,
                    None => without_line += weight,
                }
            }
        }
        let in_function = samples.round() as u64;
        Annotation {
            function: function.to_string(),
            samples: in_function,
            percent: percent(in_function, total),
            without_line: without_line.round() as u64,
            lines: lines
                .into_iter()
                .map(|((file, line), n)| {
                    let n = n.round() as u64;
                    AnnotatedLine {
                        file,
                        line,
                        samples: n,
                        percent: percent(n, in_function),
                    }
                })
                .collect(),
        }
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// One function of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    pub name: String,
    /// The executable or library it is in (its file name), or `[kernel]`.
    pub module: String,
    /// Interrupts charged to it (bucket counts, scaled to the whole run).
    pub samples: u64,
    /// Of every interrupt of the run.
    pub percent: f64,
    pub cumulative: f64,
    /// Its hottest bucket's first address (run time).
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// One profiled range of the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RangeRow {
    pub space: &'static str,
    pub image: String,
    pub pid: u32,
    pub start: String,
    pub end: String,
    /// Its own stride (a kernel range in a user profile has a coarser one).
    pub stride: u64,
    /// Interrupts while it was the range profiled.
    pub sampled: u64,
    /// Interrupts while it was in the rotation.
    pub alive: u64,
    /// Its samples, scaled by alive / sampled.
    pub samples: u64,
}

/// `--annotate FUNC`: a function's samples by source line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Annotation {
    pub function: String,
    pub samples: u64,
    /// Of every interrupt of the run.
    pub percent: f64,
    /// Samples of buckets DWARF gives no line for.
    pub without_line: u64,
    pub lines: Vec<AnnotatedLine>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnnotatedLine {
    pub file: String,
    pub line: u32,
    pub samples: u64,
    /// Of the function's samples.
    pub percent: f64,
}

/// The JSON report's `version`: raised when a field changes meaning or goes.
/// 2: percentages are of every interrupt of the run (1: of the samples in
/// the executable's range); `ranges`, `outside`, `module` added.
/// 3: `lost` and `lost_percent` added, and no longer part of `outside`.
pub const REPORT_VERSION: u32 = 3;

/// The report, as text or JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The JSON schema's version (pfmprof(1)).
    pub version: u32,
    pub program: String,
    pub space: &'static str,
    pub open: &'static str,
    /// The first range (the executable, or the kernel for -k).
    pub image: String,
    pub start: String,
    pub end: String,
    pub stride: u64,
    pub bucket_bytes: u64,
    /// Buckets per slot of the first range.
    pub buckets: usize,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model: String,
    pub event: String,
    pub period: u64,
    pub sample_period: u64,
    /// Interrupts each sample counts.
    pub weight: u64,
    /// Every interrupt of the run.
    pub interrupts: u64,
    /// Interrupts that landed in the profiled ranges (scaled estimates).
    pub profiled: u64,
    /// `interrupts - profiled - lost`: outside every range.
    pub outside: u64,
    pub outside_percent: f64,
    pub lost_samples: u64,
    /// Interrupts of the lost samples (`lost_samples * weight`).
    pub lost: u64,
    pub lost_percent: f64,
    pub throttled: u64,
    pub ipl: [u64; PFIPL_ENTRIES],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_cpu: Vec<u64>,
    pub ranges: Vec<RangeRow>,
    pub functions: Vec<Row>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotation: Option<Annotation>,
}

impl Report {
    pub fn json(&self) -> String {
        // Serializing plain data to a String cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let cpus = match self.open {
            "each" => "each CPU",
            "one" => "one CPU",
            _ => "all CPUs",
        };
        let _ = writeln!(
            out,
            "pfmprof: {} profile of {} ({cpus})",
            self.space, self.program
        );
        let stride = if self.stride == 0 {
            "stride 0 (one bucket per range)".to_string()
        } else {
            format!(
                "stride {} ({} bytes per bucket)",
                self.stride, self.bucket_bytes
            )
        };
        let turns = if self.ranges.len() > 1 {
            ", profiled in turn (samples scaled)"
        } else {
            ""
        };
        let ranges = match self.ranges.len() {
            1 => "1 range".to_string(),
            n => format!("{n} ranges"),
        };
        let _ = writeln!(out, "  {ranges}, {stride}{turns}");
        for r in &self.ranges {
            let share = if r.alive == 0 {
                0.0
            } else {
                r.sampled as f64 * 100.0 / r.alive as f64
            };
            // The file's name: the full path is in the JSON report.
            let name = r.image.rsplit('/').next().unwrap_or(&r.image);
            // A range whose stride is not the header's says its own.
            let own_stride = if r.stride == self.stride {
                String::new()
            } else {
                format!(" (stride {})", r.stride)
            };
            let _ = writeln!(
                out,
                "    {:<6} {:>18}-{:<18} sampled {share:>3.0}% of its time  {name}{own_stride}",
                r.space, r.start, r.end
            );
        }
        let model = if self.model.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.model)
        };
        let _ = writeln!(
            out,
            "  {} every {} events{model}, sampled every {} (each sample counts {})",
            self.event, self.period, self.sample_period, self.weight
        );
        let _ = writeln!(
            out,
            "  interrupts {}, in the ranges {} ({:.1}%), lost samples {}, throttled {}",
            self.interrupts,
            self.profiled,
            100.0 - self.outside_percent - self.lost_percent,
            self.lost_samples,
            self.throttled
        );
        let ipl = &self.ipl;
        let _ = writeln!(
            out,
            "  ipl: user {} kernel {} (idle {}) device-interrupt {}",
            ipl[PFIPL_USER], ipl[PFIPL_KERNEL], ipl[PFIPL_IDLE], ipl[PFIPL_DEVICE]
        );
        if !self.per_cpu.is_empty() {
            let cpus: Vec<String> = self
                .per_cpu
                .iter()
                .enumerate()
                .map(|(i, n)| format!("cpu{i} {n}"))
                .collect();
            let _ = writeln!(out, "  per cpu: {}", cpus.join(", "));
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:>10} {:>7} {:>7}  function [module] (hottest line)",
            "samples", "percent", "cum%"
        );
        for row in &self.functions {
            let module = if row.module.starts_with('[') {
                row.module.clone()
            } else {
                format!("[{}]", row.module)
            };
            let mut line = format!(
                "{:>10} {:>7.2} {:>7.2}  {} {module}",
                row.samples, row.percent, row.cumulative, row.name
            );
            // Within 100 columns: the location goes first, then the name's
            // tail (the JSON report has them whole).
            if let Some(location) = &row.location
                && line.chars().count() + location.chars().count() + 4 <= WIDTH
            {
                let _ = write!(line, "  ({location})");
            }
            if line.chars().count() > WIDTH {
                line = line.chars().take(WIDTH - 1).collect::<String>() + "~";
            }
            let _ = writeln!(out, "{line}");
        }
        if self.functions.is_empty() {
            let _ = writeln!(out, "{:>10}  (no samples in the profiled ranges)", 0);
        }
        if self.lost > 0 {
            let _ = writeln!(
                out,
                "{:>10} {:>7.2} {:>7}  {LOST}",
                self.lost, self.lost_percent, ""
            );
        }
        let _ = writeln!(
            out,
            "{:>10} {:>7.2} {:>7}  {OUTSIDE}",
            self.outside, self.outside_percent, ""
        );
        if let Some(a) = &self.annotation {
            out.push('\n');
            out.push_str(&a.text());
        }
        // Long program names, paths and periods too: every line within 100
        // columns, wrapped at a space (a number cut short would read as
        // another number).
        out.lines().map(wrap).collect()
    }
}

/// `line` and a newline, folded at spaces into lines of at most [`WIDTH`]
/// columns, the folded parts indented 4 more than the line; a word longer
/// than a line is cut, marked `~`.
fn wrap(line: &str) -> String {
    let indent = (line.len() - line.trim_start().len() + 4).min(WIDTH / 2);
    let mut out = String::new();
    let mut rest = line;
    loop {
        let lead = if out.is_empty() { 0 } else { indent };
        if lead + rest.chars().count() <= WIDTH {
            out.push_str(&" ".repeat(lead));
            out.push_str(rest);
            out.push('\n');
            return out;
        }
        let room = WIDTH - lead;
        let head: String = rest.chars().take(room + 1).collect();
        match head
            .rfind(' ')
            .filter(|&at| at > head.len() - head.trim_start().len())
        {
            Some(at) => {
                out.push_str(&" ".repeat(lead));
                out.push_str(head[..at].trim_end());
                out.push('\n');
                rest = rest[at..].trim_start();
            }
            None => {
                out.push_str(&" ".repeat(lead));
                out.push_str(&rest.chars().take(room - 1).collect::<String>());
                out.push_str("~\n");
                return out;
            }
        }
    }
}

impl Annotation {
    /// The function's sampled lines with their source where the file can be
    /// read (a few lines around them), else the lines alone.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "annotation of {}: {} samples ({:.2}% of the run)",
            self.function, self.samples, self.percent
        );
        if self.samples == 0 {
            let _ = writeln!(
                out,
                "  no samples in a function named {} (names as in the report)",
                self.function
            );
            return out;
        }
        if self.lines.is_empty() {
            let _ = writeln!(
                out,
                "  no source lines for it: its code has no DWARF line table (build with -g, or \
                 install its debug file under /usr/lib/debug; C start-up code has none)"
            );
            return out;
        }
        let mut files: BTreeMap<&str, Vec<&AnnotatedLine>> = BTreeMap::new();
        for line in &self.lines {
            files.entry(line.file.as_str()).or_default().push(line);
        }
        for (file, lines) in files {
            let _ = writeln!(out, "{file}");
            let _ = writeln!(
                out,
                "{:>10} {:>7} {:>6}  source",
                "samples", "percent", "line"
            );
            let by_line: BTreeMap<u32, &AnnotatedLine> =
                lines.iter().map(|l| (l.line, *l)).collect();
            let source = std::fs::read_to_string(file).ok();
            let (first, last) = (lines[0].line, lines[lines.len() - 1].line);
            let shown: Vec<u32> = match &source {
                // The span of the sampled lines, with two lines before.
                Some(_) => (first.saturating_sub(2).max(1)..=last).collect(),
                None => by_line.keys().copied().collect(),
            };
            let text_of = |n: u32| {
                source
                    .as_deref()
                    .and_then(|s| s.lines().nth(n as usize - 1))
                    .map(|l| l.replace('\t', "    "))
                    .unwrap_or_default()
            };
            for n in shown {
                let mut line = match by_line.get(&n) {
                    Some(l) => format!("{:>10} {:>7.2} {n:>6}  ", l.samples, l.percent),
                    None => format!("{:>10} {:>7} {n:>6}  ", "", ""),
                };
                line.push_str(&text_of(n));
                // Reports stay within 100 columns.
                let cut: String = line.chars().take(WIDTH).collect();
                let _ = writeln!(out, "{}", cut.trim_end());
            }
        }
        if self.without_line > 0 {
            let _ = writeln!(
                out,
                "{:>10}  (no line for these samples)",
                self.without_line
            );
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbolize::Resolved;

    pub fn header() -> Header {
        Header {
            space: Space::User,
            open: OpenMode::All,
            stride: 4,
            slots: 1,
            program: "prog".into(),
            model: "ev4".into(),
            event: "PF_CYCLES".into(),
            period: 4096,
            sample_period: 4096 * 20,
            interrupts: 100,
            lost: 0,
            throttled: 0,
            ipl: [5, 0, 0, 0, 0, 0, 0, 0, 95],
        }
    }

    /// A header of `interrupts`, all of them in user mode.
    pub fn user_header(interrupts: u64) -> Header {
        let mut h = header();
        h.interrupts = interrupts;
        h.ipl = [0; PFIPL_ENTRIES];
        h.ipl[PFIPL_USER] = interrupts;
        h
    }

    pub fn range(buckets: Vec<u64>) -> Range {
        Range {
            space: Space::User,
            start: 0x1000,
            end: 0x1100,
            image: "/bin/prog".into(),
            offset: 0x1000,
            stride: 4,
            build_id: None,
            pid: 42,
            sampled: 100,
            alive: 100,
            buckets,
            ..Range::default()
        }
    }

    fn sym(start: u64, end: u64, name: &str) -> Symbol {
        Symbol {
            start,
            end,
            name: name.into(),
        }
    }

    pub fn resolver(addrs: &[u64]) -> Vec<Option<Resolved>> {
        addrs
            .iter()
            .map(|&addr| {
                [sym(0x1000, 0x1040, "cold"), sym(0x1040, 0x10c0, "hot")]
                    .into_iter()
                    .find(|s| (s.start..s.end).contains(&addr))
                    .map(|symbol| Resolved {
                        location: (symbol.name == "hot")
                            .then(|| format!("/src/hot.c:{}", 7 + (addr - 0x1040) / 16)),
                        symbol,
                    })
            })
            .collect()
    }

    pub fn sample_profile() -> Profile {
        let mut buckets = vec![0u64; 16];
        buckets[0] = 10; // cold
        buckets[4] = 60; // hot
        buckets[5] = 20; // hot
        buckets[14] = 3; // no symbol
        let mut r = range(buckets);
        r.resolve(resolver);
        Profile {
            header: header(),
            ranges: vec![r],
        }
    }

    #[test]
    fn buckets_are_charged_to_functions_sorted_by_samples_of_the_whole_run() {
        let p = sample_profile();
        assert_eq!(
            p.ranges[0].symbols.len(),
            2,
            "only symbols of sampled buckets are kept"
        );
        let r = p.report();
        assert_eq!(r.profiled, 93);
        assert_eq!(r.outside, 7);
        let names: Vec<(&str, u64)> = r
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.samples))
            .collect();
        assert_eq!(names, [("hot", 80), ("cold", 10), ("[unknown]", 3)]);
        assert_eq!(r.functions[0].address, "0x1040");
        assert_eq!(r.functions[0].module, "prog");
        assert_eq!(r.functions[0].location.as_deref(), Some("hot.c:7"));
        assert!((r.functions[0].percent - 80.0).abs() < 1e-9, "of all 100");
        assert!((r.functions[2].cumulative - 93.0).abs() < 1e-9);
        assert!((r.outside_percent - 7.0).abs() < 1e-9);
        assert_eq!(r.weight, 20);
        assert_eq!(r.buckets, 16);
    }

    /// A range profiled in turn is scaled to the run, but never past the
    /// interrupts the IPL histogram counted in its mode: a user program's
    /// kernel rows came to 2-3x its kernel interrupts.
    #[test]
    fn a_space_is_scaled_no_further_than_its_ipl_count() {
        let mut p = sample_profile();
        p.header = user_header(400);
        p.header.ipl[PFIPL_USER] = 380;
        p.header.ipl[PFIPL_KERNEL] = 20;
        let mut kernel = range(vec![0; 16]);
        kernel.space = Space::Kernel;
        kernel.buckets[1] = 10;
        kernel.sampled = 10;
        kernel.alive = 100; // ten times: 100, over the 20 counted
        kernel.symbols = vec![sym(0x1000, 0x1100, "irq_exit")];
        p.ranges.push(kernel);
        let r = p.report();
        let of = |n: &str| r.functions.iter().find(|f| f.name == n).unwrap().samples;
        assert_eq!(of("irq_exit"), 20, "{:?}", r.functions);
        assert_eq!(of("hot"), 80, "user rows as they were");
        assert_eq!(r.ranges[1].samples, 20);
    }

    /// A range at a stride of its own (the kernel's, coarser, in a user
    /// profile) says so on its line; the others have the header's.
    #[test]
    fn a_range_at_its_own_stride_says_it() {
        let mut p = sample_profile();
        let mut kernel = range(vec![0; 16]);
        kernel.space = Space::Kernel;
        kernel.stride = p.header.stride * 32;
        p.ranges.push(kernel);
        let r = p.report();
        assert_eq!(r.ranges[1].stride, p.header.stride * 32);
        let text = r.text();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("% of its time"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(!lines[0].contains("(stride"), "{text}");
        assert!(
            lines[1].ends_with(&format!("(stride {})", p.header.stride * 32)),
            "{text}"
        );
    }

    #[test]
    fn ranges_profiled_in_turn_are_scaled_to_the_run() {
        let mut p = sample_profile();
        p.header = user_header(400);
        p.ranges[0].sampled = 100;
        p.ranges[0].alive = 200; // profiled half its time: counts twice
        let mut lib = range(vec![0; 16]);
        lib.image = "/lib/libc.so.6".into();
        lib.start = 0x7000;
        lib.end = 0x7100;
        lib.buckets[1] = 50;
        lib.sampled = 100;
        lib.alive = 200;
        lib.symbols = vec![sym(0x7000, 0x7100, "memcpy")];
        p.ranges.push(lib);
        let r = p.report();
        assert_eq!(r.functions[0].name, "hot");
        assert_eq!(r.functions[0].samples, 160);
        assert!((r.functions[0].percent - 40.0).abs() < 1e-9);
        let memcpy = r.functions.iter().find(|f| f.name == "memcpy").unwrap();
        assert_eq!((memcpy.samples, memcpy.module.as_str()), (100, "libc.so.6"));
        assert_eq!(r.profiled, 186 + 100);
        assert_eq!(r.outside, 400 - 286);
        let text = r.text();
        assert!(text.contains("2 ranges"), "{text}");
        assert!(
            text.contains("sampled  50% of its time  libc.so.6"),
            "{text}"
        );
        assert!(
            text.contains(&format!("114   28.50          {OUTSIDE}")),
            "{text}"
        );
        assert!(text.lines().all(|l| l.len() <= 100), "{text}");
        assert!(!text.contains(LOST), "no lost row without losses: {text}");
        // Two lost samples (20 interrupts each) are a row of their own, out
        // of the outside row.
        let mut p = sample_profile();
        p.header.interrupts = 400;
        p.header.lost = 2;
        let r = p.report();
        assert_eq!((r.lost, r.outside), (40, 400 - 93 - 40));
        assert!((r.lost_percent - 10.0).abs() < 1e-9);
        let text = r.text();
        assert!(
            text.contains(&format!("40   10.00          {LOST}")),
            "{text}"
        );
        assert!(
            text.contains("in the ranges 93 (23.2%), lost samples 2"),
            "{text}"
        );
        let mut p = sample_profile();
        p.ranges[0].symbols[1].name = "h".repeat(120);
        let text = p.report().text();
        assert!(text.lines().all(|l| l.chars().count() <= 100), "{text}");
        assert!(text.contains("hhhh~"), "{text}");
    }

    /// A coarse bucket holding start-up functions and the entry of a hot
    /// one that runs on into the next bucket is the hot one's; one whose
    /// functions all end inside it is charged to them together. It went
    /// to the function at the bucket's start by the samples of a previous
    /// bucket that was not that function's (72 % to deregister_tm_clones).
    #[test]
    fn a_coarse_bucket_of_several_functions_goes_to_the_one_that_runs_on() {
        let mut buckets = vec![0u64; 4];
        buckets[1] = 30; // 0x1040..0x1080: crt tails, then hot's entry
        buckets[2] = 70; // wholly hot
        let mut r = range(buckets);
        r.stride = 16; // 64 bytes a bucket
        r.end = 0x1100;
        r.symbols = vec![
            sym(0x1040, 0x1048, "deregister_tm_clones"),
            sym(0x1050, 0x1058, "register_tm_clones"),
            sym(0x1060, 0x1068, "frame_dummy"),
            sym(0x1070, 0x10c0, "hot"),
            sym(0x10c0, 0x1100, "cold"),
        ];
        let p = Profile {
            header: user_header(100),
            ranges: vec![r],
        };
        let rows = p.report().functions;
        assert_eq!(
            (rows[0].name.as_str(), rows[0].samples),
            ("hot", 100),
            "{rows:?}"
        );
        // The previous bucket is main's, and hot ends with the bucket.
        let mut r = p.ranges[0].clone();
        r.buckets = vec![50, 30, 20, 0];
        r.symbols = vec![
            sym(0x1000, 0x1040, "main"),
            sym(0x1040, 0x1048, "deregister_tm_clones"),
            sym(0x1050, 0x1058, "register_tm_clones"),
            sym(0x1070, 0x1080, "hot"),
            sym(0x1080, 0x1100, "cold"),
        ];
        let p = Profile {
            header: user_header(100),
            ranges: vec![r],
        };
        let rows = p.report().functions;
        let of = |n: &str| rows.iter().find(|r| r.name == n).map(|r| r.samples);
        assert_eq!(of("deregister_tm_clones..hot"), Some(30), "{rows:?}");
        assert_eq!((of("main"), of("cold")), (Some(50), Some(20)), "{rows:?}");
    }

    /// A bucket wider than a function is probed inside: the functions that
    /// start in it are known, and the bucket is theirs together (only the
    /// one at its start was, so the hot function inside disappeared).
    #[test]
    fn a_coarse_bucket_knows_every_function_in_it() {
        let mut r = range(vec![10]);
        r.stride = 64; // one 256-byte bucket: cold, then hot
        r.resolve(resolver);
        let names: Vec<&str> = r.symbols.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cold", "hot"]);
        assert_eq!(
            r.locations.len(),
            0,
            "the bucket's first address has no line"
        );
        let p = Profile {
            header: header(),
            ranges: vec![r],
        };
        assert_eq!(p.report().functions[0].name, "cold..hot");
    }

    /// A header line over 100 columns is folded at a space, whole: the
    /// EV67 sample period was cut to "104857~", which reads as another
    /// number.
    #[test]
    fn long_header_lines_wrap_whole() {
        let line = "  PF67_C0_CYCLES (pair PF67_CYCLES_AND_UNDEFINED) every 1048576 events (ev67), \
                    sampled every 1048576 (each sample counts 1)";
        let wrapped = wrap(line);
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= WIDTH),
            "{wrapped}"
        );
        assert_eq!(
            wrapped.split_whitespace().collect::<Vec<_>>(),
            line.split_whitespace().collect::<Vec<_>>()
        );
        assert_eq!(wrapped.lines().count(), 2, "{wrapped}");
        assert!(
            wrapped.lines().nth(1).unwrap().starts_with("      "),
            "{wrapped}"
        );
        let word = "x".repeat(150);
        assert_eq!(wrap(&word), format!("{}~\n", "x".repeat(WIDTH - 1)));
        assert_eq!(wrap("short"), "short\n");
    }

    #[test]
    fn a_bucket_two_functions_share_goes_by_its_neighbours() {
        // cold ends and hot starts inside bucket 3 (0x1030..0x1040).
        let mut buckets = vec![0u64; 16];
        buckets[3] = 10;
        buckets[4] = 90; // wholly hot
        let mut r = range(buckets);
        r.symbols = vec![sym(0x1000, 0x1038, "cold"), sym(0x1038, 0x10c0, "hot")];
        let p = Profile {
            header: user_header(100),
            ranges: vec![r.clone()],
        };
        let rows = p.report().functions;
        assert_eq!((rows[0].name.as_str(), rows[0].samples), ("hot", 100));
        assert_eq!(rows.len(), 1, "{rows:?}");
        // With hot samples on both sides, the bucket is split.
        r.buckets[2] = 90;
        let p = Profile {
            header: user_header(200),
            ranges: vec![r],
        };
        let rows = p.report().functions;
        let of = |n: &str| rows.iter().find(|r| r.name == n).unwrap().samples;
        assert_eq!((of("hot"), of("cold")), (95, 95));
        assert_eq!(
            p.report_annotating(Some("hot")).annotation.unwrap().samples,
            95
        );
    }

    /// Two functions, `hot` and `warm`, with these samples in one range,
    /// and the interrupts the device counted.
    fn hot_and_warm(hot: u64, warm: u64, interrupts: u64) -> Profile {
        let mut buckets = vec![0u64; 16];
        buckets[4] = hot;
        buckets[8] = warm;
        let mut r = range(buckets);
        r.symbols = vec![sym(0x1000, 0x1060, "hot"), sym(0x1060, 0x1100, "warm")];
        let mut h = header();
        h.interrupts = interrupts;
        Profile {
            header: h,
            ranges: vec![r],
        }
    }

    /// Estimates over the interrupt count are scaled down to it: the
    /// annotation of a function by the same factor as its row (it was not).
    #[test]
    fn an_annotation_is_scaled_as_its_row() {
        let p = hot_and_warm(60, 40, 50);
        let report = p.report_annotating(Some("hot"));
        let row = report.functions.iter().find(|r| r.name == "hot").unwrap();
        assert_eq!(row.samples, 30, "{:?}", report.functions);
        assert_eq!(report.annotation.unwrap().samples, row.samples);
    }

    /// Rounding past the interrupt count takes a sample off the top row:
    /// the annotation's headline is that row's figure, not one more.
    #[test]
    fn an_annotation_headline_is_its_row_after_rounding() {
        let p = hot_and_warm(5, 5, 3);
        let top = p.report().functions[0].name.clone();
        let report = p.report_annotating(Some(&top));
        let rows = &report.functions;
        assert_eq!(rows.iter().map(|r| r.samples).sum::<u64>(), 3, "{rows:?}");
        assert_eq!(rows[0].samples, 1, "{rows:?}");
        let annotation = report.annotation.unwrap();
        assert_eq!(annotation.samples, rows[0].samples);
        assert!(
            annotation
                .text()
                .starts_with(&format!("annotation of {top}: 1 samples"))
        );
    }

    #[test]
    fn each_mode_sums_cpus_and_reports_them() {
        let mut h = header();
        h.slots = 2;
        h.open = OpenMode::Each;
        let mut buckets = vec![0u64; 32];
        buckets[4] = 7; // cpu0 hot
        buckets[16 + 4] = 5; // cpu1 hot
        buckets[16] = 1; // cpu1 cold
        let mut r = range(buckets);
        r.resolve(resolver);
        let p = Profile {
            header: h,
            ranges: vec![r],
        };
        let r = p.report();
        assert_eq!(r.per_cpu, [7, 6]);
        assert_eq!(r.functions[0].name, "hot");
        assert_eq!(r.functions[0].samples, 12);
        assert!(r.text().contains("per cpu: cpu0 7, cpu1 6"));
    }

    #[test]
    fn stride_zero_is_one_row_per_range() {
        let mut h = header();
        h.stride = 0;
        let mut r = range(vec![42]);
        r.stride = 0;
        r.resolve(resolver);
        let p = Profile {
            header: h,
            ranges: vec![r],
        };
        let r = p.report();
        assert_eq!(r.functions.len(), 1);
        assert_eq!(r.functions[0].samples, 42);
        assert_eq!(r.functions[0].name, "[range 0x1000-0x1100]");
        assert!(p.ranges[0].symbols.is_empty());
    }

    #[test]
    fn text_and_json_carry_the_same_rows() {
        let r = sample_profile().report();
        let text = r.text();
        assert!(
            text.contains("interrupts 100, in the ranges 93 (93.0%)"),
            "{text}"
        );
        assert!(
            text.contains("  PF_CYCLES every 4096 events (ev4), sampled every 81920"),
            "{text}"
        );
        let hot = text.lines().find(|l| l.contains(" hot")).unwrap();
        assert!(hot.trim_start().starts_with("80 "), "{hot}");
        assert!(hot.ends_with("hot [prog]  (hot.c:7)"), "{hot}");
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["version"], 3);
        assert_eq!(json["lost"], 0);
        assert_eq!(json["functions"][0]["name"], "hot");
        assert_eq!(json["functions"][0]["samples"], 80);
        assert_eq!(json["profiled"], 93);
        assert_eq!(json["outside"], 7);
        assert_eq!(json["ranges"][0]["image"], "/bin/prog");
        assert_eq!(json["ipl"][8], 95);
        assert_eq!(json["model"], "ev4");
        assert!(json.get("per_cpu").is_none());
        assert!(json.get("annotation").is_none());
    }

    #[test]
    fn annotation_counts_samples_by_line_and_shows_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("hot.c");
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&source, text).unwrap();
        let mut p = sample_profile();
        for loc in p.ranges[0].locations.values_mut() {
            *loc = loc.replace("/src/hot.c", source.to_str().unwrap());
        }
        let r = p.report_annotating(Some("hot"));
        let a = r.annotation.as_ref().unwrap();
        assert_eq!(a.samples, 80);
        let lines: Vec<(u32, u64)> = a.lines.iter().map(|l| (l.line, l.samples)).collect();
        assert_eq!(lines, [(7, 60), (8, 20)]);
        let text = a.text();
        assert!(text.contains("        60   75.00      7  line 7"), "{text}");
        assert!(
            text.lines().any(|l| l.trim_start() == "5  line 5"),
            "{text}"
        );
        let none = p.report_annotating(Some("nothing")).annotation.unwrap();
        assert!(none.text().contains("no samples"));
        let cold = p.report_annotating(Some("cold")).annotation.unwrap();
        assert!(cold.text().contains("no source lines"), "{}", cold.text());
    }

    #[test]
    fn empty_profile_says_so() {
        let p = Profile {
            header: header(),
            ranges: vec![range(vec![0; 16])],
        };
        let text = p.report().text();
        assert!(text.contains("no samples"), "{text}");
        assert!(
            text.contains(&format!("100  100.00          {OUTSIDE}")),
            "{text}"
        );
    }
}
