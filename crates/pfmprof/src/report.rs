//! From buckets to a report: each bucket's count is charged to the function
//! containing the bucket's first address; functions sorted by samples,
//! descending. A [`Profile`] carries everything the report needs (the
//! symbols that cover a sampled bucket, at run-time addresses, and source
//! lines of the hottest addresses), so `pfmprof --report FILE` prints the same
//! report without the executable or the kernel it came from.

use super::args::open_mode_name;
use super::symbols::{Symbol, SymbolTable};
use pfm_client::OpenMode;
use serde::Serialize;
use std::collections::BTreeMap;

pub const IPL_ENTRIES: usize = 9;

/// User or kernel text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
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
}

/// What was profiled and what the device said about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub space: Space,
    pub open: OpenMode,
    /// The profiled range at run-time addresses.
    pub start: u64,
    pub end: u64,
    pub stride: u64,
    /// Histograms in the data: 1, or one per CPU for EACH.
    pub slots: usize,
    /// The executable, or `/proc/kallsyms`.
    pub image: String,
    /// Run-time minus link-time address of the executable.
    pub bias: u64,
    pub build_id: Option<String>,
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
    /// The counter's interrupt count over the run (PCNTGETCNT).
    pub interrupts: u64,
    pub lost: u64,
    pub throttled: u64,
    /// IPL histogram summed over CPUs (PCNTGETIPLHIS).
    pub ipl: [u64; IPL_ENTRIES],
}

impl Header {
    pub fn bucket_bytes(&self) -> u64 {
        self.stride * 4
    }

    pub fn buckets_per_slot(&self) -> usize {
        if self.stride == 0 {
            1
        } else {
            (self.end - self.start).div_ceil(self.bucket_bytes()) as usize
        }
    }

    /// First address of bucket `i`.
    pub fn bucket_address(&self, i: usize) -> u64 {
        self.start + i as u64 * self.bucket_bytes()
    }
}

/// Everything a report is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub header: Header,
    /// Slots one after another, as read(2) returned them.
    pub buckets: Vec<u32>,
    /// Symbols covering sampled buckets, at run-time addresses.
    pub symbols: Vec<Symbol>,
    /// Source locations of some run-time addresses.
    pub locations: BTreeMap<u64, String>,
}

impl Profile {
    /// Builds a profile from raw buckets, resolving the symbol of each
    /// sampled bucket with `resolve` and the source line of each function's
    /// hottest bucket with `locate` (both take run-time addresses).
    pub fn collect(
        header: Header,
        buckets: Vec<u32>,
        resolve: impl Fn(u64) -> Option<Symbol>,
        locate: impl Fn(u64) -> Option<String>,
    ) -> Profile {
        let mut profile = Profile {
            header,
            buckets,
            symbols: Vec::new(),
            locations: BTreeMap::new(),
        };
        if profile.header.stride != 0 {
            let summed = profile.summed();
            // Buckets ascend, so the last symbol found is the one to reuse.
            let mut last: Option<(u64, u64)> = None;
            for (i, &count) in summed.iter().enumerate() {
                let addr = profile.header.bucket_address(i);
                if count == 0 || last.is_some_and(|(s, e)| (s..e).contains(&addr)) {
                    continue;
                }
                if let Some(symbol) = resolve(addr) {
                    last = Some((symbol.start, symbol.end));
                    profile.symbols.push(symbol);
                }
            }
        }
        for row in profile.rows() {
            if let Some(location) = locate(row.hottest) {
                profile.locations.insert(row.hottest, location);
            }
        }
        profile
    }

    /// Buckets summed over slots.
    pub fn summed(&self) -> Vec<u64> {
        let n = self.header.buckets_per_slot();
        let mut sum = vec![0u64; n];
        for slot in self.buckets.chunks(n.max(1)) {
            for (s, &b) in sum.iter_mut().zip(slot) {
                *s += u64::from(b);
            }
        }
        sum
    }

    /// Per-slot totals.
    pub fn slot_totals(&self) -> Vec<u64> {
        let n = self.header.buckets_per_slot().max(1);
        self.buckets
            .chunks(n)
            .map(|c| c.iter().map(|&b| u64::from(b)).sum())
            .collect()
    }

    /// Functions with their samples, sorted descending (ties by name).
    fn rows(&self) -> Vec<RawRow> {
        let summed = self.summed();
        if self.header.stride == 0 {
            let samples = summed.first().copied().unwrap_or(0);
            return vec![RawRow {
                name: format!("[range {:#x}-{:#x}]", self.header.start, self.header.end),
                samples,
                hottest: self.header.start,
                hottest_count: samples,
            }];
        }
        let table = SymbolTable::new(self.symbols.clone(), self.header.end);
        let mut by_name: BTreeMap<String, RawRow> = BTreeMap::new();
        for (i, &count) in summed.iter().enumerate().filter(|(_, c)| **c > 0) {
            let addr = self.header.bucket_address(i);
            let name = table
                .lookup(addr)
                .map_or_else(|| "[unknown]".to_string(), |s| s.name.clone());
            let row = by_name.entry(name.clone()).or_insert(RawRow {
                name,
                samples: 0,
                hottest: addr,
                hottest_count: 0,
            });
            row.samples += count;
            if count > row.hottest_count {
                row.hottest = addr;
                row.hottest_count = count;
            }
        }
        let mut rows: Vec<RawRow> = by_name.into_values().collect();
        rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
        rows
    }

    pub fn report(&self) -> Report {
        let h = &self.header;
        let profiled: u64 = self.buckets.iter().map(|&b| u64::from(b)).sum();
        let mut cumulative = 0.0;
        let functions = self
            .rows()
            .into_iter()
            .map(|r| {
                let percent = percent(r.samples, profiled);
                cumulative += percent;
                Row {
                    location: self.locations.get(&r.hottest).cloned(),
                    name: r.name,
                    samples: r.samples,
                    percent,
                    cumulative,
                    address: format!("{:#x}", r.hottest),
                }
            })
            .collect();
        Report {
            version: REPORT_VERSION,
            program: h.program.clone(),
            space: h.space.name(),
            open: open_mode_name(h.open),
            image: h.image.clone(),
            start: format!("{:#x}", h.start),
            end: format!("{:#x}", h.end),
            stride: h.stride,
            bucket_bytes: h.bucket_bytes(),
            buckets: h.buckets_per_slot(),
            model: h.model.clone(),
            event: h.event.clone(),
            period: h.period,
            sample_period: h.sample_period,
            weight: h.sample_period.checked_div(h.period).unwrap_or(0),
            interrupts: h.interrupts,
            profiled,
            lost_samples: h.lost,
            throttled: h.throttled,
            ipl: h.ipl,
            per_cpu: if h.slots > 1 {
                self.slot_totals()
            } else {
                Vec::new()
            },
            functions,
        }
    }
}

struct RawRow {
    name: String,
    samples: u64,
    hottest: u64,
    hottest_count: u64,
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
    /// Interrupts charged to it (bucket counts).
    pub samples: u64,
    pub percent: f64,
    pub cumulative: f64,
    /// Its hottest bucket's first address (run time).
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
}

/// The JSON report's `version`: raised when a field changes meaning or goes.
pub const REPORT_VERSION: u32 = 1;

/// The report, as text or JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The JSON schema's version (pfmprof(1)).
    pub version: u32,
    pub program: String,
    pub space: &'static str,
    pub open: &'static str,
    pub image: String,
    pub start: String,
    pub end: String,
    pub stride: u64,
    pub bucket_bytes: u64,
    pub buckets: usize,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub model: String,
    pub event: String,
    pub period: u64,
    pub sample_period: u64,
    /// Interrupts each sample counts.
    pub weight: u64,
    pub interrupts: u64,
    /// Sum of all buckets: interrupts that landed in the range.
    pub profiled: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    pub ipl: [u64; IPL_ENTRIES],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_cpu: Vec<u64>,
    pub functions: Vec<Row>,
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
            "stride 0 (one bucket)".to_string()
        } else {
            format!(
                "stride {} ({} bytes per bucket), {} buckets",
                self.stride, self.bucket_bytes, self.buckets
            )
        };
        let _ = writeln!(
            out,
            "  text {}-{} of {}, {stride}",
            self.start, self.end, self.image
        );
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
            "  interrupts {}, in the profile {} ({:.1}%), lost samples {}, throttled {}",
            self.interrupts,
            self.profiled,
            percent(self.profiled, self.interrupts),
            self.lost_samples,
            self.throttled
        );
        let ipl = &self.ipl;
        let _ = writeln!(
            out,
            "  ipl: user {} kernel {} (idle {}) device-interrupt {}",
            ipl[8], ipl[0], ipl[7], ipl[4]
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
            "{:>10} {:>7} {:>7}  function",
            "samples", "percent", "cum%"
        );
        for row in &self.functions {
            let _ = write!(
                out,
                "{:>10} {:>7.2} {:>7.2}  {}",
                row.samples, row.percent, row.cumulative, row.name
            );
            if let Some(location) = &row.location {
                let _ = write!(out, "  ({location})");
            }
            let _ = writeln!(out);
        }
        if self.functions.is_empty() {
            let _ = writeln!(out, "{:>10}  (no samples in the profiled range)", 0);
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn header() -> Header {
        Header {
            space: Space::User,
            open: OpenMode::All,
            start: 0x1000,
            end: 0x1100,
            stride: 4,
            slots: 1,
            image: "/bin/prog".into(),
            bias: 0,
            build_id: None,
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

    fn sym(start: u64, end: u64, name: &str) -> Symbol {
        Symbol {
            start,
            end,
            name: name.into(),
        }
    }

    pub fn resolver(addr: u64) -> Option<Symbol> {
        [sym(0x1000, 0x1040, "cold"), sym(0x1040, 0x10c0, "hot")]
            .into_iter()
            .find(|s| (s.start..s.end).contains(&addr))
    }

    pub fn sample_profile() -> Profile {
        let mut buckets = vec![0u32; 16];
        buckets[0] = 10; // cold
        buckets[4] = 60; // hot
        buckets[5] = 20; // hot
        buckets[14] = 3; // no symbol
        Profile::collect(header(), buckets, resolver, |a| {
            (a == 0x1040).then(|| "hot.c:7".to_string())
        })
    }

    #[test]
    fn buckets_are_charged_to_functions_sorted_by_samples() {
        let p = sample_profile();
        assert_eq!(
            p.symbols.len(),
            2,
            "only symbols of sampled buckets are kept"
        );
        let r = p.report();
        assert_eq!(r.profiled, 93);
        let names: Vec<(&str, u64)> = r
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f.samples))
            .collect();
        assert_eq!(names, [("hot", 80), ("cold", 10), ("[unknown]", 3)]);
        assert_eq!(r.functions[0].address, "0x1040");
        assert_eq!(r.functions[0].location.as_deref(), Some("hot.c:7"));
        assert!((r.functions[0].percent - 80.0 * 100.0 / 93.0).abs() < 1e-9);
        assert!((r.functions[2].cumulative - 100.0).abs() < 1e-9);
        assert_eq!(r.weight, 20);
        assert_eq!(r.buckets, 16);
    }

    #[test]
    fn each_mode_sums_cpus_and_reports_them() {
        let mut h = header();
        h.slots = 2;
        h.open = OpenMode::Each;
        let mut buckets = vec![0u32; 32];
        buckets[4] = 7; // cpu0 hot
        buckets[16 + 4] = 5; // cpu1 hot
        buckets[16] = 1; // cpu1 cold
        let p = Profile::collect(h, buckets, resolver, |_| None);
        let r = p.report();
        assert_eq!(r.per_cpu, [7, 6]);
        assert_eq!(r.functions[0].name, "hot");
        assert_eq!(r.functions[0].samples, 12);
        assert!(r.text().contains("per cpu: cpu0 7, cpu1 6"));
    }

    #[test]
    fn stride_zero_is_one_row_for_the_range() {
        let mut h = header();
        h.stride = 0;
        let p = Profile::collect(h, vec![42], resolver, |_| None);
        let r = p.report();
        assert_eq!(r.functions.len(), 1);
        assert_eq!(r.functions[0].samples, 42);
        assert_eq!(r.functions[0].name, "[range 0x1000-0x1100]");
        assert!(p.symbols.is_empty());
    }

    #[test]
    fn text_and_json_carry_the_same_rows() {
        let r = sample_profile().report();
        let text = r.text();
        assert!(
            text.contains("interrupts 100, in the profile 93 (93.0%)"),
            "{text}"
        );
        assert!(
            text.contains("  PF_CYCLES every 4096 events (ev4), sampled every 81920"),
            "{text}"
        );
        let hot = text.lines().find(|l| l.contains(" hot")).unwrap();
        assert!(hot.trim_start().starts_with("80 "), "{hot}");
        assert!(hot.ends_with("(hot.c:7)"), "{hot}");
        let json: serde_json::Value = serde_json::from_str(&r.json()).unwrap();
        assert_eq!(json["functions"][0]["name"], "hot");
        assert_eq!(json["functions"][0]["samples"], 80);
        assert_eq!(json["profiled"], 93);
        assert_eq!(json["ipl"][8], 95);
        assert_eq!(json["model"], "ev4");
        assert!(json.get("per_cpu").is_none());
    }

    #[test]
    fn empty_profile_says_so() {
        let p = Profile::collect(header(), vec![0; 16], resolver, |_| None);
        assert!(p.report().text().contains("no samples"));
    }
}
