//! The EV4 ioctls on the device: `PCNTSETMUX` and `PCNTGETCNT`.

use super::core::{Device, IoctlReply};
use super::open_file::{CounterState, OpenFile};
use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::ev4;
use crate::ioctl::abi::{PFM_COUNTERS, PfCntrs};
use crate::ioctl::{DeviceError, Ev4Request};
use crate::model::CounterSetting;
use zerocopy::IntoBytes;

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
            Ev4Request::GetCnt { addr } => {
                if file.items & PFM_COUNTERS == 0 {
                    return Err(DeviceError::invalid(
                        "PCNTGETCNT needs PFM_COUNTERS selected",
                    ));
                }
                let per_cpu = self.snapshot(file, tallies)?;
                let element = |t: &[Tally; MAX_COUNTERS], pr_cycle| PfCntrs {
                    pf_cntr0: t[0].interrupts,
                    pf_cntr1: t[1].interrupts,
                    pr_cycle,
                };
                let out: Vec<PfCntrs> = self.arrange(file.mode, &per_cpu, element);
                Ok(IoctlReply::store(addr, out.as_bytes().to_vec()))
            }
        }
    }
}
