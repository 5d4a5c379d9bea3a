//! The EV4 ioctls on the device: `PCNTSETMUX` and `PCNTGETCNT`.

use super::core::{Device, IoctlReply};
use super::open_file::{CounterState, OpenFile};
use super::tally::CpuTally;
use crate::ev4;
use crate::ioctl::abi::PfCntrs;
use crate::ioctl::{DeviceError, Ev4Request};
use crate::model::CounterSetting;

impl Device {
    pub(super) fn ev4_request(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        saved: &mut CounterState,
        request: Ev4Request,
    ) -> Result<IoctlReply, DeviceError> {
        match request {
            Ev4Request::SetMux(iccsr) => {
                let selection = ev4::decode(iccsr)?;
                // iccsr_disable clears the counters' enables (Registers::on).
                let mut registers = file.registers.clone();
                for (i, setting) in selection.counters.iter().enumerate() {
                    registers.settings[i] = Some(CounterSetting {
                        enabled: true,
                        ..*setting
                    });
                    registers.on[i] = setting.enabled;
                    registers.periods[i] = setting.period;
                }
                self.apply_registers(file, tallies, saved, registers, |_, _| {})
            }
            Ev4Request::GetCnt { addr } => self.counts_reply(
                file,
                tallies,
                addr,
                &ev4::WIDTHS,
                false,
                "PCNTGETCNT",
                |v, pr_cycle| PfCntrs {
                    pf_cntr0: v[0],
                    pf_cntr1: v[1],
                    pr_cycle,
                },
            ),
        }
    }
}
