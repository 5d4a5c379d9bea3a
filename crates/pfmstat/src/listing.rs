//! `pfmstat -l`: the model's events with their numbers, counters, aliases,
//! PAPI presets and meanings, and what the host counts for each.
//!
//! The host's answer comes from the running daemon, through the device:
//! each event is selected alone, as a counting run would select it, and
//! `PCNTGETINFO`'s `pi_fidelity` read back (`EOPNOTSUPP`: unavailable). That
//! is what pfmstat would count here, with the daemon's site event map, its
//! `--cpu-mhz` and this caller's privileges. `pfmd --list-events` answers
//! for the pfmd binary on this host instead, without a daemon; with
//! `--model` no device is asked and the host column is empty.

use super::Error;
use super::client::{CountingDevice, Fidelity};
use super::events::{self, Config};
use super::report::{JSON_VERSION, unavailable_reason};
use super::wrap::fill;
use nix::errno::Errno;
use pfm_model::{AlphaEvent, Implementation};
use serde_json::{Value, json};
use std::fmt::Write as _;

/// What the host answered for one event.
#[derive(Debug, Clone, PartialEq)]
pub enum Host {
    Counted(Fidelity),
    /// With the reason from the model's table.
    Unavailable(String),
}

impl Host {
    fn name(&self) -> &'static str {
        match self {
            Host::Counted(f) => f.name(),
            Host::Unavailable(_) => "unavailable",
        }
    }
}

/// Where the host column comes from, in words (the listing's header).
pub const HOST_SOURCE: &str = "the running pfmd, each event selected alone \
                               (PCNTGETINFO pi_fidelity; EOPNOTSUPP: unavailable)";

/// Whether the host counts `event`: programs it alone and asks
/// `PCNTGETINFO`. `Ok(None)`: unavailable (EOPNOTSUPP, or no EV67 pair
/// counts it).
pub fn probe(
    device: &mut CountingDevice,
    event: &'static AlphaEvent,
) -> Result<Option<Fidelity>, Error> {
    let Some(config) = Config::single(device.model(), event) else {
        return Ok(None);
    };
    match device.program(&config) {
        Ok(()) => Ok(device.fidelity()?[event.counter as usize]),
        Err(e) if e.errno() == Some(Errno::EOPNOTSUPP) => Ok(None),
        Err(source) => Err(Error::Program {
            what: "selecting an event",
            source,
        }),
    }
}

/// The host's answer for every event of the device's model, in catalog
/// order. The device must be prepared.
pub fn ask_host(device: &mut CountingDevice) -> Result<Vec<Host>, Error> {
    let model = device.model();
    events::flat(model)
        .into_iter()
        .map(|event| {
            if !events::countable(model, event) {
                return Ok(Host::Unavailable(format!(
                    "never counted: {}",
                    event.unavailable_because
                )));
            }
            Ok(match probe(device, event)? {
                Some(f) => Host::Counted(f),
                None => Host::Unavailable(unavailable_reason(event)),
            })
        })
        .collect()
}

/// The listing as text; `host` is `None` with `--model`.
pub fn text(model: Implementation, device: Option<&str>, host: Option<&[Host]>) -> String {
    let mut o = String::new();
    let source = match device {
        Some(path) => format!("events of the {model} ({}) through {path}", model.chip()),
        None => format!(
            "events of the {model} ({}) (--model: no device asked)",
            model.chip()
        ),
    };
    fill(&mut o, "", 2, &source);
    if host.is_some() {
        fill(&mut o, "host: ", 2, HOST_SOURCE);
    }
    let _ = writeln!(
        o,
        " {:>3}  {:<31} {:>3}  {:<11}  aliases, PAPI presets / meaning",
        "#", "event", "ctr", "host"
    );
    for (n, event) in events::flat(model).into_iter().enumerate() {
        let answer = host.and_then(|h| h.get(n));
        let columns = format!(
            " {n:>3}  {:<31} {:>3}  {:<11}  ",
            event.name,
            event.counter,
            answer.map_or("-", Host::name)
        );
        let mut names = events::aliases_of(model, event);
        names.extend(events::papi_of(model, event));
        fill(&mut o, &columns, 8, &names.join(", "));
        fill(&mut o, "        ", 8, event.description);
    }
    let defaults = events::default_events(model).join(" ");
    fill(&mut o, "default events (no -e): ", 2, &defaults);
    o
}

/// The listing as JSON (pfmstat(1), JSON OUTPUT).
pub fn json(model: Implementation, device: Option<&str>, host: Option<&[Host]>) -> Value {
    let events: Vec<Value> = events::flat(model)
        .into_iter()
        .enumerate()
        .map(|(n, event)| {
            let mut v = json!({
                "number": n,
                "name": event.name,
                "counter": event.counter,
                "aliases": events::aliases_of(model, event),
                "papi": events::papi_of(model, event),
                "description": event.description,
                "host": Value::Null,
            });
            if let Some(answer) = host.and_then(|h| h.get(n)) {
                v["host"] = json!(answer.name());
                if let Host::Unavailable(reason) = answer {
                    v["reason"] = json!(reason);
                }
            }
            v
        })
        .collect();
    json!({
        "version": JSON_VERSION,
        "pfmstat": env!("CARGO_PKG_VERSION"),
        "model": model.name(),
        "chip": model.chip(),
        "device": device,
        "host_source": host.map(|_| HOST_SOURCE),
        "events": events,
        "default_events": events::default_events(model),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_is_listed_within_100_columns() {
        for model in Implementation::ALL {
            let all = events::flat(model);
            let host: Vec<Host> = all.iter().map(|_| Host::Unavailable("x".into())).collect();
            let text = text(model, Some("/dev/pfcntr"), Some(&host));
            for line in text.lines() {
                assert!(line.chars().count() <= 100, "{model}: {line}");
            }
            for e in &all {
                assert!(text.contains(e.name), "{model}: {}", e.name);
            }
            let j = json(model, None, None);
            assert_eq!(j["events"].as_array().unwrap().len(), all.len());
            assert!(j["events"][0]["host"].is_null());
        }
        let m = Implementation::Ev6;
        let text = text(m, None, None);
        let cycles = text
            .lines()
            .find(|l| l.contains("PF6_MUX0_CYCLES"))
            .unwrap();
        assert!(cycles.contains("cycles, PAPI_TOT_CYC"), "{cycles}");
        assert!(
            cycles.contains(" - "),
            "no host column without a device: {cycles}"
        );
    }
}
