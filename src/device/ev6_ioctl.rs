//! The EV6 and EV67 ioctls on the device (contract §5.3, §5.4): `PCNT6MUX`,
//! the per-counter `ENABWRITE/DISABLE/ENABLE/CLEAR/RESTART`, raw counter
//! access (`SETCNTRS/GETCNTRS`, union `pmctrs_ev6`, cpu `0xFF` = every CPU
//! of the open) and the driver counts (`GETCNT`, `READCNTRS`).
//!
//! Both counters are 20 bits wide and interrupt every 2^20 events, so the
//! raw counter is exactly the chip's register, a preload `V` makes the next
//! interrupt come after `2^20 - V` events, and `READCNTRS` = `(interrupts <<
//! 20) + raw` is the event count.

use super::caller::Caller;
use super::core::{Device, IoctlReply, RawStart};
use super::open_file::{CounterState, OpenFile};
use super::tally::{CpuTally, MAX_COUNTERS};
use crate::ev6;
use crate::ioctl::abi::{PfCntrsEv6, PmctrsEv6};
use crate::ioctl::{DeviceError, Ev6Request};
use zerocopy::IntoBytes;

impl Device {
    pub(super) fn ev6_request(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        caller: &Caller,
        request: Ev6Request,
    ) -> Result<IoctlReply, DeviceError> {
        let none = |_: &mut OpenFile, _: &mut [CpuTally]| {};
        match request {
            Ev6Request::Mux(word) => {
                let selection = ev6::decode_mux(word, self.config().implementation)?;
                let mut registers = file.registers.clone();
                for (slot, setting) in registers.settings.iter_mut().zip(selection.counters) {
                    *slot = Some(setting);
                }
                registers.settings[2] = None;
                registers.profile_me = selection.profile_me;
                if selection.profile_me {
                    tracing::info!(
                        "EV67 profile-me mode: counter 0 counts cycles, counter 1 stays off"
                    );
                }
                self.apply_registers(file, tallies, saved, registers, none)
            }
            Ev6Request::Disable(word) => {
                self.disable_counters(file, tallies, saved, &ev6::selected(word))
            }
            Ev6Request::Enable(word) => self.enable_counters(
                file,
                tallies,
                saved,
                caller,
                &ev6::selected(word),
                RawStart::Keep,
            ),
            Ev6Request::Restart(word) => self.enable_counters(
                file,
                tallies,
                saved,
                caller,
                &ev6::selected(word),
                RawStart::Zero,
            ),
            Ev6Request::EnabWrite(u) => {
                let cpus = Self::pmctrs_cpus(file, u.cpu())?;
                let values = [u.cntr0(), u.cntr1()];
                let start = RawStart::Write {
                    cpus: &cpus,
                    values: &values,
                };
                self.enable_counters(
                    file,
                    tallies,
                    saved,
                    caller,
                    &ev6::selected(u.select()),
                    start,
                )
            }
            Ev6Request::Clear(word) => {
                self.write_counters(file, tallies, saved, &ev6::selected(word), None, &[0; 2])
            }
            Ev6Request::SetCntrs(u) => {
                let cpus = Self::pmctrs_cpus(file, u.cpu())?;
                let values = [u.cntr0(), u.cntr1()];
                self.write_counters(
                    file,
                    tallies,
                    saved,
                    &ev6::selected(u.select()),
                    Some(cpus),
                    &values,
                )
            }
            Ev6Request::GetCntrs(u) => {
                let cpu = Self::pmctrs_one_cpu(file, u.cpu())?;
                let raw = self.raw_counters(file, tallies, cpu)?;
                let out = PmctrsEv6::new(u.select(), u.cpu(), raw[0], raw[1]);
                Ok(IoctlReply::out(out.as_bytes()))
            }
            Ev6Request::GetCnt { addr } => self.counts_reply(
                file,
                tallies,
                addr,
                &ev6::WIDTHS,
                false,
                "PCNT6GETCNT",
                element,
            ),
            Ev6Request::ReadCntrs { addr } => self.counts_reply(
                file,
                tallies,
                addr,
                &ev6::WIDTHS,
                true,
                "PCNT6READCNTRS",
                element,
            ),
        }
    }
}

#[cfg(test)]
#[path = "ev6_tests.rs"]
mod tests;

/// One CPU's `struct pfcntrs_ev6`.
fn element(v: &[u64; MAX_COUNTERS], pr_cycle: u64) -> PfCntrsEv6 {
    PfCntrsEv6 {
        pr_cycle,
        pf_cntr0: v[0],
        pf_cntr1: v[1],
    }
}
