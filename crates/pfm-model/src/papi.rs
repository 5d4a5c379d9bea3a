//! PAPI preset names (`PAPI_TOT_CYC`, `PAPI_L1_DCM`, ...) the models can
//! answer to. PAPI's presets are portable names for common events; a model
//! maps one to its own event only where that event means what PAPI says
//! (each family's `tools.rs` holds its table, [`crate::Model::papi_presets`]
//! lists them). Where the chip has nothing with that meaning there is no
//! mapping, so a preset never counts something else under PAPI's name: the
//! EV6's `PF6_MUX1_RET_BRANCH_MISPREDICTS` counts cycles, so the EV6 has no
//! `PAPI_BR_MSP`; its `PF6_MUX1_RET_DTB_SINGLE_MISSES` counts each miss
//! twice and leaves double misses out, so it has no `PAPI_TLB_DM`; the
//! EV4's `PF_ISSUES` counts half the issues, so the EV4 has no
//! `PAPI_TOT_INS`.

/// `(preset, PAPI's meaning)`: every preset some model maps, with the
/// description PAPI gives it (papi_avail).
pub static PRESETS: &[(&str, &str)] = &[
    ("PAPI_TOT_CYC", "Total cycles"),
    ("PAPI_TOT_INS", "Instructions completed"),
    ("PAPI_TOT_IIS", "Instructions issued"),
    ("PAPI_INT_INS", "Integer instructions"),
    ("PAPI_FP_INS", "Floating point instructions"),
    ("PAPI_LD_INS", "Load instructions"),
    ("PAPI_SR_INS", "Store instructions"),
    ("PAPI_BR_INS", "Branch instructions"),
    ("PAPI_BR_CN", "Conditional branch instructions"),
    (
        "PAPI_BR_MSP",
        "Conditional branch instructions mispredicted",
    ),
    ("PAPI_FUL_ICY", "Cycles with maximum instruction issue"),
    ("PAPI_L1_DCA", "Level 1 data cache accesses"),
    ("PAPI_L1_DCM", "Level 1 data cache misses"),
    ("PAPI_L1_ICA", "Level 1 instruction cache accesses"),
    ("PAPI_L1_ICM", "Level 1 instruction cache misses"),
    ("PAPI_L2_TCA", "Level 2 total cache accesses"),
    ("PAPI_L2_TCM", "Level 2 cache misses"),
    ("PAPI_L3_TCA", "Level 3 total cache accesses"),
    ("PAPI_L3_TCM", "Level 3 cache misses"),
    ("PAPI_TLB_DM", "Data translation lookaside buffer misses"),
    (
        "PAPI_TLB_IM",
        "Instruction translation lookaside buffer misses",
    ),
];

/// PAPI's meaning of `preset` (any case), if it is one of [`PRESETS`].
pub fn meaning(preset: &str) -> Option<&'static str> {
    PRESETS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(preset))
        .map(|(_, meaning)| *meaning)
}

/// True when `name` is spelled like a PAPI preset (`PAPI_` and more), known
/// here or not.
pub fn looks_like_preset(name: &str) -> bool {
    name.len() > 5
        && name
            .get(..5)
            .is_some_and(|p| p.eq_ignore_ascii_case("PAPI_"))
}
