//! Facts about the host the device is configured from.

use super::{Args, StartError};
use crate::device::DeviceConfig;
use crate::policy::{SecurityPolicy, parse_cpu_list};
use pfm_model::{EventMap, Model};
use std::path::Path;

const SITE_EVENT_MAP: &str = "/etc/pfm/events.map";

/// Where the nominal clock came from, for the log and `--version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    Option,
    Cpuinfo,
    Cpufreq,
    CycleCounter,
}

impl std::fmt::Display for ClockSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ClockSource::Option => "--cpu-mhz",
            ClockSource::Cpuinfo => "/proc/cpuinfo",
            ClockSource::Cpufreq => "cpufreq cpuinfo_max_freq",
            ClockSource::CycleCounter => "measured against the cycle counter",
        })
    }
}

/// The nominal clock in kHz and where it came from: `--cpu-mhz`, else the
/// first `cpu MHz` of /proc/cpuinfo (x86), else the cpufreq maximum, else a
/// measurement against the cycle counter (arm64 hosts often publish no
/// clock at all).
pub fn cpu_khz(args: &Args) -> Result<(u64, ClockSource), StartError> {
    // --cpu-mhz is a real clock rate: its parser checked it.
    if let Some(mhz) = args.cpu_mhz {
        return Ok(((mhz * 1000.0).round() as u64, ClockSource::Option));
    }
    let from_cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .filter(|l| l.starts_with("cpu MHz"))
                .find_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        });
    if let Some(mhz) = from_cpuinfo.filter(|m| *m > 0.0) {
        return Ok(((mhz * 1000.0).round() as u64, ClockSource::Cpuinfo));
    }
    let from_cpufreq =
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&khz| khz > 0);
    if let Some(khz) = from_cpufreq {
        return Ok((khz, ClockSource::Cpufreq));
    }
    crate::backend::perf::measure_clock_khz()
        .map(|khz| (khz, ClockSource::CycleCounter))
        .ok_or_else(|| {
            StartError::Config(
                "cannot tell the CPU clock: /proc/cpuinfo has no \"cpu MHz\", there is no cpufreq \
                 and no cycle counter to measure; pass --cpu-mhz N (the clock in MHz)"
                    .into(),
            )
        })
}

pub fn online_cpus() -> Result<Vec<u32>, StartError> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(StartError::io("/sys/devices/system/cpu/online"))?;
    parse_cpu_list(&text)
        .ok_or_else(|| StartError::Config(format!("cannot parse online CPUs {text:?}")))
}

pub fn configured_cpus() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_CONF)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1)
        .max(1)
}

pub fn event_map(args: &Args) -> Result<EventMap, StartError> {
    let (path, what) = match &args.event_map {
        Some(path) => (path.as_path(), "--event-map"),
        None if Path::new(SITE_EVENT_MAP).exists() => (Path::new(SITE_EVENT_MAP), "site event map"),
        None => return Ok(EventMap::default()),
    };
    let text = std::fs::read_to_string(path)
        .map_err(StartError::io(format!("{what} {}", path.display())))?;
    let map = EventMap::parse(&text).map_err(|source| StartError::EventMap {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    tracing::info!(path = %path.display(), "site event map loaded");
    let model = Model::of(args.model);
    for name in map.names().filter(|name| model.event(name).is_none()) {
        tracing::warn!(
            path = %path.display(),
            "{name} is not an event of --model {}: its binding is not used",
            args.model
        );
    }
    Ok(map)
}

pub fn policy(args: &Args) -> Result<SecurityPolicy, StartError> {
    let allow_gid = match &args.allow_group {
        None => None,
        Some(name) => Some(
            nix::unistd::Group::from_name(name)
                .map_err(|e| StartError::Config(format!("--allow-group {name}: {e}")))?
                .ok_or_else(|| StartError::Config(format!("--allow-group {name}: no such group")))?
                .gid
                .as_raw(),
        ),
    };
    Ok(SecurityPolicy {
        allow_gid,
        paranoid_override: None,
    })
}

pub fn device_config(args: &Args) -> Result<DeviceConfig, StartError> {
    let (cpu_khz, clock) = cpu_khz(args)?;
    tracing::info!(
        "nominal clock {}.{:03} MHz ({clock})",
        cpu_khz / 1000,
        cpu_khz % 1000
    );
    Ok(DeviceConfig {
        implementation: args.model,
        cpu_khz,
        configured_cpus: configured_cpus(),
        online_cpus: online_cpus()?,
        policy: policy(args)?,
        event_map: event_map(args)?,
        max_profile_bytes: args.max_profile_bytes,
        limits: args.limits(),
        kernel_text: kernel_text(),
        parallel_reads: args.parallel_reads,
    })
}

/// `[_stext, _etext)` from /proc/kallsyms (real addresses need root).
pub fn kernel_text() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let symbol = |name: &str| {
        text.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            let addr = u64::from_str_radix(w.next()?, 16).ok()?;
            (w.nth(1)? == name && addr != 0).then_some(addr)
        })
    };
    let range = (symbol("_stext")?, symbol("_etext")?);
    (range.0 < range.1).then_some(range)
}
