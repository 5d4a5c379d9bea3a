//! The per-counter operations of every family on one path (docs/device.md
//! §3): enables, raw-counter writes and reads, and the `*GETCNT` /
//! `*READCNTRS` counts. The families differ only in how many counters they
//! have, their widths and the layout of the reply elements.
//!
//! EV6 counters are 20 bits wide and interrupt every 2^20 events, so the raw
//! counter is exactly the chip's register, a preload `V` makes the next
//! interrupt come after `2^20 - V` events, and `READCNTRS` =
//! `(interrupts << 20) + raw` is the event count; EV5 likewise at its
//! full-width periods.

use super::open_file::OpenFile;
use super::session::{CpuCounts, Session};
use super::tally::MAX_COUNTERS;
use super::{DeviceError, IoctlReply};
use pfm_abi::{
    CounterMask, CounterOp, Family, Items, OpenMode, PMCTRS_ALL_CPUS, PfCntrs, PfCntrsEv5,
    PfCntrsEv6, RawCounters,
};
use zerocopy::IntoBytes;

/// What an enabling operation does to the raw counters it turns on.
enum RawStart<'a> {
    Keep,
    /// `RESTART`: zero them.
    Zero,
    /// `ENABWRITE`: write `values` on `cpus`.
    Write {
        cpus: &'a [u32],
        values: &'a [u64],
    },
}

impl Session<'_> {
    pub fn counter_op(&mut self, op: CounterOp) -> Result<IoctlReply, DeviceError> {
        match op {
            CounterOp::Disable(mask) => {
                let mut registers = self.file.settings.registers.clone();
                for (i, on) in registers.on.iter_mut().enumerate() {
                    *on &= !mask.contains_counter(i);
                }
                self.apply_registers(registers, |_| {})
            }
            CounterOp::Enable(mask) => self.enable_counters(mask, RawStart::Keep),
            CounterOp::Restart(mask) => self.enable_counters(mask, RawStart::Zero),
            CounterOp::EnableWrite(raw) => {
                let cpus = self.pmctrs_cpus(raw.cpu)?;
                let start = RawStart::Write {
                    cpus: &cpus,
                    values: &raw.values,
                };
                self.enable_counters(raw.select, start)
            }
            CounterOp::Clear(mask) => self.write_counters(mask, None, &[0; MAX_COUNTERS]),
            CounterOp::SetCounters(raw) => {
                let cpus = self.pmctrs_cpus(raw.cpu)?;
                self.write_counters(raw.select, Some(cpus), &raw.values)
            }
            CounterOp::GetCounters(raw) => {
                let cpus = self.pmctrs_cpus(raw.cpu)?;
                let [cpu] = cpus[..] else {
                    return Err(DeviceError::invalid(
                        "GETCNTRS reads the counters of one CPU: name it in the cpu field",
                    ));
                };
                let values = self.raw_counters(cpu)?;
                let reply = RawCounters { values, ..raw };
                let word = reply.pack(self.device.model.family());
                Ok(IoctlReply::out(word.as_bytes()))
            }
            CounterOp::GetCounts { addr } => self.counts_reply(addr, false),
            CounterOp::ReadCounts { addr } => self.counts_reply(addr, true),
        }
    }

    /// The CPUs a `pmctrs` cpu field names for this open: `PMCTRS_ALL_CPUS`
    /// is every CPU it holds; another CPU must be one it holds.
    fn pmctrs_cpus(&self, cpu: u64) -> Result<Vec<u32>, DeviceError> {
        let cpus = &self.file.opener.cpus;
        if cpu == PMCTRS_ALL_CPUS {
            return Ok(cpus.clone());
        }
        cpus.iter()
            .copied()
            .find(|&c| u64::from(c) == cpu)
            .map(|c| vec![c])
            .ok_or_else(|| {
                DeviceError::invalid(format!("cpu {cpu} is not one this open holds ({cpus:?})"))
            })
    }

    /// `PCNT?ENABLE`, `PCNT?RESTART` and `PCNT6ENABWRITE`: turn the selected
    /// counters on, set their raw counters as `start` says, and start
    /// counting as `PCNTRENABLE` would (privilege checked when counting
    /// starts).
    fn enable_counters(
        &mut self,
        mask: CounterMask,
        start: RawStart<'_>,
    ) -> Result<IoctlReply, DeviceError> {
        if mask.is_empty() {
            return Ok(IoctlReply::none());
        }
        if !self.file.settings.enabled {
            self.check_may_enable()?;
        }
        let mut registers = self.file.settings.registers.clone();
        for (i, on) in registers.on.iter_mut().enumerate() {
            *on |= mask.contains_counter(i);
        }
        self.apply_registers(registers, |f| {
            match start {
                RawStart::Keep => {}
                RawStart::Zero => {
                    let cpus = f.opener.cpus.clone();
                    preload(f, &cpus, mask, &[0; MAX_COUNTERS]);
                }
                RawStart::Write { cpus, values } => preload(f, cpus, mask, values),
            }
            f.settings.enabled = true;
        })
    }

    /// `PCNT?CLEAR` (`cpus` None: every CPU of the open, `values` zero) and
    /// `PCNT?SETCNTRS`: write the raw counters of the selected counters.
    fn write_counters(
        &mut self,
        mask: CounterMask,
        cpus: Option<Vec<u32>>,
        values: &[u64],
    ) -> Result<IoctlReply, DeviceError> {
        let registers = self.file.settings.registers.clone();
        self.apply_registers(registers, |f| {
            let cpus = cpus.unwrap_or_else(|| f.opener.cpus.clone());
            preload(f, &cpus, mask, values);
        })
    }

    /// The raw counters of one CPU as of now.
    fn raw_counters(&mut self, cpu: u32) -> Result<[u64; MAX_COUNTERS], DeviceError> {
        let per_cpu = self.snapshot()?;
        let (_, t, _) = per_cpu
            .iter()
            .find(|(c, _, _)| *c == cpu)
            .ok_or_else(|| DeviceError::invalid(format!("cpu {cpu} is not held")))?;
        Ok(t.map(|t| t.residual))
    }

    /// `*GETCNT` (interrupts) and `*READCNTRS` (`full`: `(interrupts <<
    /// width) + raw`), one element per configured CPU (EACH) or one summed
    /// over the open's CPUs with the latest `pr_cycle` (ONE, ALL), stored
    /// at the caller's pointer. Each CPU's values come from one read of its
    /// groups, so the interrupt and raw parts always belong together.
    fn counts_reply(&mut self, addr: u64, full: bool) -> Result<IoctlReply, DeviceError> {
        if !self.file.settings.items.contains(Items::COUNTERS) {
            return Err(DeviceError::invalid(
                "reading the counts needs PFM_COUNTERS selected",
            ));
        }
        let widths = self.device.model.widths;
        let per_cpu: Vec<(u32, [u64; MAX_COUNTERS], u64)> = self
            .snapshot()?
            .into_iter()
            .map(|(cpu, t, pr_cycle): CpuCounts| {
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
            .collect();
        let elements = arrange(
            self.file.opener.mode,
            self.device.config.configured_cpus,
            &per_cpu,
        );
        let bytes = encode(self.device.model.family(), &elements);
        Ok(IoctlReply::store(addr, bytes))
    }
}

/// Sets the raw counter (events since the last interrupt) of the selected
/// counters on `cpus` to `values` modulo the period, so the next interrupt
/// comes after `period - value` events: `2^width - value` at the full-width
/// periods, as on the chip. Interrupt counts stay.
fn preload(file: &mut OpenFile, cpus: &[u32], mask: CounterMask, values: &[u64]) {
    for &cpu in cpus {
        let Some(tally) = file.tallies.get_mut(cpu as usize) else {
            continue;
        };
        for (i, &value) in values.iter().enumerate().take(MAX_COUNTERS) {
            if mask.contains_counter(i) {
                let period = file.settings.registers.periods[i].max(1);
                tally.counters[i].residual = value % period;
            }
        }
    }
}

/// Lays per-CPU values out as the open mode wants.
fn arrange(
    mode: OpenMode,
    configured_cpus: usize,
    per_cpu: &[(u32, [u64; MAX_COUNTERS], u64)],
) -> Vec<([u64; MAX_COUNTERS], u64)> {
    match mode {
        OpenMode::Each => {
            let mut out = vec![([0; MAX_COUNTERS], 0); mode.elements(configured_cpus)];
            for (cpu, values, pr_cycle) in per_cpu {
                if let Some(slot) = out.get_mut(*cpu as usize) {
                    *slot = (*values, *pr_cycle);
                }
            }
            out
        }
        OpenMode::One | OpenMode::All => {
            let mut sum = [0u64; MAX_COUNTERS];
            let mut latest = 0;
            for (_, values, pr_cycle) in per_cpu {
                for (s, v) in sum.iter_mut().zip(values) {
                    *s = s.wrapping_add(*v);
                }
                latest = latest.max(*pr_cycle);
            }
            vec![(sum, latest)]
        }
    }
}

/// The family's count structure for each element, as bytes.
fn encode(family: Family, elements: &[([u64; MAX_COUNTERS], u64)]) -> Vec<u8> {
    match family {
        Family::Ev4 => elements
            .iter()
            .map(|&(v, pr_cycle)| PfCntrs {
                pf_cntr0: v[0],
                pf_cntr1: v[1],
                pr_cycle,
            })
            .collect::<Vec<_>>()
            .as_bytes()
            .to_vec(),
        Family::Ev5 => elements
            .iter()
            .map(|&(v, pr_cycle)| PfCntrsEv5 {
                pr_cycle,
                pf_cntr0: v[0],
                pf_cntr1: v[1],
                pf_cntr2: v[2],
            })
            .collect::<Vec<_>>()
            .as_bytes()
            .to_vec(),
        Family::Ev6 => elements
            .iter()
            .map(|&(v, pr_cycle)| PfCntrsEv6 {
                pr_cycle,
                pf_cntr0: v[0],
                pf_cntr1: v[1],
            })
            .collect::<Vec<_>>()
            .as_bytes()
            .to_vec(),
    }
}
