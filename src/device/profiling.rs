//! PC-profile ranges: PCNTSET[UK]ADDR/RANGE and caller ranges (contract §6).

use super::*;

impl Device {
    /// PCNTSET[UK]ADDR/RANGE: a new profiled range (turning that mode on), or
    /// in CALLER mode a kernel caller range (contract §6).
    pub(in crate::device) fn set_range(
        &self,
        file: &mut OpenFile,
        caller: &Caller,
        mode: ProfileMode,
        start: u64,
        end: u64,
        stride: u64,
    ) -> Result<IoctlReply, DeviceError> {
        Self::need_profiling(file)?;
        if mode == ProfileMode::Kernel
            && !self
                .config
                .policy
                .may_count_system_wide(caller.credentials()?)
        {
            return Err(DeviceError::AccessDenied(
                "kernel PC profiling needs perf_event_paranoid <= 0, CAP_PERFMON or --allow-group"
                    .into(),
            ));
        }
        file.drain_samples();
        let mut histograms = file.histograms.lock();
        if mode == ProfileMode::Kernel
            && let Some(profile) = histograms.profile.as_mut().filter(|p| p.caller_mode)
        {
            let (text_start, text_end) = self.config.kernel_text.unwrap_or((0, 0));
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
        if bytes > self.config.max_profile_bytes {
            return Err(DeviceError::NoMemory(format!(
                "{bytes} bytes of buckets exceed --max-profile-bytes {}",
                self.config.max_profile_bytes
            )));
        }
        let mut cells = Vec::new();
        for _ in 0..slots {
            let mut slot: Vec<u32> = Vec::new();
            slot.try_reserve_exact(buckets as usize)
                .map_err(|e| DeviceError::NoMemory(format!("{bytes} bytes of buckets: {e}")))?;
            slot.resize(buckets as usize, 0);
            cells.push(slot);
        }
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
        file.stride = if stride == 0 { file.stride } else { stride };
        tracing::info!(?mode, start, end, stride, buckets, "profiling range set");
        Ok(IoctlReply::none())
    }

    pub(in crate::device) fn need_profiling(file: &OpenFile) -> Result<(), DeviceError> {
        if file.items & PFM_PROFILING == 0 {
            return Err(DeviceError::invalid(
                "the device is not open for profiling (PFM_PROFILING)",
            ));
        }
        Ok(())
    }
}
