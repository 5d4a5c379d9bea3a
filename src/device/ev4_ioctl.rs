//! The EV4 ioctls on the device: `PCNTSETMUX` and `PCNTGETCNT`.

use super::core::{Device, IoctlReply};
use super::open_file::{OpenFile, Selected};
use super::tally::{CpuTally, MAX_COUNTERS, Tally};
use crate::ev4;
use crate::ioctl::abi::{PFM_COUNTERS, PfCntrs};
use crate::ioctl::{DeviceError, Ev4Request};
use zerocopy::IntoBytes;

impl Device {
    pub(super) fn ev4_request(
        &self,
        file: &mut OpenFile,
        tallies: &mut [CpuTally],
        last_selection: &mut [Option<Selected>; MAX_COUNTERS],
        request: Ev4Request,
    ) -> Result<IoctlReply, DeviceError> {
        match request {
            Ev4Request::SetMux(iccsr) => {
                let selection = ev4::decode(iccsr)?;
                let counters = self.select(&selection.counters)?;
                *last_selection = counters.clone();
                self.reconfigure(file, tallies, |f| f.counters = counters)
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
