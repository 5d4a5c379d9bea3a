//! PC-profile ranges: `PCNTSET[UK]ADDR/RANGE` and caller ranges
//! (docs/device.md §6).

use super::budget::Resource;
use super::histogram::{Buckets, Profile, ProfileMode};
use super::session::Session;
use super::{DeviceError, IoctlReply, MAX_CALLER_RANGES};
use pfm_abi::{Items, RangeRequest};

impl Session<'_> {
    /// A new profiled range (turning that mode on), or in CALLER mode a
    /// kernel caller range.
    pub fn set_range(&mut self, range: RangeRequest) -> Result<IoctlReply, DeviceError> {
        let RangeRequest {
            kernel,
            start,
            end,
            stride,
        } = range;
        let stride = stride.unwrap_or(self.file.settings.stride);
        let mode = if kernel {
            ProfileMode::Kernel
        } else {
            ProfileMode::User
        };
        if !self.file.settings.items.contains(Items::PROFILING) {
            return Err(DeviceError::invalid(
                "the device is not open for profiling (PFM_PROFILING)",
            ));
        }
        let config = &self.device.config;
        if kernel
            && !config
                .policy
                .may_count_system_wide(self.caller.credentials()?)
        {
            return Err(DeviceError::AccessDenied(
                "kernel PC profiling needs perf_event_paranoid <= 0, CAP_PERFMON or --allow-group"
                    .into(),
            ));
        }
        // A new range shows other addresses of what the open samples: a
        // profile the caller could start itself, or none (docs/device.md §8).
        if self.file.settings.enabled {
            super::session::check_may_start(self.device, self.caller, self.file)?;
        }
        self.file.drain_samples();
        let mut histograms = self.file.sampled.histograms.lock();
        if kernel && let Some(profile) = histograms.profile.as_mut().filter(|p| p.caller_mode) {
            let (text_start, text_end) = config.kernel_text.unwrap_or((0, 0));
            if end <= start
                || !start.is_multiple_of(4)
                || !end.is_multiple_of(4)
                || start < text_start
                || end > text_end
            {
                return Err(DeviceError::Fault(format!(
                    "caller range [{start:#x}, {end:#x}) is not aligned kernel text [{text_start:#x}, {text_end:#x})"
                )));
            }
            if profile.caller_ranges.len() >= MAX_CALLER_RANGES {
                return Err(DeviceError::NoSpace(format!(
                    "only {MAX_CALLER_RANGES} caller ranges"
                )));
            }
            profile.caller_ranges.push((start, end));
            return Ok(IoctlReply::none());
        }
        if stride != 0 && !stride.is_power_of_two() {
            return Err(DeviceError::invalid(format!(
                "stride {stride} is not 0 or a power of two"
            )));
        }
        if end <= start {
            return Err(DeviceError::invalid(format!(
                "empty range [{start:#x}, {end:#x})"
            )));
        }
        let buckets = Profile::bucket_count(start, end, stride);
        let slots = histograms.slots() as u64;
        let bytes = buckets.saturating_mul(4).saturating_mul(slots);
        // The old buckets go first: a new range replaces the old one, and
        // one refused for its size leaves none, whichever limit refused it
        // (the driver freed the old buffer before allocating). A read(2)
        // call in progress ends on the buckets it began with: its snapshot
        // keeps them, and their charge, while the budget has room for the
        // new range too.
        let replaced = histograms.profile.take().is_some();
        let old_charge = self.file.sampled.profile_charge.take();
        match self.file.sampled.read_snapshots.first_mut() {
            Some(read) => read.charge = read.charge.take().or(old_charge),
            // No read keeps the old buckets: their charge goes with them,
            // before the new range's is taken.
            None => drop(old_charge),
        }
        if replaced {
            super::memory::return_freed_memory();
        }
        if bytes > config.max_profile_bytes {
            return Err(DeviceError::NoMemory(format!(
                "{bytes} bytes of buckets exceed --max-profile-bytes {}",
                config.max_profile_bytes
            )));
        }
        let (budgets, uid) = (&self.device.budgets, self.file.opener.uid);
        let charge_buckets =
            || budgets.charge(uid, Resource::ProfileBytes, bytes.saturating_mul(2));
        let charge = match charge_buckets() {
            Ok(charge) => charge,
            // No room for both: the kept buckets give way (a call that read
            // less than the whole profile leaves its snapshot until the next
            // call, so it may be no call in progress at all).
            Err(_) if !self.file.sampled.read_snapshots.is_empty() => {
                self.file.sampled.read_snapshots.clear();
                charge_buckets()?
            }
            Err(e) => return Err(e),
        };
        let cells = usize::try_from(buckets)
            .ok()
            .and_then(|per_slot| Buckets::zeroed(slots as usize, per_slot))
            .ok_or_else(|| DeviceError::NoMemory(format!("{bytes} bytes of buckets")))?;
        self.file.sampled.profile_charge = Some(charge);
        histograms.profile = Some(Profile {
            mode,
            start,
            end,
            bucket_bytes: stride.saturating_mul(4),
            buckets: cells,
            caller_mode: false,
            caller_ranges: Vec::new(),
        });
        drop(histograms);
        // The current stride, 0 included: `*ADDR` changes the range only.
        self.file.settings.stride = stride;
        tracing::debug!(
            ?mode,
            start = format_args!("{start:#x}"),
            end = format_args!("{end:#x}"),
            stride,
            buckets,
            "profiling range set"
        );
        Ok(IoctlReply::none())
    }
}
