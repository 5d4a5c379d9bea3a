//! Derived statistics as data: each model lists the ratios `pfmstat -y`
//! prints, in order, so the tool evaluates them without knowing the model.
//! A statistic is printed only when every count it needs was gathered.

/// One operand of a statistic.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Count {
    /// The model's first counted cycle event (`Model::cycle_events` order).
    Cycles,
    /// An event's count times a factor (the EV4's `PF_ISSUES` counts pairs
    /// of issues: 2).
    Event(&'static str, f64),
}

impl Count {
    /// The count of `event` as it is.
    pub const fn of(event: &'static str) -> Count {
        Count::Event(event, 1.0)
    }

    /// The event this operand needs, if not cycles.
    pub fn event(&self) -> Option<&'static str> {
        match *self {
            Count::Cycles => None,
            Count::Event(name, _) => Some(name),
        }
    }
}

/// One statistic of a model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Derivation {
    /// `scale × numerator / denominator`, when the denominator is not zero.
    Ratio {
        name: &'static str,
        numerator: Count,
        denominator: Count,
        scale: f64,
    },
    /// Millions of `event` per second of run time (from cycles at the
    /// nominal clock).
    PerMicrosecond {
        name: &'static str,
        event: &'static str,
    },
    /// perfex's time accessing memory: the typical costs of those of
    /// `events` counted, over the run time.
    MemoryTime {
        name: &'static str,
        events: &'static [&'static str],
    },
}

impl Derivation {
    pub fn name(&self) -> &'static str {
        match self {
            Derivation::Ratio { name, .. }
            | Derivation::PerMicrosecond { name, .. }
            | Derivation::MemoryTime { name, .. } => name,
        }
    }

    /// Every event the statistic names.
    pub fn events(&self) -> Vec<&'static str> {
        match self {
            Derivation::Ratio {
                numerator,
                denominator,
                ..
            } => [numerator, denominator]
                .iter()
                .filter_map(|c| c.event())
                .collect(),
            Derivation::PerMicrosecond { event, .. } => vec![event],
            Derivation::MemoryTime { events, .. } => events.to_vec(),
        }
    }
}

/// `scale × numerator / denominator`, as the tables write it.
pub(crate) const fn ratio(
    name: &'static str,
    numerator: Count,
    denominator: Count,
    scale: f64,
) -> Derivation {
    Derivation::Ratio {
        name,
        numerator,
        denominator,
        scale,
    }
}

/// Two events' counts, one over the other.
pub(crate) const fn rate(
    name: &'static str,
    numerator: &'static str,
    denominator: &'static str,
) -> Derivation {
    ratio(name, Count::of(numerator), Count::of(denominator), 1.0)
}

pub(crate) const MFLOPS: &str = "MFLOPS (FP operate instructions per us)";
pub(crate) const MEMORY_TIME: &str = "Time accessing memory / total time (typical costs)";
