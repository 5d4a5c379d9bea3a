//! TEMPORARY placeholder until the perf backend branch lands.
use super::{Backend, BackendError, CountingGroup, GroupSpec};
use crate::model::{HostEvent, HostSupport};
pub struct PerfBackend;
impl PerfBackend {
    pub fn probe() -> Self {
        PerfBackend
    }
    pub fn encoding(_e: &HostEvent) -> (u32, u64, u64) {
        (0, 0, 0)
    }
}
impl HostSupport for PerfBackend {
    fn check(&self, _e: &HostEvent) -> Result<(), String> {
        Err("placeholder".into())
    }
}
impl Backend for PerfBackend {
    fn open_group(&self, _s: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError> {
        Err(BackendError::Unschedulable)
    }
    fn hardware_contended(&self, _c: &[u32]) -> bool {
        false
    }
}
