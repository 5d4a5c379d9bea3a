//! `include/sys/pfcntr.h` against the device reference and the Rust ABI (docs/device.md §2,
//! §3, §4, Appendix A).
//!
//! A C program generated from the header's own `#define`s is compiled with
//! gcc (strict C99, GNU C and C++) and prints every ioctl number, every
//! structure's size, alignment and field offsets, the bit-field positions (each
//! field set to all ones, the raw word printed) and every constant. The output
//! is compared with `pfm_abi::numbers::ALL`, the `#[repr(C)]` structures
//! and accessors of `pfm_abi`, the model constants, and the literal
//! values of Appendix A. Both ways: the header defines nothing the test does not
//! expect, and misses nothing.

use pfm_abi::numbers;
use pfm_abi::{
    self as abi, AddrRange, AddrRangeT, Iccsr, PfCntrs, PfCntrsEv5, PfCntrsEv6, PfIpls, PfmInfo,
    PmctrsEv5, PmctrsEv6,
};
use pfm_model::ev4;
use pfm_model::{Family, Fidelity, Implementation};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

// ---------------------------------------------------------------------------
// Helpers: paths, scratch directories, running the compiler.

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn include_dir() -> PathBuf {
    root().join("include")
}

fn header_text() -> String {
    let path = include_dir().join("sys/pfcntr.h");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A fresh directory under `target/tmp` for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("header_abi-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs `cmd`, panicking with its output unless it succeeds; returns stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (gcc and g++ are required)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

// ---------------------------------------------------------------------------
// What the header defines, read from its text.

#[derive(Debug, Default)]
struct HeaderNames {
    /// `#define PCNT... _IO...`
    ioctls: Vec<String>,
    /// Object-like macros with a value.
    constants: Vec<String>,
    /// `pmctrs_ev5_select` and friends.
    accessors: Vec<String>,
    /// Members of the anonymous enum, in order.
    enumerators: Vec<String>,
}

/// The header with every `/* ... */` comment removed (newlines kept).
fn header_code() -> String {
    let text = header_text();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("unterminated comment") + start + 2;
        out.extend(rest[start..end].chars().filter(|c| *c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    assert!(!out.contains("//"), "C89 has no // comments");
    out
}

fn header_names() -> HeaderNames {
    let text = header_code();
    let mut names = HeaderNames::default();
    let mut in_enum = false;
    for line in text.lines() {
        let t = line.trim();
        if in_enum {
            if t.starts_with('}') {
                in_enum = false;
                continue;
            }
            let item = t.trim_end_matches(',').trim();
            if !item.is_empty() {
                assert!(
                    item.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "enumerators are plain names in order, no values: {item:?}"
                );
                names.enumerators.push(item.to_string());
            }
            continue;
        }
        if t == "enum {" {
            in_enum = true;
            continue;
        }
        let Some(rest) = t.strip_prefix('#') else {
            continue;
        };
        let Some(rest) = rest.trim_start().strip_prefix("define") else {
            continue;
        };
        let rest = rest.trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        assert!(
            !rest[name.len()..].starts_with('('),
            "function-like macro {name} in the header"
        );
        let body = rest[name.len()..].trim();
        if name == "_SYS_PFCNTR_H_" || name == "_PFCNTR_H_" || name.starts_with("_PFM_") {
            continue; // include guards (ours, Tru64's) and internal helpers
        } else if body.starts_with("_IO") {
            names.ioctls.push(name);
        } else if name.starts_with("pmctrs_") {
            names.accessors.push(name);
        } else {
            assert!(!body.is_empty(), "{name} has no value");
            names.constants.push(name);
        }
    }
    names
}

// ---------------------------------------------------------------------------
// Expected values.

/// Appendix A, literally: every value docs/device.md spells out.
const APPENDIX_A: &[(&str, u64)] = &[
    // Items (§3) and the profile-me field (§5.4).
    ("PFM_COUNTERS", 1),
    ("PFM_IPL", 2),
    ("PFM_PROFILING", 4),
    ("PFM_PROFME_MODE_MASK", 0xff00),
    ("PFM_PROFME_MODE_SHIFT", 8),
    ("PMCTRS_ALL_CPUS", 0xFF),
    // EV4.
    ("PF_ISSUES", 0x0),
    ("PF_PIPEDRY", 0x2),
    ("PF_LOADI", 0x4),
    ("PF_PIPEFROZEN", 0x6),
    ("PF_BRANCHI", 0x8),
    ("PF_CYCLES", 0xa),
    ("PF_PALMODE", 0xb),
    ("PF_NONISSUES", 0xc),
    ("PF_EXTPIN0", 0xe),
    ("PF_DCACHE", 0x0),
    ("PF_ICACHE", 0x1),
    ("PF_DUAL", 0x2),
    ("PF_BRANCHMISS", 0x3),
    ("PF_FPINST", 0x4),
    ("PF_INTOPS", 0x5),
    ("PF_STOREI", 0x6),
    ("PF_EXTPIN1", 0x7),
    ("PF_C0_INT_EVERY_65536", 0),
    ("PF_C0_INT_EVERY_4096", 1),
    ("PF_C1_INT_EVERY_4096", 0),
    ("PF_C1_INT_EVERY_256", 1),
    // EV5 contexts.
    ("PF5_CTXT_ALL_PROC", 0),
    ("PF5_CTXT_SEL_PROC", 1),
    ("PF5_CTXT_PME_THIS", 2),
    ("PF5_CTXT_THIS_PROC", 3),
    ("PF5_CTXT_NO_USER", 0x40000000),
    ("PF5_CTXT_NO_PAL", 0x200),
    ("PF5_CTXT_NO_KERNEL", 0x100),
    ("PF5_CTXT_USER", 0x300),
    ("PF5_CTXT_PAL", 0x40000100),
    ("PF5_CTXT_USER_AND_PAL", 0x100),
    ("PF5_CTXT_KERNEL", 0x40000200),
    ("PF5_CTXT_USER_AND_KERNEL", 0x200),
    ("PF5_CTXT_PAL_AND_KERNEL", 0x40000000),
    ("PF5_CTXT_ALL_MODES", 0),
    ("PF5_CTXT_EXEC_AND_SUPER", 0x40000300),
    // EV5 counter 0.
    ("PF5_MUX0_CYCLES", 0),
    ("PF5_MUX0_ISSUES", 0x80000000),
    // EV5 counter 1.
    ("PF5_MUX1_NON_ISSUE_CYCLES", 0x00),
    ("PF5_MUX1_SPLIT_ISSUE_CYCLES", 0x10),
    ("PF5_MUX1_PIPELINE_DRY", 0x20),
    ("PF5_MUX1_REPLAY_TRAP", 0x30),
    ("PF5_MUX1_SINGLE_ISSUE_CYCLES", 0x40),
    ("PF5_MUX1_DUAL_ISSUE_CYCLES", 0x50),
    ("PF5_MUX1_TRIPLE_ISSUE_CYCLES", 0x60),
    ("PF5_MUX1_QUAD_ISSUE_CYCLES", 0x70),
    ("PF5_MUX1_FLOW_CHANGE", 0x80),
    ("PF5_MUX1_INTEGER_OPERATE", 0x90),
    ("PF5_MUX1_C_FP_INSTRUCTIONS", 0xA0),
    ("PF5_MUX1_C_LOAD_INSTRUCTIONS", 0xB0),
    ("PF5_MUX1_C_STORE_INSTRUCTIONS", 0xC0),
    ("PF5_MUX1_C_ICACHE_ACCESS", 0xD0),
    ("PF5_MUX1_C_DCACHE_ACCESS", 0xE0),
    ("PF5_MUX1_C_BCACHE_VICTIM", 0x300000000000F0),
    ("PF5_MUX1_C_SCACHE_ACCESS", 0xF0),
    ("PF5_MUX1_C_SCACHE_READ", 0x80000000000F0),
    ("PF5_MUX1_C_SCACHE_WRITE", 0x100000000000F0),
    ("PF5_MUX1_C_SCACHE_VICTIM", 0x180000000000F0),
    ("PF5_MUX1_C_BCACHE_REF", 0x280000000000F0),
    ("PF5_MUX1_C_SYS_REQ", 0x380000000000F0),
    ("PF5_MUX1_C_BCACHE_READ", 0xF0),
    ("PF5_MUX1_C_BCACHE_DREAD_HIT", 0x80000000000F0),
    ("PF5_MUX1_C_BCACHE_DREAD_FILL", 0x100000000000F0),
    ("PF5_MUX1_C_BCACHE_WRITE", 0x180000000000F0),
    ("PF5_MUX1_C_BCACHE_CLN_WRT_HIT", 0x280000000000F0),
    ("PF5_MUX1_C_READ_MISS_2", 0x380000000000F0),
    // EV5 counter 2.
    ("PF5_MUX2_C_LONG_STALLS", 0),
    ("PF5_MUX2_C_PC_MISPR", 2),
    ("PF5_MUX2_C_BRANCH_MISPREDICTS", 3),
    ("PF5_MUX2_C_ICACHE_MISSES", 4),
    ("PF5_MUX2_C_ITB_MISS", 5),
    ("PF5_MUX2_C_DCACHE_MISSES", 6),
    ("PF5_MUX2_C_DTB_MISS", 7),
    ("PF5_MUX2_C_LOADS_MERGED", 8),
    ("PF5_MUX2_C_LDU_REPLAYS", 9),
    ("PF5_MUX2_C_WB_MAF_FULL_REPLAYS", 0xA),
    ("PF5_MUX2_C_EXTERNAL", 0xB),
    ("PF5_MUX2_C_CYCLES", 0xC),
    ("PF5_MUX2_C_MEM_BARRIER", 0xD),
    ("PF5_MUX2_C_LOAD_LOCKED", 0xE),
    ("PF5_MUX2_C_SCACHE_MISS", 0xF),
    ("PF5_MUX2_C_SCACHE_READ_MISS", 0x4000000000000F),
    ("PF5_MUX2_C_SCACHE_WRITE_MISS", 0x8000000000000F),
    ("PF5_MUX2_C_SCACHE_SH_WRITE", 0xC000000000000F),
    ("PF5_MUX2_C_SCACHE_WRITE", 0x10000000000000F),
    ("PF5_MUX2_C_BCACHE_MISS", 0x14000000000000F),
    ("PF5_MUX2_C_SYS_INV", 0x18000000000000F),
    ("PF5_MUX2_C_SYS_READ_REQ", 0x1C000000000000F),
    ("PF5_MUX2_C_BCACHE_DREAD", 0xF),
    ("PF5_MUX2_C_BCACHE_READ_HIT", 0x4000000000000F),
    ("PF5_MUX2_C_BCACHE_READ_FILL", 0x8000000000000F),
    ("PF5_MUX2_C_BCACHE_WRITE_HIT", 0xC000000000000F),
    ("PF5_MUX2_C_BCACHE_WRITE_FILL", 0x10000000000000F),
    ("PF5_MUX2_C_SYS_READ_FLUSH_HIT", 0x14000000000000F),
    ("PF5_MUX2_C_SYS_READ_FLUSH_MISS", 0x18000000000000F),
    ("PF5_MUX2_C_READ_MISS_3", 0x1C000000000000F),
    // EV5 periods, widths, select bits.
    ("PF5_C0_INT_EVERY_256", 0x300),
    ("PF5_C0_INT_EVERY_65536", 0x200),
    ("PF5_C1_INT_EVERY_256", 0xC0),
    ("PF5_C1_INT_EVERY_65536", 0x80),
    ("PF5_C2_INT_EVERY_256", 0x30),
    ("PF5_C2_INT_EVERY_16384", 0x20),
    ("PF5_C0_WIDTH", 16),
    ("PF5_C1_WIDTH", 16),
    ("PF5_C2_WIDTH", 14),
    ("PF5_SEL_COUNTER_0", 1),
    ("PF5_SEL_COUNTER_1", 2),
    ("PF5_SEL_COUNTER_2", 4),
    // EV6.
    ("PF6_MUX0_CYCLES", 0x00),
    ("PF6_MUX0_RET_INSTRUCTIONS", 0x10),
    ("PF6_MUX1_CYCLES", 0x0),
    ("PF6_MUX1_RET_COND_BRANCHES", 0x1),
    ("PF6_MUX1_RET_BRANCH_MISPREDICTS", 0x2),
    ("PF6_MUX1_RET_DTB_SINGLE_MISSES", 0x3),
    ("PF6_MUX1_RET_DTB_DOUBLE_MISSES", 0x4),
    ("PF6_MUX1_RET_ITB_MISSES", 0x5),
    ("PF6_MUX1_RET_UNALIGNED_TRAPS", 0x6),
    ("PF6_MUX1_REPLAY_TRAP", 0x7),
    ("PF6_C0_INT_EVERY_1048576", 0x0),
    ("PF6_C1_INT_EVERY_1048576", 0x1),
    ("PF6_SEL_COUNTER_0", 1),
    ("PF6_SEL_COUNTER_1", 2),
    ("PF6_C0_WIDTH", 20),
    ("PF6_C1_WIDTH", 20),
    // EV67.
    ("PF67_RET_INST_AND_CYCLES", 0x00),
    ("PF67_CYCLES_AND_UNDEFINED", 0x04),
    ("PF67_RET_INST_AND_BCACHE_MISS", 0x08),
    ("PF67_CYCLES_AND_REPLAY_TRAPS", 0x0C),
    ("PF67_PROFILE_ME_MODE", 0x10),
    ("PF67_CYCLES_AND_RET_DELAY", 0x04),
];

/// The `PF67_PM_*` statistics in order from 0 (Appendix A).
const PF67_PM: &[&str] = &[
    "DISABLED",
    "ABORT",
    "ABORT_PER_RET",
    "ARITH_TRAP",
    "CBR_TAKEN",
    "CBR_TAKEN_PER_RET",
    "CYCLES",
    "CYCLES_PER_RET",
    "DELAY",
    "DELAY_PER_RET",
    "DSTREAM_FAULT",
    "DTB_MISS",
    "DTB_MISS_PER_RET",
    "DTB_MISS3",
    "DTB_MISS4",
    "EARLY_KILL",
    "EARLY_KILL_PER_RET",
    "FP_DISABLED",
    "FREQ",
    "ICACHE_MISS",
    "ICACHE_MISS_PER_RET",
    "ICACHE_PARITY",
    "INFLT_BCACHE_MISS",
    "INFLT_REPLAYS",
    "INFLT_RETIRES",
    "INTERRUPT",
    "ISTREAM_ACCVIO",
    "ITB_MISS",
    "LDST_ALIGN_TRAP",
    "LDST_ORDER_TRAP",
    "MAP_STALL",
    "MAP_STALL_PER_RET",
    "MCHK_TRAP",
    "MISPREDICT",
    "MISPREDICT_PER_RET",
    "MT_FPCR_TRAP",
    "OPCDEC_TRAP",
    "REPLAY_TRAP",
    "REPLAY_TRAP_PER_RET",
    "RESET",
    "RETIRE",
    "TRAP",
    "TRAP_PER_RET",
    "VALID",
];

/// Values of the extension (ours) that the project fixed outside the code.
const EXTENSION: &[(&str, u64)] = &[
    ("PFM_FIDELITY_NONE", 0),
    ("PFM_FIDELITY_EXACT", 1),
    ("PFM_FIDELITY_APPROX", 2),
    ("PFM_FIDELITY_UNAVAILABLE", 3),
    ("PFM_FAMILY_EV4", 0),
    ("PFM_FAMILY_EV5", 1),
    ("PFM_FAMILY_EV6", 2),
    ("PFM_IMPL_EV4", 0),
    ("PFM_IMPL_EV45", 1),
    ("PFM_IMPL_EV5", 2),
    ("PFM_IMPL_EV56", 3),
    ("PFM_IMPL_PCA56", 4),
    ("PFM_IMPL_EV6", 5),
    ("PFM_IMPL_EV67", 6),
    ("PFM_INFO_VERSION", 1),
];

/// What the Rust side says each shared name is.
fn rust_constants() -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = vec![
        ("PCNTOPENONE".into(), abi::PCNTOPENONE as u64),
        ("PCNTOPENEACH".into(), abi::PCNTOPENEACH as u64),
        ("PCNTOPENALL".into(), abi::PCNTOPENALL as u64),
        ("PCNTOPENMASK".into(), abi::PCNTOPENMASK as u64),
        ("PFM_COUNTERS".into(), abi::PFM_COUNTERS),
        ("PFM_IPL".into(), abi::PFM_IPL),
        ("PFM_PROFILING".into(), abi::PFM_PROFILING),
        ("PFM_PROFME_MODE_MASK".into(), abi::PFM_PROFME_MODE_MASK),
        (
            "PFM_PROFME_MODE_SHIFT".into(),
            u64::from(abi::PFM_PROFME_MODE_SHIFT),
        ),
        ("PMCTRS_ALL_CPUS".into(), abi::PMCTRS_ALL_CPUS),
        ("PFM_INFO_VERSION".into(), abi::PFM_INFO_VERSION),
        (
            "PFM_INFO_MAX_COUNTERS".into(),
            abi::PFM_INFO_MAX_COUNTERS as u64,
        ),
        ("PFM_FIDELITY_NONE".into(), abi::PFM_FIDELITY_NONE),
        ("PFM_FIDELITY_EXACT".into(), Fidelity::Exact.abi_code()),
        (
            "PFM_FIDELITY_APPROX".into(),
            Fidelity::Approximate.abi_code(),
        ),
        (
            "PFM_FIDELITY_UNAVAILABLE".into(),
            Fidelity::Unavailable.abi_code(),
        ),
        ("PFM_INFO_SHARED".into(), abi::PFM_INFO_SHARED),
        ("PFM_INFO_LOGSELECT".into(), abi::PFM_INFO_LOGSELECT),
        ("PFM_INFO_ENABLED".into(), abi::PFM_INFO_ENABLED),
        ("PFM_INFO_USER_ONLY".into(), abi::PFM_INFO_USER_ONLY),
        ("PFM_INFO_URING".into(), abi::PFM_INFO_URING),
        ("PFM_MODE_ONE".into(), abi::PFM_MODE_ONE),
        ("PFM_MODE_EACH".into(), abi::PFM_MODE_EACH),
        ("PFM_MODE_ALL".into(), abi::PFM_MODE_ALL),
        ("PFM_FAMILY_EV4".into(), Family::Ev4 as u64),
        ("PFM_FAMILY_EV5".into(), Family::Ev5 as u64),
        ("PFM_FAMILY_EV6".into(), Family::Ev6 as u64),
        ("PF_C0_INT_EVERY_65536".into(), ev4::PF_C0_INT_EVERY_65536),
        ("PF_C0_INT_EVERY_4096".into(), ev4::PF_C0_INT_EVERY_4096),
        ("PF_C1_INT_EVERY_4096".into(), ev4::PF_C1_INT_EVERY_4096),
        ("PF_C1_INT_EVERY_256".into(), ev4::PF_C1_INT_EVERY_256),
    ];
    for imp in Implementation::ALL {
        v.push((
            format!("PFM_IMPL_{}", imp.name().to_ascii_uppercase()),
            imp as u64,
        ));
    }
    for table in ev4::EVENTS {
        for e in table {
            v.push((e.name.to_string(), e.code));
        }
    }
    v
}

/// Every constant the header must define, with its value: Appendix A, the
/// extension's fixed values, the PF67_PM enum and the Rust side, which must
/// agree wherever they overlap.
fn expected_constants() -> BTreeMap<String, u64> {
    let mut m: BTreeMap<String, u64> = BTreeMap::new();
    for (name, value) in APPENDIX_A.iter().chain(EXTENSION) {
        assert!(
            m.insert(name.to_string(), *value).is_none(),
            "{name} twice in the test's tables"
        );
    }
    for (i, stat) in PF67_PM.iter().enumerate() {
        m.insert(format!("PF67_PM_{stat}"), i as u64);
    }
    for (name, value) in rust_constants() {
        if let Some(contract) = m.get(&name) {
            assert_eq!(
                *contract, value,
                "{name}: the Rust side has {value:#x}, docs/device.md {contract:#x}"
            );
        }
        m.insert(name, value);
    }
    m
}

#[test]
fn rust_open_modes_are_the_contract_re_encoding() {
    // docs/device.md §2: ONE = O_DSYNC, EACH = O_APPEND, ALL = MASK = both.
    assert_eq!(abi::PCNTOPENONE, libc::O_DSYNC);
    assert_eq!(abi::PCNTOPENEACH, libc::O_APPEND);
    assert_eq!(abi::PCNTOPENALL, libc::O_DSYNC | libc::O_APPEND);
    assert_eq!(abi::PCNTOPENMASK, libc::O_DSYNC | libc::O_APPEND);
    // Every EV4 event of docs/device.md is in the Rust tables, and no other.
    let rust: BTreeSet<&str> = ev4::EVENTS
        .iter()
        .flat_map(|t| t.iter().map(|e| e.name))
        .collect();
    let contract: BTreeSet<&str> = APPENDIX_A
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.starts_with("PF_") && !n.starts_with("PF_C"))
        .chain(["PF_CYCLES"])
        .collect();
    assert_eq!(rust, contract);
}

// ---------------------------------------------------------------------------
// Structures.

struct Layout {
    c: &'static str,
    size: usize,
    align: usize,
    /// (C member, offset, size)
    fields: Vec<(&'static str, usize, usize)>,
}

fn field_size<T, F>(_: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

macro_rules! layout {
    ($c:expr, $t:ty, [$($f:ident),* $(,)?]) => {
        Layout {
            c: $c,
            size: size_of::<$t>(),
            align: align_of::<$t>(),
            fields: vec![$((stringify!($f), offset_of!($t, $f), field_size(|s: &$t| &s.$f))),*],
        }
    };
}

fn layouts() -> Vec<Layout> {
    vec![
        Layout {
            c: "struct iccsr",
            size: size_of::<Iccsr>(),
            align: align_of::<Iccsr>(),
            fields: vec![],
        },
        layout!("struct pfcntrs", PfCntrs, [pf_cntr0, pf_cntr1, pr_cycle]),
        layout!(
            "struct pfcntrs_ev5",
            PfCntrsEv5,
            [pr_cycle, pf_cntr0, pf_cntr1, pf_cntr2]
        ),
        layout!(
            "struct pfcntrs_ev6",
            PfCntrsEv6,
            [pr_cycle, pf_cntr0, pf_cntr1]
        ),
        layout!("struct pfipls", PfIpls, [ipl]),
        layout!("struct addr_range", AddrRange, [start, end]),
        layout!("addr_range_t", AddrRangeT, [start, end, stride, res0]),
        Layout {
            c: "union pmctrs_ev5",
            size: size_of::<PmctrsEv5>(),
            align: align_of::<PmctrsEv5>(),
            fields: vec![("pmctrs_ev5_long", 0, size_of::<u64>())],
        },
        Layout {
            c: "union pmctrs_ev6",
            size: size_of::<PmctrsEv6>(),
            align: align_of::<PmctrsEv6>(),
            fields: vec![("pmctrs_ev6_long", 0, size_of::<u64>())],
        },
        // No Rust counterpart: one 64-bit register image each (Appendix A).
        Layout {
            c: "ev67_istat_reg_t",
            size: 8,
            align: 8,
            fields: vec![("qval", 0, 8)],
        },
        Layout {
            c: "ev67_pctr_ctl_reg_t",
            size: 8,
            align: 8,
            fields: vec![("qval", 0, 8)],
        },
        layout!(
            "struct pfm_info",
            PfmInfo,
            [
                pi_version,
                pi_family,
                pi_impl,
                pi_ncpus,
                pi_ncounters,
                pi_open_mode,
                pi_items,
                pi_flags,
                pi_cpu_khz,
                pi_width,
                pi_fidelity,
                pi_period,
                pi_sample_period,
                pi_lost_samples,
                pi_throttled,
                pi_online,
                pi_reopened,
                pi_reserved,
            ]
        ),
    ]
}

// ---------------------------------------------------------------------------
// Bit-fields: docs/device.md's layouts, from bit 0 (§4, Appendix A). An empty
// name is an unnamed pad.

type Fields = &'static [(&'static str, u32)];

const ICCSR_BITS: Fields = &[
    ("iccsr_pc1", 1),
    ("iccsr_ign0", 2),
    ("iccsr_pc0", 1),
    ("iccsr_ign1", 4),
    ("iccsr_mux0", 4),
    ("iccsr_ign2", 20),
    ("iccsr_mux1", 3),
    ("iccsr_disable", 2),
    ("iccsr_ign3", 27),
];
const PMCTRS_EV5_BITS: Fields = &[
    ("pmctrs_ev5_select", 3),
    ("", 5),
    ("pmctrs_ev5_cpu", 8),
    ("pmctrs_ev5_cntr2", 14),
    ("", 2),
    ("pmctrs_ev5_cntr1", 16),
    ("pmctrs_ev5_cntr0", 16),
];
const PMCTRS_EV6_BITS: Fields = &[
    ("pmctrs_ev6_select", 2),
    ("", 4),
    ("pmctrs_ev6_cntr1", 20),
    ("", 2),
    ("pmctrs_ev6_cntr0", 20),
    ("", 8),
    ("pmctrs_ev6_cpu", 8),
];
const ISTAT_BITS: Fields = &[
    ("fields.res_0", 29),
    ("fields.par", 1),
    ("fields.ovr", 3),
    ("fields.icm", 1),
    ("fields.ttype", 4),
    ("fields.lso", 1),
    ("fields.trp", 1),
    ("fields.mis", 1),
    ("fields.res_1", 23),
];
const PCTR_CTL_BITS: Fields = &[
    ("fields.tak", 1),
    ("fields.val", 1),
    ("fields.sl1", 2),
    ("fields.sl0", 1),
    ("fields.res_0", 1),
    ("fields.pctr1", 20),
    ("fields.kb4map", 1),
    ("fields.mstall", 1),
    ("fields.pctr0", 20),
    ("fields.sext", 16),
];

const BITFIELD_TYPES: &[(&str, Fields)] = &[
    ("struct iccsr", ICCSR_BITS),
    ("union pmctrs_ev5", PMCTRS_EV5_BITS),
    ("union pmctrs_ev6", PMCTRS_EV6_BITS),
    ("ev67_istat_reg_t", ISTAT_BITS),
    ("ev67_pctr_ctl_reg_t", PCTR_CTL_BITS),
];

/// (name, shift, width) of the named fields.
fn positions(fields: Fields) -> Vec<(&'static str, u32, u32)> {
    let mut shift = 0;
    let mut out = Vec::new();
    for (name, width) in fields {
        if !name.is_empty() {
            out.push((*name, shift, *width));
        }
        shift += width;
    }
    assert_eq!(shift, 64, "the fields fill one 64-bit word");
    out
}

fn mask(width: u32) -> u64 {
    if width == 64 {
        u64::MAX
    } else {
        (1 << width) - 1
    }
}

type Accessor<T> = (&'static str, fn(T) -> u64);

const ICCSR_ACCESSORS: &[Accessor<Iccsr>] = &[
    ("iccsr_pc1", Iccsr::pc1),
    ("iccsr_ign0", Iccsr::ign0),
    ("iccsr_pc0", Iccsr::pc0),
    ("iccsr_ign1", Iccsr::ign1),
    ("iccsr_mux0", Iccsr::mux0),
    ("iccsr_ign2", Iccsr::ign2),
    ("iccsr_mux1", Iccsr::mux1),
    ("iccsr_disable", Iccsr::disable),
    ("iccsr_ign3", Iccsr::ign3),
];
const EV5_ACCESSORS: &[Accessor<PmctrsEv5>] = &[
    ("pmctrs_ev5_select", PmctrsEv5::select),
    ("pmctrs_ev5_cpu", PmctrsEv5::cpu),
    ("pmctrs_ev5_cntr0", PmctrsEv5::cntr0),
    ("pmctrs_ev5_cntr1", PmctrsEv5::cntr1),
    ("pmctrs_ev5_cntr2", PmctrsEv5::cntr2),
];
const EV6_ACCESSORS: &[Accessor<PmctrsEv6>] = &[
    ("pmctrs_ev6_select", PmctrsEv6::select),
    ("pmctrs_ev6_cpu", PmctrsEv6::cpu),
    ("pmctrs_ev6_cntr0", PmctrsEv6::cntr0),
    ("pmctrs_ev6_cntr1", PmctrsEv6::cntr1),
];

/// The Rust accessors read `word` (field `name` all ones) as the C did.
fn check_accessors<T: Copy>(
    what: &str,
    accessors: &[Accessor<T>],
    name: &str,
    width: u32,
    word: T,
) {
    let mut found = false;
    for (field, get) in accessors {
        let want = if *field == name {
            found = true;
            mask(width)
        } else {
            0
        };
        assert_eq!(
            get(word),
            want,
            "{what}: with C field {name} all ones, Rust {field} reads wrong"
        );
    }
    assert!(found, "{what}: no Rust accessor for {name}");
}

// ---------------------------------------------------------------------------
// The C program.

fn dump_program(names: &HeaderNames) -> String {
    let mut c = String::new();
    c.push_str(
        r#"#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <sys/pfcntr.h>

#define IOCTL(n)	printf("ioctl\t%s\t%lu\n", #n, (unsigned long)(n));
#define CONST(n)	printf("const\t%s\t%llu\n", #n, (unsigned long long)(n));
#define SIZE(t)		printf("size\t%s\t%lu\t%lu\n", #t, (unsigned long)sizeof(t), \
			    (unsigned long)__alignof__(t));
#define OFF(t, f)	printf("offset\t%s\t%s\t%lu\t%lu\n", #t, #f, \
			    (unsigned long)offsetof(t, f), (unsigned long)sizeof(((t *)0)->f));
#define WORD(tag, v)	do { unsigned long w_; memcpy(&w_, &(v), sizeof w_); \
			    printf("word\t%s\t%lu\n", tag, w_); } while (0)
#define BITS(t, f)	do { t v_; memset(&v_, 0, sizeof v_); v_.f = 0; v_.f--; \
			    WORD(#t "\t" #f, v_); } while (0)

int main(void)
{
"#,
    );
    for n in &names.ioctls {
        writeln!(c, "\tIOCTL({n})").unwrap();
    }
    for n in names.constants.iter().chain(&names.enumerators) {
        writeln!(c, "\tCONST({n})").unwrap();
    }
    for l in layouts() {
        writeln!(c, "\tSIZE({})", l.c).unwrap();
        for (f, _, _) in &l.fields {
            writeln!(c, "\tOFF({}, {f})", l.c).unwrap();
        }
    }
    for (t, fields) in BITFIELD_TYPES {
        for (f, _, _) in positions(fields) {
            writeln!(c, "\tBITS({t}, {f});").unwrap();
        }
    }
    c.push_str(
        r#"	{
		struct iccsr i;
		union pmctrs_ev5 u5;
		union pmctrs_ev6 u6;

		memset(&i, 0, sizeof i);
		i.iccsr_mux0 = PF_CYCLES;
		i.iccsr_mux1 = PF_BRANCHMISS;
		i.iccsr_pc0 = PF_C0_INT_EVERY_4096;
		i.iccsr_pc1 = PF_C1_INT_EVERY_256;
		i.iccsr_disable = 2;
		WORD("example_iccsr", i);

		u5.pmctrs_ev5_long = 0;
		u5.pmctrs_ev5_select = PF5_SEL_COUNTER_0 | PF5_SEL_COUNTER_2;
		u5.pmctrs_ev5_cpu = PMCTRS_ALL_CPUS;
		u5.pmctrs_ev5_cntr0 = 0xabcd;
		u5.pmctrs_ev5_cntr1 = 0x1234;
		u5.pmctrs_ev5_cntr2 = 0x2bcd;
		printf("word\texample_pmctrs_ev5\t%lu\n", (unsigned long)u5.pmctrs_ev5_long);

		u6.pmctrs_ev6_long = 0;
		u6.pmctrs_ev6_select = PF6_SEL_COUNTER_1;
		u6.pmctrs_ev6_cpu = 3;
		u6.pmctrs_ev6_cntr0 = 0xfedcb;
		u6.pmctrs_ev6_cntr1 = 0x12345;
		printf("word\texample_pmctrs_ev6\t%lu\n", (unsigned long)u6.pmctrs_ev6_long);
	}
	return 0;
}
"#,
    );
    c
}

#[derive(Debug, Default)]
struct Dump {
    ioctls: BTreeMap<String, u64>,
    consts: BTreeMap<String, u64>,
    /// C type → (size, align)
    sizes: BTreeMap<String, (usize, usize)>,
    /// (C type, field) → (offset, size)
    offsets: BTreeMap<(String, String), (usize, usize)>,
    /// tag → word
    words: BTreeMap<String, u64>,
}

fn parse_dump(out: &str) -> Dump {
    let mut d = Dump::default();
    for line in out.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let num = |s: &str| -> u64 { s.parse().unwrap_or_else(|_| panic!("bad line {line:?}")) };
        match f.as_slice() {
            ["ioctl", n, v] => {
                assert!(d.ioctls.insert(n.to_string(), num(v)).is_none());
            }
            ["const", n, v] => {
                assert!(d.consts.insert(n.to_string(), num(v)).is_none());
            }
            ["size", t, s, a] => {
                d.sizes
                    .insert(t.to_string(), (num(s) as usize, num(a) as usize));
            }
            ["offset", t, f, o, s] => {
                d.offsets.insert(
                    (t.to_string(), f.to_string()),
                    (num(o) as usize, num(s) as usize),
                );
            }
            ["word", t, f, w] => {
                d.words.insert(format!("{t}\t{f}"), num(w));
            }
            ["word", tag, w] => {
                d.words.insert(tag.to_string(), num(w));
            }
            _ => panic!("unexpected line {line:?}"),
        }
    }
    d
}

/// Compiles the dump program with `compiler` and `flags`, runs it, parses it.
fn dump_with(test: &str, compiler: &str, flags: &[&str], names: &HeaderNames) -> Dump {
    let dir = scratch(test);
    let ext = if compiler == "g++" { "cc" } else { "c" };
    let src = dir.join(format!("dump.{ext}"));
    let exe = dir.join("dump");
    fs::write(&src, dump_program(names)).unwrap();
    run(Command::new(compiler)
        .args(flags)
        .arg("-I")
        .arg(include_dir())
        .arg("-o")
        .arg(&exe)
        .arg(&src));
    let out = run(&mut Command::new(&exe));
    let _ = fs::remove_dir_all(&dir);
    parse_dump(&out)
}

fn check_dump(d: &Dump, names: &HeaderNames) {
    // Ioctls: the header's, Rust's ALL and the C output are the same set with
    // the same numbers.
    let rust: BTreeMap<String, u64> = numbers::ALL
        .iter()
        .map(|(n, v)| (n.to_string(), u64::from(*v)))
        .collect();
    assert_eq!(rust.len(), numbers::ALL.len(), "duplicate names in ALL");
    let header: BTreeSet<&String> = names.ioctls.iter().collect();
    let rust_names: BTreeSet<&String> = rust.keys().collect();
    assert_eq!(
        header, rust_names,
        "ioctls of the header vs numbers::ALL (left header, right Rust)"
    );
    for (name, value) in &rust {
        let c = d
            .ioctls
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in the C output"));
        assert_eq!(
            c,
            value,
            "{name}: C {c:#x}, Rust {value:#x} (dir {}/{}, size {}/{}, nr {}/{})",
            c >> 30,
            value >> 30,
            (c >> 16) & 0x3fff,
            (value >> 16) & 0x3fff,
            c & 0xff,
            value & 0xff
        );
        assert_eq!(numbers::kind(*c as u32), u32::from(b'P'), "{name} type");
    }
    assert_eq!(d.ioctls.len(), rust.len());

    // Constants: the header defines exactly the expected names, with the
    // expected values.
    let expected = expected_constants();
    for (name, value) in &expected {
        let c = d
            .consts
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing from the header"));
        assert_eq!(c, value, "{name}: C {c:#x}, expected {value:#x}");
    }
    for name in d.consts.keys() {
        assert!(
            expected.contains_key(name),
            "{name} is in the header but not in the contract or the Rust ABI"
        );
    }
    let pm: Vec<String> = PF67_PM.iter().map(|s| format!("PF67_PM_{s}")).collect();
    assert_eq!(names.enumerators, pm, "PF67_PM_* enum, in order");

    // Accessor macros.
    let accessors: BTreeSet<&str> = names.accessors.iter().map(String::as_str).collect();
    let want: BTreeSet<&str> = EV5_ACCESSORS
        .iter()
        .map(|(n, _)| *n)
        .chain(EV6_ACCESSORS.iter().map(|(n, _)| *n))
        .collect();
    assert_eq!(accessors, want, "pmctrs accessor macros");

    // Sizes and offsets.
    for l in layouts() {
        let (size, align) = d.sizes[l.c];
        assert_eq!((size, align), (l.size, l.align), "{}: size, align", l.c);
        let mut covered = 0;
        for (f, off, fsize) in &l.fields {
            let c = d.offsets[&(l.c.to_string(), f.to_string())];
            assert_eq!(c, (*off, *fsize), "{}.{f}: offset, size", l.c);
            covered += fsize;
        }
        if !l.fields.is_empty() && !l.c.starts_with("union") && !l.c.starts_with("ev67") {
            assert_eq!(covered, size, "{}: fields cover it with no padding", l.c);
        }
    }
    // The ioctl sizes are the LP64 sizes of the Tru64 types.
    let size_of_c = |t: &str| d.sizes[t].0 as u32;
    assert_eq!(
        numbers::size(numbers::PCNTSETMUX),
        size_of_c("struct iccsr")
    );
    assert_eq!(
        numbers::size(numbers::PCNTSETUADDR),
        size_of_c("struct addr_range")
    );
    assert_eq!(
        numbers::size(numbers::PCNTSETKRANGE),
        size_of_c("addr_range_t")
    );
    assert_eq!(
        numbers::size(numbers::PCNTGETINFO),
        size_of_c("struct pfm_info")
    );
    assert_eq!(numbers::size(numbers::PCNTGETCNT), 8, "a pointer");

    // Bit-fields: positions from the contract, and the Rust accessors agree.
    for (t, fields) in BITFIELD_TYPES {
        for (f, shift, width) in positions(fields) {
            let word = d.words[&format!("{t}\t{f}")];
            assert_eq!(
                word,
                mask(width) << shift,
                "{t} {f}: expected bits {shift}..{}",
                shift + width
            );
            match *t {
                "struct iccsr" => check_accessors(t, ICCSR_ACCESSORS, f, width, Iccsr(word)),
                "union pmctrs_ev5" => check_accessors(t, EV5_ACCESSORS, f, width, PmctrsEv5(word)),
                "union pmctrs_ev6" => check_accessors(t, EV6_ACCESSORS, f, width, PmctrsEv6(word)),
                _ => {}
            }
        }
    }

    // Whole words built in C the way a legacy program builds them.
    let iccsr = Iccsr(d.words["example_iccsr"]);
    assert_eq!(iccsr, Iccsr::new(0xa, 0x3, 1, 1, 2));
    let sel = ev4::decode(iccsr).expect("a valid ICCSR image");
    assert_eq!(sel.counters[0].event.name, "PF_CYCLES");
    assert_eq!(sel.counters[0].period, 4096);
    assert!(sel.counters[0].enabled);
    assert_eq!(sel.counters[1].event.name, "PF_BRANCHMISS");
    assert_eq!(sel.counters[1].period, 256);
    assert!(!sel.counters[1].enabled);
    assert_eq!(
        PmctrsEv5(d.words["example_pmctrs_ev5"]),
        PmctrsEv5::new(5, 0xff, 0xabcd, 0x1234, 0x2bcd)
    );
    assert_eq!(
        PmctrsEv6(d.words["example_pmctrs_ev6"]),
        PmctrsEv6::new(2, 3, 0xfedcb, 0x12345)
    );
}

const WARN: &[&str] = &["-Wall", "-Wextra", "-Werror"];

fn flags(extra: &[&'static str]) -> Vec<&'static str> {
    WARN.iter().chain(extra).copied().collect()
}

/// Strict ISO C99: glibc hides O_DSYNC, so the header falls back to __O_DSYNC.
#[test]
fn abi_matches_in_strict_c99() {
    let names = header_names();
    let d = dump_with("c99", "gcc", &flags(&["-std=c99", "-pedantic"]), &names);
    check_dump(&d, &names);
}

/// GNU C with every feature macro: O_DSYNC itself.
#[test]
fn abi_matches_in_gnu_c() {
    let names = header_names();
    let d = dump_with(
        "gnu11",
        "gcc",
        &flags(&["-std=gnu11", "-D_GNU_SOURCE"]),
        &names,
    );
    check_dump(&d, &names);
}

#[test]
fn abi_matches_in_cxx() {
    let names = header_names();
    let d = dump_with("cxx", "g++", &flags(&[]), &names);
    check_dump(&d, &names);
}

// ---------------------------------------------------------------------------
// The header on its own: self-contained, guarded, clean under every dialect a
// legacy or modern program might use, and free of kernel-only names.

const USE_HEADER: &str = r#"#include <sys/pfcntr.h>
#include <sys/pfcntr.h>

#if defined(PFM_CLOSED) || defined(PFM_KSAMPLES) || defined(PFM_USAMPLES) || \
    defined(PFM_CALLER) || defined(PFM_MASK) || defined(PFDISABLE) || \
    defined(PFENABLE) || defined(PFSET) || defined(PFOPT) || defined(PF5MUXSEL) || \
    defined(PF6READISTAT) || defined(PFRPCC) || defined(PF5SETCTRS) || \
    defined(PF5_MUX_KMASK) || defined(PF5_CTXT_KMASK) || defined(PF6_CPU_KMASK) || \
    defined(PF6_MUX_KMASK) || defined(PF5_FREQ_KMASK)
#error kernel-only name in the user header
#endif

int main(void)
{
	struct iccsr iccsr;
	struct pfcntrs cntrs[2];
	struct pfcntrs *pfcntrs = cntrs;
	struct pfcntrs_ev5 c5;
	struct pfcntrs_ev6 c6;
	struct pfipls ipls;
	struct addr_range ar;
	addr_range_t art;
	union pmctrs_ev5 u5;
	union pmctrs_ev6 u6;
	ev67_istat_reg_t istat;
	ev67_pctr_ctl_reg_t pctl;
	struct pfm_info info;
	unsigned long sum;
	int flags = 0 | PCNTOPENONE | PCNTOPENEACH | PCNTOPENALL | PCNTOPENMASK;

	iccsr.iccsr_pc1 = PF_C1_INT_EVERY_256;
	iccsr.iccsr_pc0 = PF_C0_INT_EVERY_4096;
	iccsr.iccsr_mux0 = PF_CYCLES;
	iccsr.iccsr_mux1 = PF_DCACHE;
	iccsr.iccsr_disable = 2;
	iccsr.iccsr_ign0 = iccsr.iccsr_ign1 = iccsr.iccsr_ign2 = iccsr.iccsr_ign3 = 0;
	cntrs[0].pf_cntr0 = cntrs[0].pf_cntr1 = cntrs[0].pr_cycle = 0;
	c5.pr_cycle = c5.pf_cntr0 = c5.pf_cntr1 = c5.pf_cntr2 = 0;
	c6.pr_cycle = c6.pf_cntr0 = c6.pf_cntr1 = 0;
	ipls.ipl[8] = 0;
	ar.start = ar.end = 0;
	art.start = art.end = art.stride = art.res0 = 0;
	u5.pmctrs_ev5_long = 0;
	u5.pmctrs_ev5_select = PF5_SEL_COUNTER_0 | PF5_SEL_COUNTER_1 | PF5_SEL_COUNTER_2;
	u5.pmctrs_ev5_cpu = PMCTRS_ALL_CPUS;
	u5.pmctrs_ev5_cntr0 = u5.pmctrs_ev5_cntr1 = u5.pmctrs_ev5_cntr2 = 0;
	u6.pmctrs_ev6_long = 0;
	u6.pmctrs_ev6_select = PF6_SEL_COUNTER_0 | PF6_SEL_COUNTER_1;
	u6.pmctrs_ev6_cpu = PMCTRS_ALL_CPUS;
	u6.pmctrs_ev6_cntr0 = u6.pmctrs_ev6_cntr1 = 0;
	istat.qval = 0;
	istat.fields.ovr = 1;
	pctl.qval = 0;
	pctl.fields.pctr0 = 1;
	info.pi_version = PFM_INFO_VERSION;
	info.pi_width[PFM_INFO_MAX_COUNTERS - 1] = PF5_C2_WIDTH;

	sum = PCNTRDISABLE + PCNTRENABLE + PCNTLOGALL + PCNTLOGSELECT + PCNTCLEARCNT +
	    PCNTCLEARPCBPME + PCNTCALLER + PCNTGETRSIZE + PCNTGETIPLHIS + PCNTSETITEMS +
	    PCNTSETUADDR + PCNTSETKADDR + PCNTSETURANGE + PCNTSETKRANGE + PCNTSETMUX +
	    PCNTGETCNT + PCNT5CTXTS + PCNT5MUX + PCNT5FREQ + PCNT5DISABLE + PCNT5ENABLE +
	    PCNT5CLEAR + PCNT5RESTART + PCNT5SETCNTRS + PCNT5GETCNTRS + PCNT5GETCNT +
	    PCNT5READCNTRS + PCNT6MUX + PCNT6ENABWRITE + PCNT6DISABLE + PCNT6ENABLE +
	    PCNT6CLEAR + PCNT6RESTART + PCNT6SETCNTRS + PCNT6GETCNTRS + PCNT6GETCNT +
	    PCNT6READCNTRS + PCNTGETINFO;
	sum += PFM_COUNTERS | PFM_IPL | PFM_PROFILING;
	sum += (PF67_PM_VALID << PFM_PROFME_MODE_SHIFT) & PFM_PROFME_MODE_MASK;
	sum += PF5_MUX0_ISSUES | PF5_MUX1_C_SYS_REQ | PF5_MUX2_C_SYS_READ_REQ;
	sum += PF6_MUX0_RET_INSTRUCTIONS | PF6_MUX1_REPLAY_TRAP | PF67_PROFILE_ME_MODE;
	sum += PFM_FIDELITY_EXACT + PFM_MODE_ALL + PFM_FAMILY_EV6 + PFM_IMPL_EV67 + PFM_INFO_SHARED;
	sum += iccsr.iccsr_mux0 + pfcntrs->pf_cntr0 + c5.pr_cycle + c6.pr_cycle + ipls.ipl[8];
	sum += ar.end + art.res0 + u5.pmctrs_ev5_long + u6.pmctrs_ev6_long;
	sum += istat.qval + pctl.qval + info.pi_version + info.pi_width[2];
	return (int)(sum & 1) + flags;
}
"#;

#[test]
fn header_compiles_cleanly_everywhere() {
    let dir = scratch("compile");
    let c = dir.join("use.c");
    let cc = dir.join("use.cc");
    fs::write(&c, USE_HEADER).unwrap();
    fs::write(&cc, USE_HEADER).unwrap();
    let variants: &[(&str, &[&str], &Path)] = &[
        // Required by the project.
        ("gcc", &["-std=c99"], &c),
        ("gcc", &["-std=c99", "-pedantic"], &c),
        ("g++", &[], &cc),
        // What a 1995 program and a modern one would also use.
        ("gcc", &["-std=c89", "-pedantic"], &c),
        (
            "gcc",
            &["-std=c11", "-pedantic", "-D_POSIX_C_SOURCE=200809L"],
            &c,
        ),
        ("gcc", &["-std=gnu11", "-D_GNU_SOURCE"], &c),
        ("g++", &["-std=c++98", "-pedantic"], &cc),
        ("g++", &["-std=c++17", "-pedantic"], &cc),
    ];
    for (compiler, extra, src) in variants {
        run(Command::new(compiler)
            .args(WARN)
            .args(*extra)
            .arg("-fsyntax-only")
            .arg("-I")
            .arg(include_dir())
            .arg(src));
    }
    let _ = fs::remove_dir_all(&dir);
}

/// A Tru64-era source that, like the original header's users, gets
/// `<sys/types.h>` (`ulong`, `u_int`, `caddr_t`) and the `_PFCNTR_H_` guard
/// from `<sys/pfcntr.h>` alone: the Tru64 header included `<sys/types.h>`
/// first. Compiled in the compiler's default (GNU) dialects, where glibc
/// declares those BSD names, and in strict ISO C, where the header does.
const LEGACY_TYPES: &str = r#"#include <sys/pfcntr.h>
#include <stdio.h>

#ifndef _PFCNTR_H_
#error "<sys/pfcntr.h> does not define the Tru64 guard _PFCNTR_H_"
#endif

static ulong counts[3];
static u_int ncpus = 1;
static caddr_t text_start;
static uint buckets;
static u_long range;
static ushort cpu16;
static u_short port;
static u_char byte;

int
main(void)
{
	struct pfcntrs cntrs[1];
	struct pfcntrs *pfcntrs = cntrs;

	cntrs[0].pf_cntr0 = 1;
	counts[0] = pfcntrs->pf_cntr0;
	text_start = (caddr_t)0;
	printf("%lu %u %d %u %lu %u %u %u\n", counts[0], ncpus, text_start == 0,
	    buckets, range, (unsigned)cpu16, (unsigned)port, (unsigned)byte);
	return 0;
}
"#;

#[test]
fn header_brings_sys_types_like_tru64() {
    let dir = scratch("legacy-types");
    let c = dir.join("legacy.c");
    fs::write(&c, LEGACY_TYPES).unwrap();
    for extra in [
        &[][..],
        &["-std=gnu89"][..],
        &["-std=gnu99"][..],
        &["-std=c89", "-pedantic"][..],
        &["-std=c99", "-pedantic"][..],
        &["-std=c11", "-pedantic"][..],
    ] {
        run(Command::new("gcc")
            .args(WARN)
            .args(extra)
            .arg("-fsyntax-only")
            .arg("-I")
            .arg(include_dir())
            .arg(&c));
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn header_has_no_kernel_only_names() {
    let code = header_code();
    for name in [
        "PFM_CLOSED",
        "PFM_KSAMPLES",
        "PFM_USAMPLES",
        "PFM_CALLER",
        "PFM_MASK",
        "WRPERFMON",
        "_KMASK",
        "_KSHIFT",
        "PFDISABLE",
        "PF5MUXSEL",
        "PF6READPMPC",
        "PFRPCC",
    ] {
        for line in code.lines() {
            assert!(
                !line.contains(name),
                "kernel-only {name} in the header: {line}"
            );
        }
    }
}
