//! The models by implementation: what the daemon and the tools ask of a
//! model without naming its family. A new model in an existing family is
//! one entry here.

use crate::{AlphaEvent, CostRow, Derivation, Family, Implementation, MAX_COUNTERS, ev4, ev5, ev6};

/// `(alias, Alpha name)`: a short name the tools accept for an event.
pub type Alias = (&'static str, &'static str);

/// A `PCNT6MUX` word that selects both counters at once (the EV67's
/// aggregate pairs and profile-me mode).
pub use crate::ev6::Ev67Pair as Pair;

/// The fixed facts of one emulated implementation.
#[derive(Debug)]
pub struct Model {
    pub implementation: Implementation,
    /// Counter widths in bits; also the number of counters.
    pub widths: &'static [u32],
    /// The periods the counters have before any selection.
    pub first_periods: [u64; MAX_COUNTERS],
    /// Per counter, every period its period ioctl can choose.
    pub periods: &'static [&'static [u64]],
    /// Every event, counter by counter (EV5: each counter's base table, then
    /// its Cbox table for that implementation).
    pub events: &'static [&'static [AlphaEvent]],
    /// The words that select events pairwise; empty where each counter
    /// selects its own event.
    pub pairs: &'static [Pair],
    /// Short names for events, in segments (a family's common names, then
    /// its Cbox table's).
    pub aliases: &'static [&'static [Alias]],
    /// PAPI preset names for events (crate::papi), in segments as
    /// `aliases`: only where the model's event means what the preset does.
    pub papi: &'static [&'static [Alias]],
    /// What `pfmstat` counts without `-e`: every counter busy with what
    /// perfex users look at first (cycles, instructions, branches).
    pub default_events: &'static [&'static str],
    /// The events that count cycles, in preference order; the first, on
    /// counter 0, is the one a profile samples by default.
    pub cycle_events: &'static [&'static str],
    /// `pfmstat -y`'s derived statistics after the run time, in order, in
    /// segments as `aliases`.
    pub statistics: &'static [&'static [Derivation]],
    /// The built-in cost of every event (a family's table may hold rows for
    /// its other models' events too).
    pub costs: &'static [CostRow],
    /// Whether `PCNTSETITEMS` takes a profile-me statistic in bits 8..15
    /// (the EV67's ProfileMe hardware).
    pub profile_me: bool,
}

const EV4: [u64; MAX_COUNTERS] = [65536, 4096, 0];
const EV6: [u64; MAX_COUNTERS] = [ev6::PERIOD, ev6::PERIOD, 0];
const EV4_PERIODS: &[&[u64]] = &[&[4096, 65536], &[256, 4096]];
const EV5_PERIODS: &[&[u64]] = &[&[256, 65536], &[256, 65536], &[256, 16384]];
const EV6_PERIODS: &[&[u64]] = &[&[ev6::PERIOD], &[ev6::PERIOD]];

/// The base record of each family; its other models differ only where said.
const EV4_RECORD: Model = Model {
    implementation: Implementation::Ev4,
    periods: EV4_PERIODS,
    widths: &ev4::WIDTHS,
    first_periods: EV4,
    events: &ev4::EVENTS,
    pairs: &[],
    aliases: &[ev4::tools::ALIASES],
    papi: &[ev4::tools::PAPI_PRESETS],
    default_events: ev4::tools::DEFAULT_EVENTS,
    cycle_events: ev4::tools::CYCLE_EVENTS,
    statistics: &[ev4::tools::STATISTICS],
    costs: ev4::costs::COSTS,
    profile_me: false,
};

const EV5_RECORD: Model = Model {
    implementation: Implementation::Ev5,
    periods: EV5_PERIODS,
    widths: &ev5::WIDTHS,
    first_periods: ev5::DEFAULT_PERIODS,
    events: &ev5::EV5_EVENTS,
    pairs: &[],
    aliases: &[ev5::tools::ALIASES, ev5::tools::SCACHE_ALIASES],
    papi: &[ev5::tools::PAPI_PRESETS, ev5::tools::SCACHE_PAPI_PRESETS],
    default_events: ev5::tools::DEFAULT_EVENTS,
    cycle_events: ev5::tools::CYCLE_EVENTS,
    statistics: &[
        ev5::tools::STATISTICS,
        ev5::tools::SCACHE_STATISTICS,
        ev5::tools::LATER_STATISTICS,
        ev5::tools::SCACHE_MEMORY_TIME,
    ],
    costs: ev5::costs::COSTS,
    profile_me: false,
};

const EV6_RECORD: Model = Model {
    implementation: Implementation::Ev6,
    periods: EV6_PERIODS,
    widths: &ev6::WIDTHS,
    first_periods: EV6,
    events: &ev6::EV6_EVENTS,
    pairs: &[],
    aliases: &[ev6::tools::EV6_ALIASES],
    papi: &[ev6::tools::EV6_PAPI_PRESETS],
    default_events: ev6::tools::EV6_DEFAULT_EVENTS,
    cycle_events: ev6::tools::EV6_CYCLE_EVENTS,
    statistics: &[ev6::tools::EV6_STATISTICS],
    costs: ev6::costs::EV6_COSTS,
    profile_me: false,
};

static MODELS: [Model; 7] = [
    EV4_RECORD,
    Model {
        implementation: Implementation::Ev45,
        ..EV4_RECORD
    },
    EV5_RECORD,
    Model {
        implementation: Implementation::Ev56,
        ..EV5_RECORD
    },
    Model {
        implementation: Implementation::Pca56,
        events: &ev5::PCA56_EVENTS,
        aliases: &[ev5::tools::ALIASES, ev5::tools::PCA56_ALIASES],
        papi: &[ev5::tools::PAPI_PRESETS],
        statistics: &[
            ev5::tools::STATISTICS,
            ev5::tools::PCA56_STATISTICS,
            ev5::tools::LATER_STATISTICS,
            ev5::tools::PCA56_MEMORY_TIME,
        ],
        ..EV5_RECORD
    },
    EV6_RECORD,
    Model {
        implementation: Implementation::Ev67,
        events: &ev6::EV67_EVENTS,
        pairs: ev6::EV67_PAIRS,
        aliases: &[ev6::tools::EV67_ALIASES],
        papi: &[ev6::tools::EV67_PAPI_PRESETS],
        default_events: ev6::tools::EV67_DEFAULT_EVENTS,
        cycle_events: ev6::tools::EV67_CYCLE_EVENTS,
        statistics: &[ev6::tools::EV67_STATISTICS],
        costs: ev6::costs::EV67_COSTS,
        profile_me: true,
        ..EV6_RECORD
    },
];

impl Model {
    pub fn of(implementation: Implementation) -> &'static Model {
        MODELS
            .iter()
            .find(|m| m.implementation == implementation)
            .expect("every implementation has a model")
    }

    pub fn family(&self) -> Family {
        self.implementation.family()
    }

    pub fn counters(&self) -> usize {
        self.widths.len()
    }

    /// Every registered model.
    pub fn all() -> impl Iterator<Item = &'static Model> {
        MODELS.iter()
    }

    /// Every event, in catalog order: an event's number is its index.
    pub fn flat_events(&self) -> impl Iterator<Item = &'static AlphaEvent> + use<> {
        self.events.iter().flat_map(|table| table.iter())
    }

    /// The event named `name` exactly.
    pub fn event(&self, name: &str) -> Option<&'static AlphaEvent> {
        self.flat_events().find(|e| e.name == name)
    }

    /// True when the model has an event named `name`, in any case.
    pub fn has_event_named(&self, name: &str) -> bool {
        self.flat_events()
            .any(|e| e.name.eq_ignore_ascii_case(name))
    }

    /// Every alias, in listing order.
    pub fn aliases(&self) -> impl Iterator<Item = &'static Alias> + use<> {
        self.aliases.iter().flat_map(|segment| segment.iter())
    }

    /// Every PAPI preset the model maps, `(preset, Alpha name)`.
    pub fn papi_presets(&self) -> impl Iterator<Item = &'static Alias> + use<> {
        self.papi.iter().flat_map(|segment| segment.iter())
    }

    /// Every derived statistic, in printing order.
    pub fn statistics(&self) -> impl Iterator<Item = &'static Derivation> + use<> {
        self.statistics.iter().flat_map(|segment| segment.iter())
    }

    /// The event a profile samples by default: cycles on counter 0.
    pub fn cycle_event(&self) -> &'static AlphaEvent {
        self.event(self.cycle_events[0])
            .expect("cycle events are events of the model (unit-tested)")
    }

    /// Per counter its shortest period (0 past the last counter): the EV4
    /// counts interrupts, one per period, so this is its resolution.
    pub fn shortest_periods(&self) -> [u64; MAX_COUNTERS] {
        let mut out = [0; MAX_COUNTERS];
        for (slot, periods) in out.iter_mut().zip(self.periods) {
            *slot = periods.iter().copied().min().unwrap_or(0);
        }
        out
    }

    /// The pairs that count (profile-me mode samples instead).
    pub fn counting_pairs(&self) -> impl Iterator<Item = &'static Pair> + use<> {
        self.pairs.iter().filter(|p| !p.profile_me)
    }

    /// True when the model has profile-me mode.
    pub fn has_profile_me(&self) -> bool {
        self.pairs.iter().any(|p| p.profile_me)
    }
}

/// Every event of `implementation`'s tables, counter by counter.
pub fn catalog(implementation: Implementation) -> Vec<&'static [AlphaEvent]> {
    Model::of(implementation).events.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_implementation_has_its_model() {
        for implementation in Implementation::ALL {
            let model = Model::of(implementation);
            assert_eq!(model.implementation, implementation);
            assert!(!model.events.is_empty());
            assert!(model.counters() >= 2 && model.counters() <= MAX_COUNTERS);
            assert_eq!(model.periods.len(), model.counters());
            for (i, first) in model
                .first_periods
                .iter()
                .take(model.counters())
                .enumerate()
            {
                assert!(
                    model.periods[i].contains(first),
                    "{implementation} counter {i}"
                );
            }
        }
    }

    /// Every name a record uses is an event of its model, and what the
    /// tools derive from it holds: defaults fit on distinct counters, the
    /// cycle event is on counter 0, every event has one sane cost.
    #[test]
    fn every_model_record_is_complete_and_consistent() {
        for model in Model::all() {
            let m = model.implementation;
            let has = |name: &str| model.event(name).is_some();
            for (alias, name) in model.aliases() {
                assert!(has(name), "{m}: alias {alias} -> {name}");
                assert!(
                    !model
                        .flat_events()
                        .any(|e| e.name.eq_ignore_ascii_case(alias)),
                    "{m}: alias {alias} shadows an event name"
                );
            }
            let mut presets = Vec::new();
            for (preset, name) in model.papi_presets() {
                assert!(has(name), "{m}: {preset} -> {name}");
                assert!(
                    crate::papi::meaning(preset).is_some(),
                    "{m}: {preset} is not in papi::PRESETS"
                );
                assert!(!presets.contains(preset), "{m}: {preset} twice");
                presets.push(*preset);
            }
            assert!(
                presets.contains(&"PAPI_TOT_CYC"),
                "{m}: every model counts cycles"
            );
            assert!(!model.default_events.is_empty(), "{m}: no default events");
            let mut counters = Vec::new();
            for name in model.default_events {
                let event = model
                    .event(name)
                    .unwrap_or_else(|| panic!("{m}: default {name}"));
                assert!(
                    !counters.contains(&event.counter),
                    "{m}: defaults share a counter"
                );
                counters.push(event.counter);
            }
            assert!(!model.cycle_events.is_empty(), "{m}: no cycle event");
            for name in model.cycle_events {
                assert!(has(name), "{m}: cycle event {name}");
            }
            assert_eq!(model.cycle_event().counter, 0, "{m}: cycles on counter 0");
            assert!(model.statistics().next().is_some(), "{m}: no statistics");
            for statistic in model.statistics() {
                for name in statistic.events() {
                    assert!(has(name), "{m}: {} needs {name}", statistic.name());
                }
            }
            for event in model.flat_events() {
                let rows: Vec<_> = model
                    .costs
                    .iter()
                    .filter(|r| r.event == event.name)
                    .collect();
                let [row] = rows[..] else {
                    panic!("{m}: {} has {} cost rows", event.name, rows.len())
                };
                assert!(
                    row.min <= row.typical && row.typical <= row.max,
                    "{}",
                    row.event
                );
                assert!(!row.source.is_empty(), "{}", row.event);
            }
            for pair in model.pairs {
                for counter in 0..2 {
                    let event = pair.event(counter);
                    assert!(
                        model.flat_events().any(|e| std::ptr::eq(e, event)),
                        "{m}: pair {} counter {counter}",
                        pair.name
                    );
                }
            }
            for (i, shortest) in model.shortest_periods().iter().enumerate() {
                assert_eq!(*shortest > 0, i < model.counters(), "{m} counter {i}");
            }
        }
    }
}
