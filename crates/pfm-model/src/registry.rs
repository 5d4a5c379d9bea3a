//! The models by implementation: what the daemon and the tools ask of a
//! model without naming its family.

use crate::{AlphaEvent, Family, Implementation, MAX_COUNTERS, ev4, ev5, ev6};

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
}

const EV4: [u64; MAX_COUNTERS] = [65536, 4096, 0];
const EV6: [u64; MAX_COUNTERS] = [ev6::PERIOD, ev6::PERIOD, 0];
const EV4_PERIODS: &[&[u64]] = &[&[4096, 65536], &[256, 4096]];
const EV5_PERIODS: &[&[u64]] = &[&[256, 65536], &[256, 65536], &[256, 16384]];
const EV6_PERIODS: &[&[u64]] = &[&[ev6::PERIOD], &[ev6::PERIOD]];

static MODELS: [Model; 7] = [
    Model {
        implementation: Implementation::Ev4,
        periods: EV4_PERIODS,
        widths: &ev4::WIDTHS,
        first_periods: EV4,
        events: &ev4::EVENTS,
    },
    Model {
        implementation: Implementation::Ev45,
        periods: EV4_PERIODS,
        widths: &ev4::WIDTHS,
        first_periods: EV4,
        events: &ev4::EVENTS,
    },
    Model {
        implementation: Implementation::Ev5,
        periods: EV5_PERIODS,
        widths: &ev5::WIDTHS,
        first_periods: ev5::DEFAULT_PERIODS,
        events: &ev5::EV5_EVENTS,
    },
    Model {
        implementation: Implementation::Ev56,
        periods: EV5_PERIODS,
        widths: &ev5::WIDTHS,
        first_periods: ev5::DEFAULT_PERIODS,
        events: &ev5::EV5_EVENTS,
    },
    Model {
        implementation: Implementation::Pca56,
        periods: EV5_PERIODS,
        widths: &ev5::WIDTHS,
        first_periods: ev5::DEFAULT_PERIODS,
        events: &ev5::PCA56_EVENTS,
    },
    Model {
        implementation: Implementation::Ev6,
        periods: EV6_PERIODS,
        widths: &ev6::WIDTHS,
        first_periods: EV6,
        events: &ev6::EV6_EVENTS,
    },
    Model {
        implementation: Implementation::Ev67,
        periods: EV6_PERIODS,
        widths: &ev6::WIDTHS,
        first_periods: EV6,
        events: &ev6::EV67_EVENTS,
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
}
