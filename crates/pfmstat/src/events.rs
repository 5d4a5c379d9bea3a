//! Naming events (Alpha names, aliases, numbers) and fitting them onto the
//! model's counters: two events that need the same counter are a
//! "conflicting counters" error, as in perfex; on the EV67 the events must
//! form one of the chip's `PCNT6MUX` pairs.

use super::Error;
use pfm_model::{AlphaEvent, Implementation, Model, Pair, catalog};

/// Every event of `model` in catalog order; an event's number is its index.
pub fn flat(model: Implementation) -> Vec<&'static AlphaEvent> {
    catalog(model).into_iter().flatten().collect()
}

/// The event number of `event` in `model` (its index in [`flat`]).
pub fn number(model: Implementation, event: &AlphaEvent) -> usize {
    flat(model)
        .iter()
        .position(|e| std::ptr::eq(*e, event))
        .expect("events come from the model's catalog")
}

/// Short aliases per model: `(alias, Alpha name)`, from the model's record.
/// Only meanings the event really has: e.g. `retinst` exists only where the
/// chip counts retired instructions (EV6/EV67); on the in-order EV5
/// `instructions` is issues.
pub fn aliases(model: Implementation) -> Vec<(&'static str, &'static str)> {
    Model::of(model).aliases().copied().collect()
}

/// The aliases that name `event` in `model`.
pub fn aliases_of(model: Implementation, event: &AlphaEvent) -> Vec<&'static str> {
    names_of(&aliases(model), event)
}

/// The first of each `(name, Alpha name)` pair whose Alpha name is `event`'s.
fn names_of(pairs: &[(&'static str, &'static str)], event: &AlphaEvent) -> Vec<&'static str> {
    pairs
        .iter()
        .filter(|(_, alpha)| *alpha == event.name)
        .map(|(name, _)| *name)
        .collect()
}

/// The events counted when no `-e` is given: every counter busy with what
/// perfex users look at first (cycles, instructions, branches), so `-y` can
/// derive instructions per cycle where the host counts them.
pub fn default_events(model: Implementation) -> &'static [&'static str] {
    Model::of(model).default_events
}

/// PAPI presets per model: `(preset, Alpha name)`, from the model's record
/// (only where the model's event means what the preset does).
pub fn papi_presets(model: Implementation) -> Vec<(&'static str, &'static str)> {
    Model::of(model).papi_presets().copied().collect()
}

/// The PAPI presets that name `event` in `model`.
pub fn papi_of(model: Implementation, event: &AlphaEvent) -> Vec<&'static str> {
    names_of(&papi_presets(model), event)
}

/// The models other than `model` with an event named `name`.
fn models_naming(model: Implementation, name: &str) -> impl Iterator<Item = Implementation> {
    Implementation::ALL
        .into_iter()
        .filter(move |m| *m != model && Model::of(*m).has_event_named(name))
}

/// True when `name` means nothing in `model` but an event of another
/// model: its name, an alias or a PAPI preset there.
pub fn of_another_model(model: Implementation, name: &str) -> bool {
    // A number is a place in one model's list, not a name of any.
    let number = name.bytes().all(|b| b.is_ascii_digit()) || name.starts_with("0x");
    !number
        && lookup(model, name).is_err()
        && Implementation::ALL
            .into_iter()
            .any(|other| other != model && lookup(other, name).is_ok())
}

/// Finds the event `spec` names in `model`: its Alpha name, an alias or a
/// PAPI preset (case-insensitive), or its number.
pub fn lookup(model: Implementation, spec: &str) -> Result<&'static AlphaEvent, Error> {
    let events = flat(model);
    if let Some(e) = events.iter().find(|e| e.name.eq_ignore_ascii_case(spec)) {
        return Ok(e);
    }
    if let Some((_, name)) = aliases(model)
        .iter()
        .chain(papi_presets(model).iter())
        .find(|(alias, _)| alias.eq_ignore_ascii_case(spec))
    {
        return Ok(events
            .iter()
            .find(|e| e.name == *name)
            .expect("alias targets are events of the model (unit-tested)"));
    }
    let number = match spec.strip_prefix("0x") {
        Some(hex) => usize::from_str_radix(hex, 16).ok(),
        None => spec.parse::<usize>().ok(),
    };
    if let Some(n) = number {
        return events.get(n).copied().ok_or_else(|| {
            Error::Event(format!(
                "event number {n} does not exist on the {model} (0 to {}; pfmstat -l lists them)",
                events.len() - 1
            ))
        });
    }
    if pfm_model::papi::looks_like_preset(spec) {
        return Err(Error::Event(match pfm_model::papi::meaning(spec) {
            Some(meaning) => format!(
                "{spec} ({meaning}): the {model} ({}) has no event that counts it; \
                 pfmstat -l lists the PAPI presets its events answer to",
                model.chip()
            ),
            None => format!(
                "{spec} is not a PAPI preset any Alpha model has an event for; \
                 pfmstat -l lists the presets the {model} answers to"
            ),
        }));
    }
    // A name from another model's tables says whose it is, as pfmd's event
    // map and pfmprof do: the usual slip is a header written for another chip.
    let elsewhere: Vec<String> = models_naming(model, spec)
        .map(|m| format!("{m} ({})", m.chip()))
        .collect();
    let what = if elsewhere.is_empty() {
        format!("{spec:?} is not an event of the {model} ({})", model.chip())
    } else {
        format!(
            "{spec} is an event of the {}, not of the {model} ({})",
            elsewhere.join(" and the "),
            model.chip()
        )
    };
    Err(Error::Event(format!(
        "{what}; pfmstat -l lists names, aliases and numbers"
    )))
}

/// What the counters are programmed with: per counter an event or off, and
/// on the EV67 the `PCNT6MUX` pair word that selects them.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub counters: [Option<&'static AlphaEvent>; 3],
    /// EV67 only: the pair word.
    pub pair: Option<u64>,
}

/// Same events on the same counters (events are compared by identity).
fn same_events(a: &[Option<&AlphaEvent>; 3], b: &[Option<&AlphaEvent>; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| match (x, y) {
        (Some(x), Some(y)) => std::ptr::eq(*x, *y),
        (None, None) => true,
        _ => false,
    })
}

impl PartialEq for Config {
    fn eq(&self, other: &Config) -> bool {
        self.pair == other.pair && same_events(&self.counters, &other.counters)
    }
}

impl Config {
    pub const EMPTY: Config = Config {
        counters: [None; 3],
        pair: None,
    };

    /// Bit n set when counter n counts.
    pub fn mask(&self) -> u64 {
        self.counters
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_some())
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    pub fn events(&self) -> impl Iterator<Item = (usize, &'static AlphaEvent)> + '_ {
        self.counters
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|e| (i, e)))
    }

    pub fn is_empty(&self) -> bool {
        self.mask() == 0
    }

    /// The configuration that counts only `event` (for probing), or `None`
    /// on an EV67 where no pair counts it.
    pub fn single(model: Implementation, event: &'static AlphaEvent) -> Option<Config> {
        fit(model, &[event]).ok()
    }

    /// This configuration with only the counters in `mask` left on.
    pub fn only(&self, mask: u64) -> Config {
        let mut out = *self;
        for (i, slot) in out.counters.iter_mut().enumerate() {
            if mask & (1 << i) == 0 {
                *slot = None;
            }
        }
        out
    }
}

/// The pairs `PCNT6MUX` can count in aggregate mode (profile-me mode
/// samples; it is not a counting configuration); none where each counter
/// selects its own event.
fn pairs(model: Implementation) -> impl Iterator<Item = &'static Pair> {
    Model::of(model).counting_pairs()
}

/// True when the model selects its events pairwise (the EV67).
fn paired(model: Implementation) -> bool {
    pairs(model).next().is_some()
}

/// True when some configuration of `model` can count `event` at all (the
/// EV67's undefined and profile-me-only counter-1 events cannot).
pub fn countable(model: Implementation, event: &AlphaEvent) -> bool {
    !paired(model)
        || pairs(model).any(|p| {
            let c = event.counter as usize;
            p.counts[c] && std::ptr::eq(p.event(c), event)
        })
}

/// When one of two conflicting events counts cycles: where else the model
/// counts them (pfmstat, like perfex, never moves an event by itself).
fn cycles_hint(model: Implementation, clash: &[&AlphaEvent]) -> String {
    let cycle_events = Model::of(model).cycle_events;
    let Some(cycles) = clash.iter().find(|e| cycle_events.contains(&e.name)) else {
        return String::new();
    };
    let other = flat(model)
        .into_iter()
        .find(|e| e.counter != cycles.counter && cycle_events.contains(&e.name));
    match other {
        Some(e) => {
            let alias = aliases_of(model, e)
                .first()
                .map_or(String::new(), |a| format!(" ({a})"));
            format!(
                "; counter {} counts cycles too: {}{alias}",
                e.counter, e.name
            )
        }
        None => String::new(),
    }
}

/// Fits `events` onto the counters of `model`, or says which ones conflict.
pub fn fit(model: Implementation, events: &[&'static AlphaEvent]) -> Result<Config, Error> {
    let mut config = Config::EMPTY;
    for event in events {
        let slot = &mut config.counters[event.counter as usize];
        match slot {
            Some(other) if std::ptr::eq(*other, *event) => {}
            Some(other) => {
                return Err(Error::Conflict(format!(
                    "conflicting counters: {} and {} both need counter {} of the {}{}",
                    other.name,
                    event.name,
                    event.counter,
                    model.chip(),
                    cycles_hint(model, &[other, event])
                )));
            }
            None => *slot = Some(event),
        }
    }
    if !paired(model) {
        return Ok(config);
    }
    // EV67: one pair must select every requested event on its counter.
    let wanted: Vec<(usize, &AlphaEvent)> = config.events().collect();
    let pair = pairs(model).find(|p| {
        wanted
            .iter()
            .all(|(c, e)| p.counts[*c] && std::ptr::eq(p.event(*c), *e))
    });
    match pair {
        Some(p) => {
            config.pair = Some(p.code);
            Ok(config)
        }
        None => Err(Error::Conflict(format!(
            "conflicting counters: no PCNT6MUX pair of the {} counts {}; the pairs are {}",
            model.chip(),
            wanted
                .iter()
                .map(|(_, e)| e.name)
                .collect::<Vec<_>>()
                .join(" with "),
            pairs(model)
                .map(|p| format!(
                    "{} ({} + {})",
                    p.name,
                    p.event(0).name,
                    if p.counts[1] {
                        p.event(1).name
                    } else {
                        "nothing"
                    }
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The configurations `-a` rotates through, given the events the host can
/// count (`available`, in catalog order). EV4/EV5/EV6: counter n's k-th
/// configuration takes its (k mod len)-th event, so every event of a counter
/// with `len` events is counted 1/len of the time. EV67: every pair that
/// counts at least one available event, with its other counter off; pairs
/// that would count the same events are kept once.
pub fn rotation(model: Implementation, available: &[&'static AlphaEvent]) -> Vec<Config> {
    if paired(model) {
        let mut out: Vec<Config> = Vec::new();
        for pair in pairs(model) {
            let mut config = Config::EMPTY;
            for (c, slot) in config.counters.iter_mut().enumerate().take(2) {
                let event = pair.event(c);
                if pair.counts[c] && available.iter().any(|a| std::ptr::eq(*a, event)) {
                    *slot = Some(event);
                }
            }
            config.pair = Some(pair.code);
            if !config.is_empty()
                && !out
                    .iter()
                    .any(|o| same_events(&o.counters, &config.counters))
            {
                out.push(config);
            }
        }
        return out;
    }
    let per_counter: Vec<Vec<&'static AlphaEvent>> = (0..3)
        .map(|c| {
            available
                .iter()
                .copied()
                .filter(|e| e.counter as usize == c)
                .collect()
        })
        .collect();
    let rounds = per_counter.iter().map(Vec::len).max().unwrap_or(0);
    (0..rounds)
        .map(|k| {
            let mut config = Config::EMPTY;
            for (c, events) in per_counter.iter().enumerate() {
                if !events.is_empty() {
                    config.counters[c] = Some(events[k % events.len()]);
                }
            }
            config
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_and_default_names_an_event_of_its_model() {
        for model in Implementation::ALL {
            let names: Vec<&str> = flat(model).iter().map(|e| e.name).collect();
            for (alias, name) in aliases(model) {
                assert!(names.contains(&name), "{model}: {alias} -> {name}");
                assert!(
                    !names.iter().any(|n| n.eq_ignore_ascii_case(alias)),
                    "{model}: alias {alias} shadows an event name"
                );
            }
            for name in default_events(model) {
                assert!(names.contains(name), "{model}: default {name}");
            }
            let defaults: Vec<_> = default_events(model)
                .iter()
                .map(|n| lookup(model, n).unwrap())
                .collect();
            assert!(fit(model, &defaults).is_ok(), "{model}: defaults must fit");
        }
    }

    #[test]
    fn names_aliases_and_numbers() {
        let m = Implementation::Ev6;
        assert_eq!(
            lookup(m, "PF6_MUX0_CYCLES").unwrap().name,
            "PF6_MUX0_CYCLES"
        );
        assert_eq!(
            lookup(m, "pf6_mux0_cycles").unwrap().name,
            "PF6_MUX0_CYCLES"
        );
        assert_eq!(
            lookup(m, "retinst").unwrap().name,
            "PF6_MUX0_RET_INSTRUCTIONS"
        );
        assert_eq!(lookup(m, "CYCLES").unwrap().name, "PF6_MUX0_CYCLES");
        let n = number(m, lookup(m, "PF6_MUX1_RET_COND_BRANCHES").unwrap());
        assert_eq!(n, 3, "2 counter-0 events, then PF6_MUX1_CYCLES, then this");
        assert_eq!(lookup(m, "3").unwrap().name, "PF6_MUX1_RET_COND_BRANCHES");
        assert_eq!(lookup(m, "0x3").unwrap().name, "PF6_MUX1_RET_COND_BRANCHES");
        assert!(matches!(lookup(m, "99"), Err(Error::Event(_))));
        let Err(Error::Event(msg)) = lookup(m, "PF_CYCLES") else {
            panic!("PF_CYCLES is no event of the ev6");
        };
        assert!(
            msg.starts_with(
                "PF_CYCLES is an event of the ev4 (21064) and the ev45 (21064A), \
                 not of the ev6 (21264)"
            ),
            "{msg}"
        );
        let Err(Error::Event(msg)) = lookup(m, "nosuch") else {
            panic!("nosuch is no event");
        };
        assert!(
            msg.starts_with("\"nosuch\" is not an event of the ev6 (21264)"),
            "{msg}"
        );
        assert_eq!(lookup(Implementation::Ev4, "PF_CYCLES").unwrap().counter, 0);
        assert_eq!(
            aliases_of(m, lookup(m, "retinst").unwrap()),
            ["retinst", "instructions"]
        );
    }

    #[test]
    fn papi_presets_name_the_models_events() {
        let cases = [
            (Implementation::Ev4, "PAPI_TOT_CYC", "PF_CYCLES"),
            (Implementation::Ev4, "papi_br_msp", "PF_BRANCHMISS"),
            (Implementation::Ev5, "PAPI_TOT_INS", "PF5_MUX0_ISSUES"),
            (Implementation::Ev5, "PAPI_L2_TCM", "PF5_MUX2_C_SCACHE_MISS"),
            (Implementation::Ev6, "PAPI_TOT_CYC", "PF6_MUX0_CYCLES"),
            (
                Implementation::Ev6,
                "PAPI_TOT_INS",
                "PF6_MUX0_RET_INSTRUCTIONS",
            ),
            (Implementation::Ev67, "PAPI_L2_TCM", "PF67_C1_BCACHE_MISS"),
        ];
        for (m, preset, name) in cases {
            assert_eq!(lookup(m, preset).unwrap().name, name, "{m} {preset}");
        }
        assert_eq!(
            papi_of(
                Implementation::Ev6,
                lookup(Implementation::Ev6, "cycles").unwrap()
            ),
            ["PAPI_TOT_CYC"]
        );
        // The EV6's mispredict selection counts cycles: no PAPI_BR_MSP.
        let Err(Error::Event(msg)) = lookup(Implementation::Ev6, "PAPI_BR_MSP") else {
            panic!("PAPI_BR_MSP on the ev6")
        };
        assert!(msg.contains("has no event that counts it"), "{msg}");
        let Err(Error::Event(msg)) = lookup(Implementation::Ev6, "PAPI_VEC_INS") else {
            panic!()
        };
        assert!(msg.contains("not a PAPI preset"), "{msg}");
        // PCA56 has no Scache.
        assert!(lookup(Implementation::Pca56, "PAPI_L2_TCM").is_err());
    }

    #[test]
    fn two_events_on_one_counter_conflict() {
        let m = Implementation::Ev6;
        let cycles = lookup(m, "cycles").unwrap();
        let retinst = lookup(m, "retinst").unwrap();
        let e = fit(m, &[cycles, retinst]).unwrap_err();
        let Error::Conflict(msg) = e else { panic!() };
        assert!(msg.contains("conflicting counters"), "{msg}");
        assert!(msg.contains("PF6_MUX0_CYCLES") && msg.contains("PF6_MUX0_RET_INSTRUCTIONS"));
        assert!(msg.contains("PF6_MUX1_CYCLES (cycles1)"), "{msg}");
        // The same event twice is one event.
        assert_eq!(fit(m, &[cycles, cycles]).unwrap().mask(), 1);
        let c = fit(m, &[cycles, lookup(m, "cycles1").unwrap()]).unwrap();
        assert_eq!(c.mask(), 3);
        let e4 = Implementation::Ev4;
        assert!(matches!(
            fit(
                e4,
                &[lookup(e4, "cycles").unwrap(), lookup(e4, "issues").unwrap()]
            ),
            Err(Error::Conflict(_))
        ));
        let e5 = Implementation::Ev5;
        let three = fit(
            e5,
            &[
                lookup(e5, "issues").unwrap(),
                lookup(e5, "branches").unwrap(),
                lookup(e5, "cycles2").unwrap(),
            ],
        )
        .unwrap();
        assert_eq!(three.mask(), 7);
    }

    #[test]
    fn ev67_events_must_form_a_pair() {
        let m = Implementation::Ev67;
        let retinst = lookup(m, "retinst").unwrap();
        let bcmiss = lookup(m, "bcmiss").unwrap();
        let replays = lookup(m, "replays").unwrap();
        let c = fit(m, &[retinst, bcmiss]).unwrap();
        assert_eq!(c.pair, Some(0x08));
        let Err(Error::Conflict(msg)) = fit(m, &[retinst, replays]) else {
            panic!("RET_INST and REPLAY_TRAPS are in no pair")
        };
        assert!(msg.contains("PF67_CYCLES_AND_REPLAY_TRAPS"), "{msg}");
        assert_eq!(fit(m, &[replays]).unwrap().pair, Some(0x0C));
        let undefined = lookup(m, "PF67_C1_UNDEFINED").unwrap();
        assert!(!countable(m, undefined));
        assert!(countable(m, bcmiss));
    }

    #[test]
    fn rotation_gives_every_event_its_turn() {
        let m = Implementation::Ev6;
        let ev = |n| lookup(m, n).unwrap();
        let available = [
            ev("PF6_MUX0_CYCLES"),
            ev("PF6_MUX1_CYCLES"),
            ev("PF6_MUX1_RET_BRANCH_MISPREDICTS"),
        ];
        let configs = rotation(m, &available);
        assert_eq!(configs.len(), 2);
        let name = |c: &Config, n: usize| c.counters[n].map(|e| e.name);
        assert!(
            configs
                .iter()
                .all(|c| name(c, 0) == Some("PF6_MUX0_CYCLES"))
        );
        assert_eq!(name(&configs[0], 1), Some("PF6_MUX1_CYCLES"));
        assert_eq!(
            name(&configs[1], 1),
            Some("PF6_MUX1_RET_BRANCH_MISPREDICTS")
        );

        let m = Implementation::Ev67;
        let available = [lookup(m, "cycles").unwrap(), lookup(m, "cycles1").unwrap()];
        let configs = rotation(m, &available);
        // RET_INST_AND_CYCLES (counter 1 only) and CYCLES_AND_UNDEFINED
        // (counter 0); CYCLES_AND_REPLAY_TRAPS would repeat the latter.
        assert_eq!(configs.len(), 2, "{configs:?}");
        assert_eq!(configs[0].pair, Some(0x00));
        assert_eq!(configs[0].mask(), 2);
        assert_eq!(configs[1].pair, Some(0x04));
        assert_eq!(configs[1].mask(), 1);
    }
}
