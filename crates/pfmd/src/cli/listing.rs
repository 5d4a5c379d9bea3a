//! `--list-events [--json]` and `--print-event-map`: a libpfm-style query of
//! the emulated model's events. For each Alpha event: its counter and
//! code, what it means, its host candidates in order, and what this host
//! resolved it to; per counter its width and periods; on EV67 which
//! `PCNT6MUX` pairs exist and which of them this host can count, and how
//! each profile-me statistic would be measured here.
//!
//! `--json` prints the same as one JSON document (serde_json: a listing is
//! data other tools consume, and hand-escaped JSON of free-text
//! descriptions and host reasons is how broken output happens).

use super::{Args, StartError, host};
use crate::backend::perf::PerfBackend;
use pfm_model::ev6::profile_me::{self, Source};
use pfm_model::registry::Pair;
use pfm_model::{
    AlphaEvent, EventMap, HostEvent, HostSupport, Implementation, Model, Resolution, Scale,
    catalog, resolve,
};
use serde_json::{Value, json};

/// One line of a listing into a `String` (which cannot fail to take it).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

pub fn run(args: &Args) -> Result<(), StartError> {
    let map = host::event_map(args)?;
    let backend = PerfBackend::probe();
    if args.print_event_map {
        return emit(&event_map_text(args.model, &backend, &map));
    }
    let listing = listing(args.model, &backend, &map);
    if args.json {
        let text = serde_json::to_string_pretty(&listing)
            .map_err(|e| StartError::Config(format!("writing JSON: {e}")))?;
        emit(&format!("{text}\n"))
    } else {
        emit(&listing_text(&listing))
    }
}

/// Writes a listing to stdout. A reader that stopped early (`| head`) is
/// not an error: the listing was asked for, and taken as far as wanted.
fn emit(text: &str) -> Result<(), StartError> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(StartError::io("stdout")(e)),
        _ => Ok(()),
    }
}

/// The current mapping in the `--event-map` format: a bound line for each
/// event counted by one host event, a comment for the rest (formulas and
/// unavailable events).
fn event_map_text(model: Implementation, backend: &PerfBackend, map: &EventMap) -> String {
    let mut out = String::new();
    say!(
        out,
        "# pfmd event map for --model {model}: NAME type=N config=X config1=Y"
    );
    say!(
        out,
        "# Events counted by one host event are bound lines; the rest are comments."
    );
    for event in catalog(model).into_iter().flatten() {
        match resolve(event, backend, map) {
            Resolution::Resolved(r) => match r.terms.as_slice() {
                [term] if term.scale == Scale::ONE => {
                    let (kind, config, config1) = crate::backend::perf::encoding(&term.event);
                    say!(
                        out,
                        "{}",
                        EventMap::format_line(event.name, kind, config, config1)
                    );
                }
                _ => say!(
                    out,
                    "# {}: {} {} (a formula, not one raw event)",
                    event.name,
                    r.fidelity,
                    r.formula
                ),
            },
            Resolution::Unavailable { reason, .. } => {
                say!(out, "# {}: unavailable: {reason}", event.name)
            }
        }
    }
    out
}

/// Width and periods of each counter of a model.
fn counters_of(model: Implementation) -> Vec<(u32, Vec<u64>)> {
    let model = Model::of(model);
    model
        .widths
        .iter()
        .zip(model.periods)
        .map(|(w, p)| (*w, p.to_vec()))
        .collect()
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

fn pairs_with(pairs: &'static [Pair], event: &AlphaEvent) -> Vec<&'static Pair> {
    pairs
        .iter()
        .filter(|p| std::ptr::eq(p.event(event.counter as usize), event))
        .collect()
}

/// The whole listing as data: what `--json` prints and the text is made of.
pub fn listing(model: Implementation, host: &dyn HostSupport, map: &EventMap) -> Value {
    let record = Model::of(model);
    let pairs = record.pairs;
    let mut resolved = std::collections::HashMap::new();
    let events: Vec<Value> = catalog(model)
        .into_iter()
        .flatten()
        .map(|event| {
            let resolution = resolve(event, host, map);
            let on_host = match &resolution {
                Resolution::Resolved(r) => json!({
                    "fidelity": r.fidelity.to_string(),
                    "formula": r.formula,
                    "host_events": r.terms.iter().map(|t| t.event.perf_name()).collect::<Vec<_>>(),
                }),
                Resolution::Unavailable { reason, .. } => json!({
                    "fidelity": "unavailable",
                    "reason": reason,
                }),
            };
            resolved.insert(event.name, matches!(resolution, Resolution::Resolved(_)));
            let mut row = json!({
                "name": event.name,
                "counter": event.counter,
                "code": hex(event.code),
                "description": event.description,
                "candidates": event.candidates.iter().map(|c| json!({
                    "fidelity": c.fidelity.to_string(),
                    "formula": c.formula,
                    "host_events": c.terms.iter().map(|t| t.event.perf_name()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "this_host": on_host,
            });
            if !pairs.is_empty() {
                row["pairs"] = pairs_with(pairs, event)
                    .iter()
                    .map(|p| json!(p.name))
                    .collect();
            }
            row
        })
        .collect();
    let counters: Vec<Value> = counters_of(model)
        .into_iter()
        .enumerate()
        .map(|(i, (width, periods))| json!({"counter": i, "width": width, "periods": periods}))
        .collect();
    let opened: Vec<String> = HostEvent::NAMED
        .iter()
        .filter(|e| host.check(e).is_ok())
        .map(|e| e.perf_name())
        .collect();
    let mut out = json!({
        "model": model.name(),
        "chip": model.chip(),
        "family": format!("{:?}", model.family()),
        "counters": counters,
        "events": events,
        "host_events_that_open": opened,
    });
    if !pairs.is_empty() {
        out["pairs"] = pairs
            .iter()
            .map(|p| {
                let names = [p.event(0).name, p.event(1).name];
                let countable = (0..2).all(|i| !p.counts[i] || resolved[names[i]]);
                json!({
                    "name": p.name,
                    "code": hex(p.code),
                    "counter0": names[0],
                    "counter1": names[1],
                    "counter1_counts": p.counts[1],
                    "profile_me": p.profile_me,
                    "countable_here": countable,
                })
            })
            .collect();
    }
    if record.profile_me {
        out["profile_me"] = json!({
            "items_bits": "PCNTSETITEMS bits 8..15",
            "statistics": profile_me::STATISTICS[1..].iter().map(|s| {
                let here = match profile_me::plan(s.value.into()) {
                    Ok(Some(_)) => "ip samples".to_string(),
                    Ok(None) => "disabled".to_string(),
                    Err(e) => format!("unavailable ({e})"),
                };
                let needs = match s.source {
                    Source::Ip => "ip samples".to_string(),
                    Source::Unit(unit) => unit.to_string(),
                    Source::Nowhere(why) => format!("nothing on Linux: {why}"),
                };
                json!({
                    "name": s.name,
                    "value": s.value,
                    "per_ret": s.per_ret,
                    "description": s.description,
                    "needs": needs,
                    "this_host": here,
                })
            }).collect::<Vec<_>>(),
        });
    }
    out
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn listing_text(l: &Value) -> String {
    let mut out = String::new();
    say!(
        out,
        "pfmd events for --model {} ({})",
        text(&l["model"]),
        text(&l["chip"])
    );
    for c in l["counters"].as_array().into_iter().flatten() {
        let periods: Vec<String> = c["periods"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| p.to_string())
            .collect();
        say!(
            out,
            "counter {}: {} bits, interrupts every {} events",
            c["counter"],
            c["width"],
            periods.join(" or ")
        );
    }
    for e in l["events"].as_array().into_iter().flatten() {
        let here = &e["this_host"];
        let host = match here.get("reason") {
            Some(reason) => format!("{:<11} {}", "unavailable", text(reason)),
            None => format!("{:<11} {}", text(&here["fidelity"]), text(&here["formula"])),
        };
        say!(
            out,
            "  counter {} {:<32} {:>20}  {host}\n      {}",
            e["counter"],
            text(&e["name"]),
            // Labelled: it is the chip's select code, not pfmstat -l's number.
            format!("code {}", text(&e["code"])),
            text(&e["description"])
        );
        if let Some(pairs) = e.get("pairs").and_then(Value::as_array) {
            let names: Vec<&str> = pairs.iter().map(text).collect();
            say!(out, "      in pairs: {}", names.join(", "));
        }
    }
    if let Some(pairs) = l.get("pairs").and_then(Value::as_array) {
        say!(
            out,
            "EV67 PCNT6MUX values (only these; any other is EINVAL):"
        );
        for p in pairs {
            say!(
                out,
                "  {:>5} {:<46} counter 0 {:<18} counter 1 {:<20}{}  {}",
                text(&p["code"]),
                text(&p["name"]),
                text(&p["counter0"]),
                text(&p["counter1"]),
                if p["counter1_counts"] == true {
                    ""
                } else {
                    " (off)"
                },
                if p["countable_here"] == true {
                    "countable here"
                } else {
                    "not countable here"
                }
            );
        }
    }
    if let Some(pm) = l.get("profile_me") {
        say!(
            out,
            "EV67 profile-me statistics ({}; this host: IBS op {}, PEBS {}):",
            text(&pm["items_bits"]),
            pm["ibs_op"],
            pm["pebs"]
        );
        for s in pm["statistics"].as_array().into_iter().flatten() {
            say!(
                out,
                "  {:>2} {:<28} {}",
                s["value"].as_u64().unwrap_or(0),
                text(&s["name"]),
                text(&s["this_host"])
            );
        }
    }
    let opened: Vec<&str> = l["host_events_that_open"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    say!(out, "host events that open here: {}", opened.join(", "));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    struct OnlySoftware;
    impl HostSupport for OnlySoftware {
        fn check(&self, event: &HostEvent) -> Result<(), String> {
            if event.is_software() {
                Ok(())
            } else {
                Err("no PMU".into())
            }
        }
    }

    #[test]
    fn every_model_lists_every_event_with_what_this_host_does() {
        for model in Implementation::ALL {
            let l = listing(model, &OnlySoftware, &EventMap::default());
            let events = l["events"].as_array().unwrap();
            let expected: usize = catalog(model).iter().map(|t| t.len()).sum();
            assert_eq!(events.len(), expected, "{model}");
            for e in events {
                let f = e["this_host"]["fidelity"].as_str().unwrap();
                assert!(["exact", "approximate", "unavailable"].contains(&f));
            }
            assert_eq!(
                l["counters"].as_array().unwrap().len(),
                match model.family() {
                    pfm_model::Family::Ev5 => 3,
                    _ => 2,
                }
            );
        }
    }

    #[test]
    fn ev67_shows_pairs_counters_and_profile_me() {
        let l = listing(Implementation::Ev67, &OnlySoftware, &EventMap::default());
        let pairs = l["pairs"].as_array().unwrap();
        assert_eq!(pairs.len(), pfm_model::ev6::EV67_PAIRS.len());
        let countable = |code: &str| {
            pairs.iter().find(|p| p["code"] == code).unwrap()["countable_here"] == true
        };
        assert!(!countable("0x0"), "retired instructions need a PMU");
        assert!(countable("0x4"), "cycles (cpu-clock) and an off counter 1");
        let ret_inst = l["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "PF67_C0_RET_INST")
            .unwrap();
        assert_eq!(
            ret_inst["pairs"],
            json!(["PF67_RET_INST_AND_CYCLES", "PF67_RET_INST_AND_BCACHE_MISS"])
        );
        let stats = l["profile_me"]["statistics"].as_array().unwrap();
        assert_eq!(stats.len(), 43);
        let retire = stats
            .iter()
            .find(|s| s["name"] == "PF67_PM_RETIRE")
            .unwrap();
        assert_eq!(retire["this_host"], "ip samples");
    }

    #[test]
    fn site_map_bindings_show_as_exact() {
        let map = EventMap::parse("PF5_MUX1_C_SCACHE_ACCESS type=4 config=0x1234\n").unwrap();
        struct Raw;
        impl HostSupport for Raw {
            fn check(&self, event: &HostEvent) -> Result<(), String> {
                match event {
                    HostEvent::Raw { .. } => Ok(()),
                    _ => Err("no".into()),
                }
            }
        }
        let l = listing(Implementation::Ev5, &Raw, &map);
        let e = l["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "PF5_MUX1_C_SCACHE_ACCESS")
            .unwrap();
        assert_eq!(e["this_host"]["fidelity"], "exact");
    }
}
