//! A scripted backend for unit tests of the device state machine: tests move
//! per-CPU event totals forward and groups see them while enabled.

use super::{Backend, BackendError, CountingGroup, GroupReading, GroupSpec, Target};
use crate::model::{HostEvent, HostSupport};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct World {
    /// Event totals per (cpu, target, event) since the mock was made.
    totals: HashMap<(u32, Target, HostEvent), u64>,
    opened: Vec<GroupSpec>,
    contended: bool,
}

/// The mock host. Clones share one world.
#[derive(Debug, Clone, Default)]
pub struct MockBackend {
    available: Arc<HashSet<HostEvent>>,
    world: Arc<Mutex<World>>,
}

impl MockBackend {
    pub fn with_events(events: &[HostEvent]) -> Self {
        MockBackend {
            available: Arc::new(events.iter().copied().collect()),
            world: Arc::default(),
        }
    }

    /// `count` more `event`s happen on `cpu` in `target`.
    pub fn advance(&self, cpu: u32, target: Target, event: HostEvent, count: u64) {
        *self
            .world
            .lock()
            .unwrap()
            .totals
            .entry((cpu, target, event))
            .or_default() += count;
    }

    pub fn set_contended(&self, contended: bool) {
        self.world.lock().unwrap().contended = contended;
    }

    /// Every group spec opened so far.
    pub fn opened(&self) -> Vec<GroupSpec> {
        self.world.lock().unwrap().opened.clone()
    }

    fn totals(&self, spec: &GroupSpec) -> Vec<u64> {
        let world = self.world.lock().unwrap();
        spec.events
            .iter()
            .map(|e| {
                world
                    .totals
                    .get(&(spec.cpu, spec.target, *e))
                    .copied()
                    .unwrap_or(0)
            })
            .collect()
    }
}

impl HostSupport for MockBackend {
    fn check(&self, event: &HostEvent) -> Result<(), String> {
        if self.available.contains(event) {
            Ok(())
        } else {
            Err("not counted by the mock host".into())
        }
    }
}

struct MockGroup {
    backend: MockBackend,
    spec: GroupSpec,
    /// Totals not seen by this group: before it opened, and while disabled.
    hidden: Vec<u64>,
    disabled_at: Option<Vec<u64>>,
}

impl CountingGroup for MockGroup {
    fn enable(&mut self) -> Result<(), BackendError> {
        if let Some(at) = self.disabled_at.take() {
            let now = self.backend.totals(&self.spec);
            for ((h, n), a) in self.hidden.iter_mut().zip(now).zip(at) {
                *h += n - a;
            }
        }
        Ok(())
    }

    fn disable(&mut self) -> Result<(), BackendError> {
        if self.disabled_at.is_none() {
            self.disabled_at = Some(self.backend.totals(&self.spec));
        }
        Ok(())
    }

    fn read(&mut self) -> Result<GroupReading, BackendError> {
        let now = self
            .disabled_at
            .clone()
            .unwrap_or_else(|| self.backend.totals(&self.spec));
        Ok(GroupReading {
            values: now.iter().zip(&self.hidden).map(|(n, h)| n - h).collect(),
            time_enabled: 1,
            time_running: 1,
        })
    }
}

impl Backend for MockBackend {
    fn open_group(&self, spec: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError> {
        for event in &spec.events {
            if !self.available.contains(event) {
                return Err(BackendError::Open {
                    event: *event,
                    cpu: spec.cpu,
                    errno: nix::errno::Errno::ENOENT,
                });
            }
        }
        self.world.lock().unwrap().opened.push(spec.clone());
        let now = self.totals(spec);
        Ok(Box::new(MockGroup {
            backend: self.clone(),
            spec: spec.clone(),
            hidden: now.clone(),
            disabled_at: Some(now),
        }))
    }

    fn hardware_contended(&self, _cpus: &[u32]) -> bool {
        self.world.lock().unwrap().contended
    }
}
