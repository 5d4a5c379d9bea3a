use super::{AlphaEvent, Fidelity, HostEvent, Term};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What the host can open, as the backend's start-up probe found it.
pub trait HostSupport {
    /// `Err(reason)` when the host cannot count `event`.
    fn check(&self, event: &HostEvent) -> Result<(), String>;
}

/// Site bindings of Alpha events to raw host events (docs/device.md §7): lines of
/// `NAME type=N config=X [config1=Y]`, `#` comments. A bound event is counted
/// exactly through its raw host event, ahead of the built-in candidates.
#[derive(Debug, Clone, Default)]
pub struct EventMap {
    bindings: BTreeMap<String, HostEvent>,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "line {line}: {message}; each line is NAME type=N config=X [config1=Y] \
     (numbers decimal or 0x hex; `pfmd --print-event-map` writes one)"
)]
pub struct EventMapError {
    pub line: usize,
    pub message: String,
}

impl EventMap {
    pub fn parse(text: &str) -> Result<Self, EventMapError> {
        let mut bindings = BTreeMap::new();
        let mut lines = BTreeMap::new();
        for (index, raw_line) in text.lines().enumerate() {
            let line = raw_line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let err = |message: String| EventMapError {
                line: index + 1,
                message,
            };
            let mut words = line.split_whitespace();
            let name = words.next().unwrap_or_default().to_string();
            // A typo or a wrong case would leave the event unbound without
            // a word (the site believing it bound): only names some model
            // has (an event of another model may serve a site's other
            // daemons; pfmd says which lines its model does not use).
            if !crate::Model::all().any(|m| m.event(&name).is_some()) {
                return Err(err(format!(
                    "{name}: no model has an event of this name (names as \
                     `pfmd --list-events` prints them; case matters)"
                )));
            }
            if let Some(first) = lines.get(&name) {
                return Err(err(format!("{name} is bound on line {first} already")));
            }
            lines.insert(name.clone(), index + 1);
            let (mut kind, mut config, mut config1) = (None, None, 0u64);
            for word in words {
                let (key, value) = word
                    .split_once('=')
                    .ok_or_else(|| err(format!("expected key=value, found {word:?}")))?;
                let number = parse_number(value)
                    .ok_or_else(|| err(format!("{key}: not a number: {value:?}")))?;
                match key {
                    "type" => {
                        kind = Some(
                            u32::try_from(number)
                                .map_err(|_| err(format!("type out of range: {value}")))?,
                        )
                    }
                    "config" => config = Some(number),
                    "config1" => config1 = number,
                    other => return Err(err(format!("unknown key {other:?}"))),
                }
            }
            let (Some(kind), Some(config)) = (kind, config) else {
                return Err(err(format!("{name}: type= and config= are required")));
            };
            bindings.insert(
                name,
                HostEvent::Raw {
                    kind,
                    config,
                    config1,
                },
            );
        }
        Ok(EventMap { bindings })
    }

    pub fn binding(&self, alpha_name: &str) -> Option<HostEvent> {
        self.bindings.get(alpha_name).copied()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// The bound names, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.bindings.keys().map(String::as_str)
    }

    /// Writes the file format `parse` reads.
    pub fn format_line(name: &str, kind: u32, config: u64, config1: u64) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{name} type={kind} config={config:#x} config1={config1:#x}"
        );
        s
    }
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// An Alpha event bound to what the host will count for it.
#[derive(Debug, Clone)]
pub struct ResolvedEvent {
    pub event: &'static AlphaEvent,
    pub terms: Vec<Term>,
    pub fidelity: Fidelity,
    pub formula: String,
}

#[derive(Debug, Clone)]
pub enum Resolution {
    Resolved(ResolvedEvent),
    Unavailable {
        event: &'static AlphaEvent,
        reason: String,
    },
}

/// The first candidate the host can open wins (docs/device.md §7); a site binding
/// comes before all of them.
pub fn resolve(event: &'static AlphaEvent, host: &dyn HostSupport, map: &EventMap) -> Resolution {
    if let Some(raw) = map.binding(event.name) {
        return match host.check(&raw) {
            Ok(()) => Resolution::Resolved(ResolvedEvent {
                event,
                terms: vec![Term::one(raw)],
                fidelity: Fidelity::Exact,
                formula: format!("{raw} (site event map)"),
            }),
            Err(why) => Resolution::Unavailable {
                event,
                reason: format!("site event map binds it to {raw}, which does not open: {why}"),
            },
        };
    }
    let mut reasons = Vec::new();
    for candidate in event.candidates {
        let missing: Vec<String> = candidate
            .terms
            .iter()
            .filter_map(|t| {
                host.check(&t.event)
                    .err()
                    .map(|why| format!("{}: {why}", t.event))
            })
            .collect();
        if missing.is_empty() {
            return Resolution::Resolved(ResolvedEvent {
                event,
                terms: candidate.terms.to_vec(),
                fidelity: candidate.fidelity,
                formula: candidate.formula.to_string(),
            });
        }
        reasons.extend(missing);
    }
    let reason = if event.candidates.is_empty() {
        event.unavailable_because.to_string()
    } else {
        format!("no host candidate opens ({})", reasons.join("; "))
    };
    Resolution::Unavailable { event, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Candidate, Scale};

    struct OnlySoftware;
    impl HostSupport for OnlySoftware {
        fn check(&self, event: &HostEvent) -> Result<(), String> {
            if event.is_software() || matches!(event, HostEvent::Raw { .. }) {
                Ok(())
            } else {
                Err("not supported".into())
            }
        }
    }

    static CYCLES: AlphaEvent = AlphaEvent {
        name: "PF_CYCLES",
        code: 0xa,
        counter: 0,
        description: "cycles",
        candidates: &[
            Candidate {
                terms: &[Term::one(HostEvent::Cycles)],
                fidelity: Fidelity::Exact,
                formula: "cycles",
            },
            Candidate {
                terms: &[Term::new(HostEvent::CpuClock, Scale::NsToCycles)],
                fidelity: Fidelity::Approximate,
                formula: "cpu-clock ns x nominal MHz",
            },
        ],
        unavailable_because: "",
    };

    #[test]
    fn first_candidate_that_opens_wins() {
        let Resolution::Resolved(r) = resolve(&CYCLES, &OnlySoftware, &EventMap::default()) else {
            panic!("cycles must fall back to cpu-clock")
        };
        assert_eq!(r.fidelity, Fidelity::Approximate);
        assert_eq!(r.terms[0].event, HostEvent::CpuClock);
    }

    #[test]
    fn site_map_binding_wins_and_round_trips() {
        let map = EventMap::parse("# site\nPF_CYCLES type=4 config=0x3c\n").unwrap();
        let Resolution::Resolved(r) = resolve(&CYCLES, &OnlySoftware, &map) else {
            panic!("raw binding must resolve")
        };
        assert_eq!(
            r.terms[0].event,
            HostEvent::Raw {
                kind: 4,
                config: 0x3c,
                config1: 0
            }
        );
        let line = EventMap::format_line("PF_CYCLES", 4, 0x3c, 0);
        assert!(
            EventMap::parse(&line)
                .unwrap()
                .binding("PF_CYCLES")
                .is_some()
        );
    }

    #[test]
    fn bad_map_lines_name_the_line() {
        let e =
            EventMap::parse("PF_CYCLES type=4 config=1\nPF_DUAL type=x config=1\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(EventMap::parse("PF_CYCLES config=1").is_err());
    }

    /// A name no model has (a typo, a wrong case) and a second line for one
    /// event stop the map, naming the line; another model's event does not.
    #[test]
    fn unknown_and_repeated_names_are_bad_lines() {
        for (text, line, says) in [
            (
                "PF_CYCLES type=1 config=0\nPF5_BOGUS type=1 config=2\n",
                2,
                "no model",
            ),
            ("pf5_mux0_issues type=1 config=2\n", 1, "case matters"),
            (
                "PF_DUAL type=1 config=0\n\nPF_DUAL type=1 config=1\n",
                3,
                "on line 1",
            ),
        ] {
            let e = EventMap::parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let both = EventMap::parse("PF_CYCLES type=1 config=0\nPF5_MUX0_ISSUES type=1 config=1\n");
        assert_eq!(both.unwrap().names().count(), 2);
    }
}
