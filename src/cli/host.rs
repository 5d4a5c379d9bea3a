//! Facts about the host the device is configured from.

use super::{Args, StartError};
use crate::device::DeviceConfig;
use crate::device::caller::{SecurityPolicy, parse_cpu_list};
use crate::model::EventMap;
use std::path::Path;

const SITE_EVENT_MAP: &str = "/etc/pfm/events.map";

/// The nominal clock in kHz: `--cpu-mhz`, else the first `cpu MHz` of
/// /proc/cpuinfo, else the cpufreq maximum.
pub fn cpu_khz(args: &Args) -> Result<u64, StartError> {
    if let Some(mhz) = args.cpu_mhz {
        if !(mhz.is_finite() && mhz > 0.0) {
            return Err(StartError::Config(format!(
                "--cpu-mhz {mhz} is not a clock rate"
            )));
        }
        return Ok((mhz * 1000.0).round() as u64);
    }
    let from_cpuinfo = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .filter(|l| l.starts_with("cpu MHz"))
                .find_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        });
    if let Some(mhz) = from_cpuinfo.filter(|m| *m > 0.0) {
        return Ok((mhz * 1000.0).round() as u64);
    }
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .ok_or_else(|| StartError::Config("cannot tell the CPU clock; pass --cpu-mhz".into()))
}

pub fn online_cpus() -> Result<Vec<u32>, StartError> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .map_err(StartError::io("/sys/devices/system/cpu/online"))?;
    parse_cpu_list(&text)
        .ok_or_else(|| StartError::Config(format!("cannot parse online CPUs {text:?}")))
}

pub fn configured_cpus() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).max(1)
}

pub fn event_map(args: &Args) -> Result<EventMap, StartError> {
    let path = match &args.event_map {
        Some(path) => path.as_path(),
        None if Path::new(SITE_EVENT_MAP).exists() => Path::new(SITE_EVENT_MAP),
        None => return Ok(EventMap::default()),
    };
    let text = std::fs::read_to_string(path).map_err(StartError::io(path.display().to_string()))?;
    let map = EventMap::parse(&text)?;
    tracing::info!(path = %path.display(), "site event map loaded");
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
    Ok(DeviceConfig {
        implementation: args.model,
        cpu_khz: cpu_khz(args)?,
        configured_cpus: configured_cpus(),
        online_cpus: online_cpus()?,
        policy: policy(args)?,
        event_map: event_map(args)?,
        max_profile_bytes: args.max_profile_bytes,
        kernel_text: kernel_text(),
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
