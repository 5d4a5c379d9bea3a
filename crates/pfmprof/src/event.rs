//! What pfmprof samples, on the model the daemon emulates.
//!
//! `-e`, `-period` and `-pm` are only words until pfmprof has opened the
//! device and learnt its model from `PCNTGETINFO`; [`choose`] then resolves
//! them against that model's event tables (`pfm_model::catalog`) into an
//! [`EventChoice`]: the one event and counter that is sampled, its period,
//! and how each family's ioctls select it with every other counter off
//! ([`Programming`]).
//!
//! Names. An Alpha event name in any case (`PF5_MUX2_C_CYCLES`), or the same
//! without its prefix (`PF_`, `PF5_MUXn_` and `C_`, `PF6_MUXn_`, `PF67_Cn_`,
//! `PF67_PM_`, `PF67_`): `cycles`, `dcache`, `retire`. Where two counters
//! have the same short name the lower counter is taken (`cycles` is counter
//! 0's), and a profile-me statistic only where no counter event has it. A
//! number is the event's place in the model's catalog, as `pfmstat -l`
//! numbers them.
//!
//! Periods. The default is the shortest period of at least 4096 events the
//! counter has: 4096 on the EV4, the low frequency on the EV5 (65536, or
//! 16384 on counter 2; the 256-event periods need privilege and are used
//! only when asked for), 2^20 on the EV6 and EV67.
//!
//! EV67. A counter event is selected through the aggregate pair
//! (`PCNT6MUX`) that counts it, with the pair's other counter off; a pair
//! name is accepted where only one of its counters counts. Profile-me mode
//! (`PF67_PROFILE_ME_MODE`) samples counter 0's cycles and records a
//! statistic (`PF67_PM_*`, in `PCNTSETITEMS` bits 8..15) per sampled
//! instruction: `-e PF67_PM_RETIRE`, `-pm retire`, or `-e
//! PF67_PROFILE_ME_MODE` (with `-pm`, else `PF67_PM_RETIRE`).

use super::ProfError;
use pfm_abi::{CounterMask, Family, Iccsr, Implementation};
use pfm_model::ev6::PF67_PROFILE_ME_MODE;
use pfm_model::ev6::profile_me::{STATISTICS, Source, Statistic};
use pfm_model::{AlphaEvent, Model, Pair, catalog};

/// What the command line asked for, before the model is known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventRequest {
    /// `-e`: an event, an EV67 pair or a profile-me statistic.
    pub event: Option<String>,
    /// `-period`: events per interrupt.
    pub period: Option<u64>,
    /// `-pm`: an EV67 profile-me statistic.
    pub statistic: Option<String>,
}

/// The family ioctls that select the choice, in the order they are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Programming {
    /// `PCNTSETMUX` with this ICCSR image: the event, its period, the other
    /// counter off (`iccsr_disable`).
    Ev4 { iccsr: Iccsr },
    /// `PCNT5DISABLE(off)`, `PCNT5FREQ(freq)`, `PCNT5MUX(mux)`: the other
    /// counters off first, so that only the chosen event is resolved
    /// against the host.
    Ev5 {
        off: CounterMask,
        freq: u64,
        mux: u64,
    },
    /// `PCNT6DISABLE(off)`, `PCNT6MUX(mux)`.
    Ev6 { off: CounterMask, mux: u64 },
}

/// The event a profile samples on the daemon's model.
#[derive(Debug, Clone, Copy)]
pub struct EventChoice {
    pub implementation: Implementation,
    /// The counted event; its counter's interrupts are the samples.
    pub event: &'static AlphaEvent,
    pub counter: usize,
    /// Events per interrupt.
    pub period: u64,
    /// EV67: the `PCNT6MUX` pair (or profile-me mode) that selects it.
    pub pair: Option<&'static Pair>,
    /// EV67 profile-me: the statistic recorded per sampled instruction.
    pub statistic: Option<&'static Statistic>,
    pub programming: Programming,
}

impl EventChoice {
    /// The report's name for what was sampled.
    pub fn label(&self) -> String {
        match (self.statistic, self.pair) {
            (Some(statistic), _) => format!(
                "{} (profile-me, sampled on {})",
                statistic.name, self.event.name
            ),
            (None, Some(pair)) => format!("{} (pair {})", self.event.name, pair.name),
            (None, None) => self.event.name.to_string(),
        }
    }

    /// The `PCNTSETITEMS` statistic field (0: none).
    pub fn statistic_value(&self) -> u8 {
        self.statistic.map_or(0, |s| s.value)
    }
}

/// A name resolved in a model: a counter's event, an EV67 pair, or an EV67
/// profile-me statistic.
#[derive(Debug, Clone, Copy)]
enum Named {
    Event(&'static AlphaEvent),
    Pair(&'static Pair),
    Statistic(&'static Statistic),
}

impl Named {
    fn name(&self) -> &'static str {
        match self {
            Named::Event(e) => e.name,
            Named::Pair(p) => p.name,
            Named::Statistic(s) => s.name,
        }
    }
}

/// `model (chip)`, as messages name a model.
pub fn model_name(implementation: Implementation) -> String {
    format!("{implementation} ({})", implementation.chip())
}

/// Every event of `implementation`, in catalog order: an event's number is
/// its index (as `pfmstat -l` numbers them).
fn events_of(implementation: Implementation) -> Vec<&'static AlphaEvent> {
    catalog(implementation).into_iter().flatten().collect()
}

/// The profile-me statistics a name can choose (not `PF67_PM_DISABLED`).
fn statistics() -> &'static [Statistic] {
    &STATISTICS[1..]
}

/// Everything `implementation` names, in the order names are tried:
/// counter events (lowest counter first), pairs, statistics.
fn names_of(implementation: Implementation) -> Vec<Named> {
    let mut names: Vec<Named> = events_of(implementation)
        .into_iter()
        .map(Named::Event)
        .collect();
    let model = Model::of(implementation);
    names.extend(model.pairs.iter().map(Named::Pair));
    if model.has_profile_me() {
        names.extend(statistics().iter().map(Named::Statistic));
    }
    names
}

/// The short forms of an Alpha name: without `PF_`, `PF5_`, `PF6_` or
/// `PF67_`, then without `MUXn_`, `Cn_` or `PM_`, then without `C_`.
fn short_forms(name: &str) -> Vec<&str> {
    let mut forms = Vec::new();
    let Some((_, mut rest)) = name.split_once('_') else {
        return forms;
    };
    forms.push(rest);
    for field in ["MUX0_", "MUX1_", "MUX2_", "C0_", "C1_", "PM_"] {
        if let Some(r) = rest.strip_prefix(field) {
            rest = r;
            forms.push(rest);
            break;
        }
    }
    if let Some(r) = rest.strip_prefix("C_") {
        forms.push(r);
    }
    forms
}

/// The name `text` means in `implementation`, if any.
fn lookup(implementation: Implementation, text: &str) -> Option<Named> {
    let names = names_of(implementation);
    if let Some(number) = parse_number(text) {
        return events_of(implementation)
            .get(usize::try_from(number).ok()?)
            .map(|e| Named::Event(e));
    }
    if let Some(named) = names.iter().find(|n| n.name().eq_ignore_ascii_case(text)) {
        return Some(*named);
    }
    if let Some(named) = names.iter().find(|n| {
        short_forms(n.name())
            .iter()
            .any(|f| f.eq_ignore_ascii_case(text))
    }) {
        return Some(*named);
    }
    // pfmstat's aliases and PAPI presets, from the model's record, so that
    // the two tools take the same names.
    let model = Model::of(implementation);
    let (_, target) = model
        .aliases()
        .chain(model.papi_presets())
        .find(|(alias, _)| alias.eq_ignore_ascii_case(text))?;
    model.event(target).map(Named::Event)
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None if text.bytes().all(|b| b.is_ascii_digit()) => text.parse().ok(),
        None => None,
    }
}

/// The models other than `implementation` whose tables have `text` by its
/// full name, as `ev6 (21264)`.
fn models_naming(implementation: Implementation, text: &str) -> Vec<String> {
    Implementation::ALL
        .into_iter()
        .filter(|m| *m != implementation)
        .filter(|m| {
            names_of(*m)
                .iter()
                .any(|n| n.name().eq_ignore_ascii_case(text))
        })
        .map(model_name)
        .collect()
}

/// The error for a name `implementation` does not have: which model has
/// it, and every name (`listed`) this one has for `what`.
fn unknown(implementation: Implementation, text: &str, what: &str, listed: &[&str]) -> ProfError {
    let here = model_name(implementation);
    let elsewhere = models_naming(implementation, text);
    let first = if elsewhere.is_empty() {
        format!("{text:?} is not {what} of the {here} the daemon emulates")
    } else {
        format!(
            "{text} is {what} of the {}, not of the {here} the daemon emulates",
            elsewhere.join(" and the ")
        )
    };
    ProfError::Event(format!("{first}; the {here} has {}", listed.join(", ")))
}

/// Resolves `request` on `implementation`.
pub fn choose(
    implementation: Implementation,
    request: &EventRequest,
) -> Result<EventChoice, ProfError> {
    let statistic = match &request.statistic {
        None => None,
        Some(text) => Some(statistic_named(implementation, text)?),
    };
    let named = match &request.event {
        Some(text) => lookup(implementation, text).ok_or_else(|| {
            let names: Vec<&str> = names_of(implementation).iter().map(Named::name).collect();
            unknown(implementation, text, "an event", &names)
        })?,
        None => match statistic {
            Some(s) => Named::Statistic(s),
            None => Named::Event(default_event(implementation)),
        },
    };
    let (event, pair, statistic) = match named {
        Named::Event(event) => {
            if statistic.is_some() {
                return Err(profile_me_only(event.name));
            }
            (event, pair_counting(implementation, event)?, None)
        }
        Named::Pair(pair) => pair_choice(pair, statistic)?,
        Named::Statistic(named) => {
            if statistic.is_some_and(|s| !std::ptr::eq(s, named)) {
                return Err(ProfError::Event(format!(
                    "-e {} and -pm {} name two profile-me statistics; give one",
                    named.name,
                    statistic.map_or("", |s| s.name)
                )));
            }
            pair_choice(profile_me_pair(implementation), Some(named))?
        }
    };
    let counter = event.counter as usize;
    let period = period_of(implementation, event, counter, request.period)?;
    let programming = programming(implementation, event, counter, period, pair);
    Ok(EventChoice {
        implementation,
        event,
        counter,
        period,
        pair,
        statistic,
        programming,
    })
}

/// Cycles on counter 0: the model's cycle event.
fn default_event(implementation: Implementation) -> &'static AlphaEvent {
    Model::of(implementation).cycle_event()
}

fn statistic_named(
    implementation: Implementation,
    text: &str,
) -> Result<&'static Statistic, ProfError> {
    if !Model::of(implementation).has_profile_me() {
        let having: Vec<String> = Model::all()
            .filter(|m| m.has_profile_me())
            .map(|m| model_name(m.implementation))
            .collect();
        return Err(ProfError::Event(format!(
            "profile-me statistics (-pm {text}) exist only on the {}; the daemon emulates the {}",
            having.join(" and the "),
            model_name(implementation)
        )));
    }
    let by_number =
        parse_number(text).and_then(|n| statistics().iter().find(|s| u64::from(s.value) == n));
    by_number
        .or_else(|| {
            statistics().iter().find(|s| {
                s.name.eq_ignore_ascii_case(text)
                    || short_forms(s.name)
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(text))
            })
        })
        .ok_or_else(|| {
            let names: Vec<&str> = statistics().iter().map(|s| s.name).collect();
            unknown(implementation, text, "a profile-me statistic", &names)
        })
}

fn profile_me_only(name: &str) -> ProfError {
    ProfError::Event(format!(
        "-pm needs profile-me mode, and {name} is an aggregate event; use -pm alone or -e PF67_PROFILE_ME_MODE"
    ))
}

fn profile_me_pair(implementation: Implementation) -> &'static Pair {
    Model::of(implementation)
        .pairs
        .iter()
        .find(|p| p.code == PF67_PROFILE_ME_MODE)
        .expect("PF67_PROFILE_ME_MODE is an EV67 PCNT6MUX word")
}

/// The statistic profile-me mode records when none is named.
fn default_statistic() -> &'static Statistic {
    statistics()
        .iter()
        .find(|s| s.name == "PF67_PM_RETIRE")
        .expect("PF67_PM_RETIRE is a statistic")
}

/// A pair named with `-e`: the event of its one counting counter, or in
/// profile-me mode counter 0's cycles with a statistic.
fn pair_choice(
    pair: &'static Pair,
    statistic: Option<&'static Statistic>,
) -> Result<
    (
        &'static AlphaEvent,
        Option<&'static Pair>,
        Option<&'static Statistic>,
    ),
    ProfError,
> {
    if pair.profile_me {
        let statistic = statistic.unwrap_or_else(default_statistic);
        return Ok((pair.event(0), Some(pair), Some(statistic)));
    }
    if statistic.is_some() {
        return Err(profile_me_only(pair.name));
    }
    let counting: Vec<usize> = (0..2).filter(|c| pair.counts[*c]).collect();
    match counting[..] {
        [counter] => Ok((pair.event(counter), Some(pair), None)),
        _ => Err(ProfError::Event(format!(
            "{} counts two events and pfmprof samples one: -e {} or -e {} (pfmprof selects this pair and turns the other counter off)",
            pair.name,
            pair.event(0).name,
            pair.event(1).name
        ))),
    }
}

/// EV67: the aggregate pair that counts `event`, preferring one whose other
/// counter is off anyway. `None` on models without pairs.
fn pair_counting(
    implementation: Implementation,
    event: &'static AlphaEvent,
) -> Result<Option<&'static Pair>, ProfError> {
    let model = Model::of(implementation);
    if model.pairs.is_empty() {
        return Ok(None);
    }
    let counter = event.counter as usize;
    let mut pairs: Vec<&'static Pair> = model
        .counting_pairs()
        .filter(|p| p.counts[counter])
        .filter(|p| std::ptr::eq(p.event(counter), event))
        .collect();
    pairs.sort_by_key(|p| p.counts[1 - counter]);
    pairs.first().copied().map(Some).ok_or_else(|| {
        ProfError::Event(format!(
            "{} is counted by no PCNT6MUX pair of the {} ({}); the pairs are {}",
            event.name,
            implementation.chip(),
            event.description,
            model
                .counting_pairs()
                .map(|p| p.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// `wanted`, or the counter's default, if the counter has it.
fn period_of(
    implementation: Implementation,
    event: &AlphaEvent,
    counter: usize,
    wanted: Option<u64>,
) -> Result<u64, ProfError> {
    let allowed = Model::of(implementation).periods[counter];
    let default = allowed
        .iter()
        .copied()
        .filter(|p| *p >= 4096)
        .min()
        .expect("every counter has a period of at least 4096 events");
    let period = wanted.unwrap_or(default);
    if allowed.contains(&period) {
        return Ok(period);
    }
    let choices: Vec<String> = allowed.iter().map(u64::to_string).collect();
    Err(ProfError::Event(format!(
        "-period {period}: {} is on counter {counter} of the {}, which interrupts every {} events",
        event.name,
        model_name(implementation),
        choices.join(" or ")
    )))
}

fn programming(
    implementation: Implementation,
    event: &AlphaEvent,
    counter: usize,
    period: u64,
    pair: Option<&Pair>,
) -> Programming {
    let family = implementation.family();
    let others = CounterMask::all_of(family) & !CounterMask::from_bits_truncate(1 << counter);
    match family {
        Family::Ev4 => Programming::Ev4 {
            iccsr: ev4_iccsr(event.code, counter, period),
        },
        Family::Ev5 => {
            Programming::Ev5 {
                off: others,
                freq: pfm_model::ev5::freq_field(counter, period == 256),
                // The event's code sits in its own field; the other fields
                // select valid events of counters that stay off.
                mux: event.code,
            }
        }
        Family::Ev6 => Programming::Ev6 {
            off: others,
            mux: pair.map_or(event.code, |p| p.code),
        },
    }
}

/// The ICCSR image selecting `code` on `counter` with the other counter off.
fn ev4_iccsr(code: u64, counter: usize, period: u64) -> Iccsr {
    use pfm_model::ev4::{PF_C0_INT_EVERY_4096, PF_C0_INT_EVERY_65536};
    use pfm_model::ev4::{PF_C1_INT_EVERY_256, PF_C1_INT_EVERY_4096};
    /// `iccsr_disable` values: counter 0 off, counter 1 off.
    const COUNTER_0_OFF: u64 = 1;
    const COUNTER_1_OFF: u64 = 2;
    /// A valid mux0 code for the counter that is off.
    const PF_CYCLES: u64 = 0xa;
    if counter == 0 {
        let pc0 = if period == 4096 {
            PF_C0_INT_EVERY_4096
        } else {
            PF_C0_INT_EVERY_65536
        };
        Iccsr::new(code, 0, pc0, 0, COUNTER_1_OFF)
    } else {
        let pc1 = if period == 256 {
            PF_C1_INT_EVERY_256
        } else {
            PF_C1_INT_EVERY_4096
        };
        Iccsr::new(PF_CYCLES, code, 0, pc1, COUNTER_0_OFF)
    }
}

/// Why the host cannot measure `statistic`, from the model's table.
pub fn statistic_unavailable_because(statistic: &Statistic) -> String {
    match statistic.source {
        Source::Ip => "pfmd refused it".to_string(),
        Source::Unit(unit) => format!("it needs {unit}, which pfmd does not drive"),
        Source::Nowhere(why) => why.to_string(),
    }
}

/// The statistics pfmd measures on every host (from plain IP samples).
pub fn measured_statistics() -> Vec<&'static str> {
    statistics()
        .iter()
        .filter(|s| s.source == Source::Ip)
        .map(|s| s.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(event: Option<&str>, period: Option<u64>, statistic: Option<&str>) -> EventRequest {
        EventRequest {
            event: event.map(str::to_string),
            period,
            statistic: statistic.map(str::to_string),
        }
    }

    fn pick(model: Implementation, event: &str) -> EventChoice {
        choose(model, &request(Some(event), None, None))
            .unwrap_or_else(|e| panic!("{model} -e {event}: {e}"))
    }

    fn refused(model: Implementation, r: EventRequest) -> String {
        match choose(model, &r) {
            Err(ProfError::Event(why)) => why,
            other => panic!("{model} {r:?}: {other:?}"),
        }
    }

    #[test]
    fn the_default_is_counter_0_cycles_at_the_shortest_period_of_4096_or_more() {
        let expected = [
            (Implementation::Ev4, "PF_CYCLES", 4096),
            (Implementation::Ev45, "PF_CYCLES", 4096),
            (Implementation::Ev5, "PF5_MUX0_CYCLES", 65536),
            (Implementation::Ev56, "PF5_MUX0_CYCLES", 65536),
            (Implementation::Pca56, "PF5_MUX0_CYCLES", 65536),
            (Implementation::Ev6, "PF6_MUX0_CYCLES", 1 << 20),
            (Implementation::Ev67, "PF67_C0_CYCLES", 1 << 20),
        ];
        for (model, name, period) in expected {
            let c = choose(model, &EventRequest::default()).unwrap();
            assert_eq!((c.event.name, c.counter, c.period), (name, 0, period));
            assert!(c.statistic.is_none());
        }
    }

    #[test]
    fn ev4_programming_is_the_iccsr_with_the_other_counter_off() {
        let c = pick(Implementation::Ev4, "cycles");
        let Programming::Ev4 { iccsr } = c.programming else {
            panic!("{c:?}")
        };
        assert_eq!((iccsr.mux0(), iccsr.pc0(), iccsr.disable()), (0xa, 1, 2));
        let c = choose(
            Implementation::Ev4,
            &request(Some("dcache"), Some(256), None),
        )
        .unwrap();
        assert_eq!((c.event.name, c.counter, c.period), ("PF_DCACHE", 1, 256));
        let Programming::Ev4 { iccsr } = c.programming else {
            panic!("{c:?}")
        };
        assert_eq!((iccsr.mux1(), iccsr.pc1(), iccsr.disable()), (0, 1, 1));
        assert_eq!(c.label(), "PF_DCACHE");
    }

    #[test]
    fn ev5_turns_the_other_counters_off_and_sets_the_period_field() {
        let c = pick(Implementation::Ev5, "PF5_MUX0_CYCLES");
        assert_eq!(
            c.programming,
            Programming::Ev5 {
                off: CounterMask::COUNTER_1 | CounterMask::COUNTER_2,
                freq: 0x200, // PF5_C0_INT_EVERY_65536
                mux: 0,
            }
        );
        let c = pick(Implementation::Ev56, "c_cycles");
        assert_eq!(
            (c.event.name, c.counter, c.period),
            ("PF5_MUX2_C_CYCLES", 2, 16384)
        );
        assert_eq!(
            c.programming,
            Programming::Ev5 {
                off: CounterMask::COUNTER_0 | CounterMask::COUNTER_1,
                freq: 0x20, // PF5_C2_INT_EVERY_16384
                mux: 0xC,
            }
        );
        let c = choose(Implementation::Ev5, &request(None, Some(256), None)).unwrap();
        let Programming::Ev5 { freq, .. } = c.programming else {
            panic!()
        };
        assert_eq!((c.period, freq), (256, 0x300), "PF5_C0_INT_EVERY_256");
        // Cbox events are the implementation's.
        assert_eq!(
            pick(Implementation::Pca56, "bcache_read").event.name,
            "PF5_MUX1_C_BCACHE_READ"
        );
        assert_eq!(
            pick(Implementation::Ev5, "scache_read").event.code,
            0x8_0000_0000_00F0
        );
    }

    #[test]
    fn ev6_selects_one_counter_and_turns_the_other_off() {
        let c = pick(Implementation::Ev6, "cycles");
        assert_eq!(c.event.name, "PF6_MUX0_CYCLES");
        assert_eq!(
            c.programming,
            Programming::Ev6 {
                off: CounterMask::COUNTER_1,
                mux: 0
            }
        );
        let c = pick(Implementation::Ev6, "pf6_mux1_cycles");
        assert_eq!(
            (c.counter, c.programming),
            (
                1,
                Programming::Ev6 {
                    off: CounterMask::COUNTER_0,
                    mux: 0
                }
            )
        );
        let c = pick(Implementation::Ev6, "ret_instructions");
        assert_eq!(
            c.programming,
            Programming::Ev6 {
                off: CounterMask::COUNTER_1,
                mux: 0x10
            }
        );
        let why = refused(Implementation::Ev6, request(None, Some(4096), None));
        assert!(why.contains("1048576"), "{why}");
    }

    #[test]
    fn ev67_counter_events_go_through_the_pair_that_counts_them() {
        let c = pick(Implementation::Ev67, "cycles");
        assert_eq!(c.pair.unwrap().name, "PF67_CYCLES_AND_UNDEFINED");
        assert_eq!(c.label(), "PF67_C0_CYCLES (pair PF67_CYCLES_AND_UNDEFINED)");
        let c = pick(Implementation::Ev67, "PF67_C1_CYCLES");
        assert_eq!(
            (c.counter, c.programming),
            (
                1,
                Programming::Ev6 {
                    off: CounterMask::COUNTER_0,
                    mux: 0x00 // PF67_RET_INST_AND_CYCLES
                }
            )
        );
        let c = pick(Implementation::Ev67, "bcache_miss");
        assert_eq!(
            c.programming,
            Programming::Ev6 {
                off: CounterMask::COUNTER_0,
                mux: 0x08
            }
        );
        // A pair with one counting counter is a name too.
        let c = pick(Implementation::Ev67, "PF67_CYCLES_AND_UNDEFINED");
        assert_eq!((c.event.name, c.counter), ("PF67_C0_CYCLES", 0));
        // Two counting counters: pfmprof samples one, and says which to name.
        let why = refused(
            Implementation::Ev67,
            request(Some("PF67_RET_INST_AND_CYCLES"), None, None),
        );
        assert!(why.contains("-e PF67_C1_CYCLES"), "{why}");
        let why = refused(
            Implementation::Ev67,
            request(Some("PF67_C1_UNDEFINED"), None, None),
        );
        assert!(why.contains("no PCNT6MUX pair"), "{why}");
    }

    #[test]
    fn ev67_profile_me_by_statistic_or_mode() {
        for r in [
            request(Some("PF67_PM_RETIRE"), None, None),
            request(Some("retire"), None, None),
            request(None, None, Some("retire")),
            request(None, None, Some("40")),
            request(Some("PF67_PROFILE_ME_MODE"), None, None),
            request(Some("PF67_PROFILE_ME_MODE"), None, Some("PF67_PM_RETIRE")),
        ] {
            let c = choose(Implementation::Ev67, &r).unwrap_or_else(|e| panic!("{r:?}: {e}"));
            assert_eq!(c.statistic.unwrap().name, "PF67_PM_RETIRE", "{r:?}");
            assert_eq!(c.statistic_value(), 40);
            assert_eq!((c.event.name, c.counter), ("PF67_C0_CYCLES", 0));
            assert_eq!(
                c.programming,
                Programming::Ev6 {
                    off: CounterMask::COUNTER_1,
                    mux: PF67_PROFILE_ME_MODE
                }
            );
            assert_eq!(
                c.label(),
                "PF67_PM_RETIRE (profile-me, sampled on PF67_C0_CYCLES)"
            );
        }
        // Statistics the host cannot measure are still chosen: the daemon
        // refuses them (EOPNOTSUPP), and pfmprof reports its answer.
        let c = choose(Implementation::Ev67, &request(None, None, Some("delay"))).unwrap();
        assert_eq!(c.statistic.unwrap().name, "PF67_PM_DELAY");
        assert!(statistic_unavailable_because(c.statistic.unwrap()).contains("IBS"));
        assert_eq!(
            measured_statistics(),
            ["PF67_PM_FREQ", "PF67_PM_RETIRE", "PF67_PM_VALID"]
        );
        // "cycles" is counter 0's event, not the statistic PF67_PM_CYCLES.
        assert!(pick(Implementation::Ev67, "cycles").statistic.is_none());
        for (r, says) in [
            (
                request(Some("cycles"), None, Some("retire")),
                "profile-me mode",
            ),
            (request(None, None, Some("nosuch")), "profile-me statistic"),
            (request(Some("PF67_PM_FREQ"), None, Some("retire")), "two"),
        ] {
            let why = refused(Implementation::Ev67, r);
            assert!(why.contains(says), "{why}");
        }
        let why = refused(Implementation::Ev6, request(None, None, Some("retire")));
        assert!(why.contains("only on the ev67"), "{why}");
    }

    #[test]
    fn another_models_name_says_whose_it_is_and_lists_this_models_names() {
        let why = refused(
            Implementation::Ev5,
            request(Some("PF6_MUX0_CYCLES"), None, None),
        );
        assert!(
            why.contains("PF6_MUX0_CYCLES is an event of the ev6 (21264)"),
            "{why}"
        );
        assert!(
            why.contains("not of the ev5 (21164) the daemon emulates"),
            "{why}"
        );
        assert!(why.contains("PF5_MUX0_CYCLES, PF5_MUX0_ISSUES"), "{why}");
        let why = refused(
            Implementation::Ev4,
            request(Some("PF67_PM_RETIRE"), None, None),
        );
        assert!(why.contains("of the ev67 (21264A)"), "{why}");
        // The Scache events are the 21164's and 21164A's, not the 21164PC's.
        let why = refused(
            Implementation::Pca56,
            request(Some("PF5_MUX2_C_SCACHE_MISS"), None, None),
        );
        assert!(
            why.contains("the ev5 (21164) and the ev56 (21164A)"),
            "{why}"
        );
        let why = refused(Implementation::Ev6, request(Some("nosuch"), None, None));
        assert!(
            why.starts_with("\"nosuch\" is not an event of the ev6 (21264)"),
            "{why}"
        );
        assert!(why.contains("PF6_MUX1_REPLAY_TRAP"), "{why}");
    }

    #[test]
    fn numbers_are_catalog_places_and_periods_are_the_counters() {
        assert_eq!(pick(Implementation::Ev4, "5").event.name, "PF_CYCLES");
        assert_eq!(pick(Implementation::Ev4, "0x9").event.name, "PF_DCACHE");
        assert!(choose(Implementation::Ev4, &request(Some("99"), None, None)).is_err());
        for (model, event, period) in [
            (Implementation::Ev4, "cycles", 256),
            (Implementation::Ev4, "dcache", 65536),
            (Implementation::Ev5, "cycles", 16384),
            (Implementation::Ev5, "c_cycles", 65536),
        ] {
            let why = refused(model, request(Some(event), Some(period), None));
            assert!(why.starts_with(&format!("-period {period}")), "{why}");
        }
    }

    #[test]
    fn pfmstats_aliases_and_papi_presets_name_events_too() {
        for (model, text, name) in [
            (Implementation::Ev4, "brmiss", "PF_BRANCHMISS"),
            (Implementation::Ev4, "PAPI_TOT_CYC", "PF_CYCLES"),
            (Implementation::Ev6, "retinst", "PF6_MUX0_RET_INSTRUCTIONS"),
            (Implementation::Ev5, "papi_l2_tcm", "PF5_MUX2_C_SCACHE_MISS"),
        ] {
            assert_eq!(
                lookup(model, text).map(|n| n.name()),
                Some(name),
                "{model} {text}"
            );
        }
        assert!(lookup(Implementation::Ev4, "PAPI_NO_SUCH").is_none());
    }

    #[test]
    fn short_forms_drop_the_prefixes() {
        assert_eq!(short_forms("PF_CYCLES"), ["CYCLES"]);
        assert_eq!(
            short_forms("PF5_MUX2_C_CYCLES"),
            ["MUX2_C_CYCLES", "C_CYCLES", "CYCLES"]
        );
        assert_eq!(short_forms("PF67_PM_RETIRE"), ["PM_RETIRE", "RETIRE"]);
        assert_eq!(
            short_forms("PF67_CYCLES_AND_UNDEFINED"),
            ["CYCLES_AND_UNDEFINED"]
        );
    }
}
