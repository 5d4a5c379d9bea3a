//! `--list-events` and `--print-event-map`.

use super::{Args, StartError, host};
use crate::backend::perf::PerfBackend;
use crate::model::{EventMap, HostEvent, Resolution, catalog, resolve};

pub fn run(args: &Args) -> Result<(), StartError> {
    let map = host::event_map(args)?;
    let backend = PerfBackend::probe();
    let counters = catalog(args.model);
    if counters.is_empty() {
        return Err(StartError::Config(format!(
            "--model {}: no event table yet",
            args.model
        )));
    }
    if args.print_event_map {
        println!(
            "# pfmd event map for --model {}: NAME type=N config=X config1=Y",
            args.model
        );
        println!("# Events counted by one host event are bound lines; the rest are comments.");
    } else {
        println!(
            "pfmd events for --model {} ({})",
            args.model,
            args.model.chip()
        );
    }
    for events in counters {
        for event in events {
            let resolution = resolve(event, &backend, &map);
            if args.print_event_map {
                match &resolution {
                    Resolution::Resolved(r) => match r.terms.as_slice() {
                        [term] if term.scale == crate::model::Scale::ONE => {
                            let (kind, config, config1) =
                                crate::backend::perf::encoding(&term.event);
                            println!(
                                "{}",
                                EventMap::format_line(event.name, kind, config, config1)
                            );
                        }
                        _ => println!(
                            "# {}: {} {} (a formula, not one raw event)",
                            event.name, r.fidelity, r.formula
                        ),
                    },
                    Resolution::Unavailable { reason, .. } => {
                        println!("# {}: unavailable: {reason}", event.name)
                    }
                }
                continue;
            }
            let host = match &resolution {
                Resolution::Resolved(r) => format!("{:<11} {}", r.fidelity.to_string(), r.formula),
                Resolution::Unavailable { reason, .. } => format!("{:<11} {reason}", "unavailable"),
            };
            println!(
                "  counter {} {:<16} {:#6x}  {host}\n      {}",
                event.counter, event.name, event.code, event.description
            );
        }
    }
    if !args.print_event_map {
        let opened: Vec<String> = HostEvent::NAMED
            .iter()
            .filter(|e| crate::model::HostSupport::check(&backend, e).is_ok())
            .map(|e| e.perf_name())
            .collect();
        println!("host events that open here: {}", opened.join(", "));
    }
    Ok(())
}
