//! The counter registers every family's ioctls share: per-counter enables,
//! raw-counter writes, and the GETCNT/READCNTRS snapshots.

use super::*;

/// The periods a family's counters have before any selection.
pub(in crate::device) fn first_periods(implementation: Implementation) -> [u64; MAX_COUNTERS] {
    match implementation.family() {
        Family::Ev4 => [65536, 4096, 0],
        Family::Ev5 => ev5::DEFAULT_PERIODS,
        Family::Ev6 => [ev6::PERIOD, ev6::PERIOD, 0],
    }
}

// Per-counter registers: shared by every family's mux, enable and counter
// ioctls (ev4_ioctl.rs, ev5_ioctl.rs, ev6_ioctl.rs).
impl Device {
    /// `EACCES` where enabling would count system-wide for a caller not
    /// allowed to (contract §8): PCNTRENABLE and every family's
    /// ENABLE/RESTART/ENABWRITE.
    pub(in crate::device) fn check_may_enable(
        &self,
        file: &OpenFile,
        caller: &Caller,
    ) -> Result<(), DeviceError> {
        if file.scope == Scope::LogAll
            && !self
                .config
                .policy
                .may_count_system_wide(caller.credentials()?)
        {
            return Err(DeviceError::AccessDenied(
                "system-wide counting (LOGALL) is not allowed for this caller; select PCNTLOGSELECT first".into(),
            ));
        }
        Ok(())
    }

    /// Applies new registers to an open: resolves every counter they make
    /// count (`EOPNOTSUPP` leaves everything as it was), remembers them for
    /// the next open, then reconfigures; `change` runs with the tallies
    /// folded, before counting restarts.
    pub(in crate::device) fn apply_registers(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        registers: Registers,
        change: impl FnOnce(&mut OpenFile, &mut [CpuTally]),
    ) -> Result<IoctlReply, DeviceError> {
        let mut counters: [Option<Selected>; MAX_COUNTERS] = Default::default();
        for (slot, setting) in counters.iter_mut().zip(registers.effective()) {
            if let Some(setting) = setting {
                *slot = Some(self.resolve_setting(&setting)?);
            }
        }
        *saved = CounterState {
            registers: registers.clone(),
            counters: counters.clone(),
        };
        self.reconfigure_with(file, tallies, |f, t| {
            f.registers = registers;
            f.counters = counters;
            change(f, t);
        })
    }

    /// The CPUs a `pmctrs` cpu field names for this open: `PMCTRS_ALL_CPUS`
    /// is every CPU it holds; another CPU must be one it holds.
    pub(in crate::device) fn pmctrs_cpus(
        file: &OpenFile,
        cpu: u64,
    ) -> Result<Vec<u32>, DeviceError> {
        if cpu == abi::PMCTRS_ALL_CPUS {
            return Ok(file.cpus.clone());
        }
        file.cpus
            .iter()
            .copied()
            .find(|&c| u64::from(c) == cpu)
            .map(|c| vec![c])
            .ok_or_else(|| {
                DeviceError::invalid(format!(
                    "cpu {cpu} is not one this open holds ({:?})",
                    file.cpus
                ))
            })
    }

    /// The one CPU a `*GETCNTRS` reads: the cpu field, or with
    /// `PMCTRS_ALL_CPUS` the CPU of a PCNTOPENONE open.
    pub(in crate::device) fn pmctrs_one_cpu(file: &OpenFile, cpu: u64) -> Result<u32, DeviceError> {
        match Self::pmctrs_cpus(file, cpu)?.as_slice() {
            [one] => Ok(*one),
            _ => Err(DeviceError::invalid(
                "GETCNTRS reads the counters of one CPU: name it in the cpu field",
            )),
        }
    }

    /// `PCNT?ENABLE`, `PCNT?RESTART` and `PCNT6ENABWRITE`: turn the
    /// `selected` counters on, set their raw counters as `start` says, and
    /// start counting as `PCNTRENABLE` would (privilege checked when counting
    /// starts).
    pub(in crate::device) fn enable_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        caller: &Caller,
        selected: &[bool],
        start: RawStart<'_>,
    ) -> Result<IoctlReply, DeviceError> {
        if !selected.contains(&true) {
            return Ok(IoctlReply::none());
        }
        if !file.enabled {
            self.check_may_enable(file, caller)?;
        }
        let mut registers = file.registers.clone();
        for (on, s) in registers.on.iter_mut().zip(selected) {
            *on |= s;
        }
        self.apply_registers(file, tallies, saved, registers, |f, t| {
            match start {
                RawStart::Keep => {}
                RawStart::Zero => {
                    let cpus = f.cpus.clone();
                    Self::preload(f, t, &cpus, selected, &[0; MAX_COUNTERS]);
                }
                RawStart::Write { cpus, values } => Self::preload(f, t, cpus, selected, values),
            }
            f.enabled = true;
        })
    }

    /// `PCNT?DISABLE`: turn the `selected` counters off.
    pub(in crate::device) fn disable_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        selected: &[bool],
    ) -> Result<IoctlReply, DeviceError> {
        let mut registers = file.registers.clone();
        for (on, sel) in registers.on.iter_mut().zip(selected) {
            *on &= !sel;
        }
        self.apply_registers(file, tallies, saved, registers, |_, _| {})
    }

    /// `PCNT?CLEAR` (`cpus` None: every CPU of the open, `values` zero) and
    /// `PCNT?SETCNTRS`: write the raw counters of the `selected` counters.
    pub(in crate::device) fn write_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        selected: &[bool],
        cpus: Option<Vec<u32>>,
        values: &[u64],
    ) -> Result<IoctlReply, DeviceError> {
        let registers = file.registers.clone();
        self.apply_registers(file, tallies, saved, registers, |f, t| {
            let cpus = cpus.unwrap_or_else(|| f.cpus.clone());
            Self::preload(f, t, &cpus, selected, values);
        })
    }

    /// Sets the raw counter (events since the last interrupt) of the
    /// `selected` counters on `cpus` to `values` modulo the period, so the
    /// next interrupt comes after `period - value` events: `2^width - value`
    /// at the full-width periods, as on the chip. Interrupt counts stay.
    pub(in crate::device) fn preload(
        file: &OpenFile,
        tallies: &mut [CpuTally],
        cpus: &[u32],
        selected: &[bool],
        values: &[u64],
    ) {
        for &cpu in cpus {
            let Some(tally) = tallies.get_mut(cpu as usize) else {
                continue;
            };
            for (i, (&sel, &value)) in selected.iter().zip(values).enumerate() {
                if sel {
                    let period = file.registers.periods[i].max(1);
                    tally.counters[i].residual = value % period;
                }
            }
        }
    }

    /// Per CPU of the open, as of one snapshot: `pr_cycle` and each counter's
    /// `(interrupts << width) + raw` (`*READCNTRS`), or its interrupts
    /// (`*GETCNT`). Each CPU's values come from one read of its groups, so
    /// the interrupt and raw parts always belong together (seed 004).
    pub(in crate::device) fn counter_values(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        widths: &[u32],
        full: bool,
    ) -> Result<Vec<(u32, [u64; MAX_COUNTERS], u64)>, DeviceError> {
        let per_cpu = self.snapshot(file, tallies)?;
        Ok(per_cpu
            .into_iter()
            .map(|(cpu, t, pr_cycle)| {
                let mut values = [0u64; MAX_COUNTERS];
                for (i, width) in widths.iter().enumerate() {
                    values[i] = if full {
                        t[i].interrupts
                            .wrapping_shl(*width)
                            .wrapping_add(t[i].residual)
                    } else {
                        t[i].interrupts
                    };
                }
                (cpu, values, pr_cycle)
            })
            .collect())
    }

    /// Lays `counter_values` out as the open mode wants: one element per
    /// configured CPU (EACH) or one element summed over the open's CPUs
    /// with the latest `pr_cycle` (ONE, ALL).
    pub(in crate::device) fn arrange_values<T: Default>(
        &self,
        mode: OpenMode,
        per_cpu: &[(u32, [u64; MAX_COUNTERS], u64)],
        element: impl Fn(&[u64; MAX_COUNTERS], u64) -> T,
    ) -> Vec<T> {
        match mode {
            OpenMode::Each => {
                let mut out: Vec<T> = (0..self.config.configured_cpus)
                    .map(|_| T::default())
                    .collect();
                for (cpu, values, pr_cycle) in per_cpu {
                    if let Some(slot) = out.get_mut(*cpu as usize) {
                        *slot = element(values, *pr_cycle);
                    }
                }
                out
            }
            OpenMode::One(_) | OpenMode::All => {
                let mut sum = [0u64; MAX_COUNTERS];
                let mut latest = 0;
                for (_, values, pr_cycle) in per_cpu {
                    for (s, v) in sum.iter_mut().zip(values) {
                        *s = s.wrapping_add(*v);
                    }
                    latest = latest.max(*pr_cycle);
                }
                vec![element(&sum, latest)]
            }
        }
    }

    /// `*GETCNT` (interrupts) and `*READCNTRS` (full counts) of any family,
    /// stored at the caller's pointer as `arrange_values` lays them out.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::device) fn counts_reply<T: IntoBytes + Immutable + Default>(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        addr: u64,
        widths: &[u32],
        full: bool,
        name: &str,
        element: impl Fn(&[u64; MAX_COUNTERS], u64) -> T,
    ) -> Result<IoctlReply, DeviceError> {
        if file.items & PFM_COUNTERS == 0 {
            return Err(DeviceError::invalid(format!(
                "{name} needs PFM_COUNTERS selected"
            )));
        }
        let per_cpu = self.counter_values(file, tallies, widths, full)?;
        let out: Vec<T> = self.arrange_values(file.mode, &per_cpu, element);
        Ok(IoctlReply::store(addr, out.as_bytes().to_vec()))
    }

    /// The raw counters of one CPU as of now.
    pub(in crate::device) fn raw_counters(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        cpu: u32,
    ) -> Result<[u64; MAX_COUNTERS], DeviceError> {
        let per_cpu = self.snapshot(file, tallies)?;
        let (_, t, _) = per_cpu
            .iter()
            .find(|(c, _, _)| *c == cpu)
            .ok_or_else(|| DeviceError::invalid(format!("cpu {cpu} is not held")))?;
        Ok(t.map(|t| t.residual))
    }
}
