//! A scripted backend for unit tests of the device state machine: tests move
//! per-CPU event totals forward and groups see them while enabled.

use super::{
    Backend, BackendError, CountingGroup, GroupReading, GroupSpec, Sample, SampleSink, SamplerSpec,
    SamplingStream, Target, ThreadIdentity,
};
use pfm_model::{HostEvent, HostSupport};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct World {
    /// Event totals per (cpu, target, event) since the mock was made.
    totals: HashMap<(u32, Target, HostEvent), u64>,
    opened: Vec<GroupSpec>,
    contended: bool,
    samplers: Vec<MockSamplerSlot>,
    /// (time_enabled, time_running) every read reports.
    times: Option<(u64, u64)>,
    /// Threads that have exited: opening an event on them is `ESRCH`.
    exited: HashSet<i32>,
    /// Opening a group panics (a bug in pfmd, for containment tests).
    panic_on_open: bool,
    /// Enable and disable calls on groups and samplers, in order, changing
    /// their state or not.
    switches: Vec<Switch>,
    /// Offline CPUs: a CPU-wide event there is `ENODEV`, as the kernel's.
    offline: HashSet<u32>,
    /// Enabling a group fails (a host ioctl error), changing nothing.
    failing_enable: bool,
    /// Threads whose number a later thread took, and how many times.
    reused: HashMap<i32, u64>,
    /// Threads not owned by [`THREAD_OWNER`].
    owners: HashMap<i32, (u32, u32)>,
    /// Threads whose owner changes as soon as an event opens on them (a
    /// setuid exec racing with the open).
    owner_on_open: HashMap<i32, (u32, u32)>,
}

/// Who owns a thread's `/proc` files unless a test says otherwise: the
/// uid and gid of the fixtures' `user` caller.
pub const THREAD_OWNER: (u32, u32) = (1000, 1000);

/// One enable (`true`) or disable call on a host event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    Group(bool),
    Sampler(bool),
}

#[derive(Clone)]
struct MockSamplerSlot {
    spec: SamplerSpec,
    sink: Arc<dyn SampleSink>,
    enabled: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for MockSamplerSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockSamplerSlot")
            .field("spec", &self.spec)
            .finish()
    }
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

    /// Makes every read report these times (multiplexing, or a per-thread
    /// group whose thread ran on another CPU).
    pub fn set_times(&self, time_enabled: u64, time_running: u64) {
        self.world.lock().unwrap().times = Some((time_enabled, time_running));
    }

    /// Thread `tid` exits: events can no longer be opened on it.
    pub fn exit_thread(&self, tid: i32) {
        self.world.lock().unwrap().exited.insert(tid);
    }

    /// Thread `tid` now shows as owned by `owner` (`(0, 0)`: an exec of a
    /// setuid program made it not dumpable).
    pub fn set_thread_owner(&self, tid: i32, owner: (u32, u32)) {
        self.world.lock().unwrap().owners.insert(tid, owner);
    }

    /// Thread `tid` shows as owned by `owner` once the next event on it
    /// has opened.
    pub fn set_thread_owner_on_open(&self, tid: i32, owner: (u32, u32)) {
        self.world.lock().unwrap().owner_on_open.insert(tid, owner);
    }

    /// Thread `tid` exits and a new thread gets its number.
    pub fn reuse_thread(&self, tid: i32) {
        let mut world = self.world.lock().unwrap();
        world.exited.remove(&tid);
        *world.reused.entry(tid).or_default() += 1;
    }

    /// Takes `cpu` offline or brings it back: CPU-wide events on an offline
    /// CPU cannot be opened, and its events count nothing.
    pub fn set_online(&self, cpu: u32, online: bool) {
        let mut world = self.world.lock().unwrap();
        if online {
            world.offline.remove(&cpu);
        } else {
            world.offline.insert(cpu);
        }
    }

    pub fn set_panic_on_open(&self, panic: bool) {
        self.world.lock().unwrap().panic_on_open = panic;
    }

    /// Makes enabling a group or a sampler fail with `EIO` (or work again).
    pub fn set_failing_enable(&self, failing: bool) {
        self.world.lock().unwrap().failing_enable = failing;
    }

    fn check_enable(&self) -> Result<(), BackendError> {
        match self.world.lock().unwrap().failing_enable {
            true => Err(BackendError::Io {
                op: "enable",
                errno: nix::errno::Errno::EIO,
            }),
            false => Ok(()),
        }
    }

    /// `ESRCH` for an event on a thread that has exited, `ENODEV` for a
    /// CPU-wide event on an offline CPU.
    fn check_target(&self, target: Target, event: HostEvent, cpu: u32) -> Result<(), BackendError> {
        if target == Target::AllTasks && self.world.lock().unwrap().offline.contains(&cpu) {
            return Err(BackendError::Open {
                event,
                cpu,
                errno: nix::errno::Errno::ENODEV,
            });
        }
        match target {
            Target::Thread(tid) if self.world.lock().unwrap().exited.contains(&tid) => {
                Err(BackendError::Open {
                    event,
                    cpu,
                    errno: nix::errno::Errno::ESRCH,
                })
            }
            _ => Ok(()),
        }
    }

    pub fn set_contended(&self, contended: bool) {
        self.world.lock().unwrap().contended = contended;
    }

    /// Delivers `sample` to every enabled (hence open) sampler for its CPU
    /// and `target`, as many times as `ticks`.
    pub fn emit(&self, target: Target, sample: Sample, ticks: u64) {
        for slot in self.enabled_samplers(target, sample.cpu) {
            for _ in 0..ticks {
                slot.sink.sample(&sample);
            }
        }
    }

    /// The enabled (hence open) samplers for `cpu` and `target`.
    fn enabled_samplers(&self, target: Target, cpu: u32) -> Vec<MockSamplerSlot> {
        let slots = self.world.lock().unwrap().samplers.clone();
        slots
            .into_iter()
            .filter(|slot| {
                slot.enabled.load(std::sync::atomic::Ordering::SeqCst)
                    && slot.spec.cpu == cpu
                    && slot.spec.target == target
            })
            .collect()
    }

    /// Tells every enabled sampler for `cpu` and `target` that the kernel
    /// lost `records` of its samples (PERF_RECORD_LOST).
    pub fn lose(&self, target: Target, cpu: u32, records: u64) {
        for slot in self.enabled_samplers(target, cpu) {
            slot.sink.lost(cpu, records);
        }
    }

    /// Every sampler spec opened so far.
    pub fn sampler_specs(&self) -> Vec<SamplerSpec> {
        self.world
            .lock()
            .unwrap()
            .samplers
            .iter()
            .map(|s| s.spec.clone())
            .collect()
    }

    /// How many enable and disable calls groups have had.
    pub fn group_switches(&self) -> u64 {
        let world = self.world.lock().unwrap();
        world
            .switches
            .iter()
            .filter(|s| matches!(s, Switch::Group(_)))
            .count() as u64
    }

    fn switched(&self, switch: Switch) {
        self.world.lock().unwrap().switches.push(switch);
    }

    /// Every enable and disable call on groups and samplers so far, in
    /// order.
    pub fn switches(&self) -> Vec<Switch> {
        self.world.lock().unwrap().switches.clone()
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
        self.backend.check_enable()?;
        self.backend.switched(Switch::Group(true));
        if let Some(at) = self.disabled_at.take() {
            let now = self.backend.totals(&self.spec);
            for ((h, n), a) in self.hidden.iter_mut().zip(now).zip(at) {
                *h += n - a;
            }
        }
        Ok(())
    }

    fn disable(&mut self) -> Result<(), BackendError> {
        self.backend.switched(Switch::Group(false));
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
        let (time_enabled, time_running) =
            self.backend.world.lock().unwrap().times.unwrap_or((1, 1));
        Ok(GroupReading {
            values: now.iter().zip(&self.hidden).map(|(n, h)| n - h).collect(),
            time_enabled,
            time_running,
        })
    }
}

impl Backend for MockBackend {
    fn open_group(&self, spec: &GroupSpec) -> Result<Box<dyn CountingGroup>, BackendError> {
        assert!(
            !self.world.lock().unwrap().panic_on_open,
            "the mock was told to panic"
        );
        for event in &spec.events {
            self.check_target(spec.target, *event, spec.cpu)?;
            if !self.available.contains(event) {
                return Err(BackendError::Open {
                    event: *event,
                    cpu: spec.cpu,
                    errno: nix::errno::Errno::ENOENT,
                });
            }
        }
        let mut world = self.world.lock().unwrap();
        world.opened.push(spec.clone());
        if let Target::Thread(tid) = spec.target
            && let Some(owner) = world.owner_on_open.remove(&tid)
        {
            world.owners.insert(tid, owner);
        }
        drop(world);
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

    fn thread_identity(&self, tid: i32) -> Option<ThreadIdentity> {
        let world = self.world.lock().unwrap();
        (!world.exited.contains(&tid)).then(|| {
            let owner = world.owners.get(&tid).copied().unwrap_or(THREAD_OWNER);
            ThreadIdentity {
                birth: world.reused.get(&tid).copied().unwrap_or(0),
                owner,
                uids: [owner.0; 3],
                gids: [owner.1; 3],
                cap_permitted: 0,
            }
        })
    }

    fn open_sampler(
        &self,
        spec: &SamplerSpec,
        sink: Arc<dyn SampleSink>,
    ) -> Result<Box<dyn SamplingStream>, BackendError> {
        if !self.available.contains(&spec.event) {
            return Err(BackendError::Open {
                event: spec.event,
                cpu: spec.cpu,
                errno: nix::errno::Errno::ENOENT,
            });
        }
        self.check_target(spec.target, spec.event, spec.cpu)?;
        let enabled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.world.lock().unwrap().samplers.push(MockSamplerSlot {
            spec: spec.clone(),
            sink,
            enabled: enabled.clone(),
        });
        Ok(Box::new(MockSampler {
            enabled,
            backend: self.clone(),
        }))
    }

    fn max_sample_rate(&self) -> u64 {
        100_000
    }

    fn sampler_ring_bytes(&self) -> u64 {
        64 * 1024
    }
}

struct MockSampler {
    enabled: Arc<std::sync::atomic::AtomicBool>,
    backend: MockBackend,
}

impl Drop for MockSampler {
    /// A closed sampler delivers nothing more.
    fn drop(&mut self) {
        self.enabled
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl SamplingStream for MockSampler {
    fn enable(&mut self) -> Result<(), BackendError> {
        self.backend.check_enable()?;
        self.backend.switched(Switch::Sampler(true));
        self.enabled
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn disable(&mut self) -> Result<(), BackendError> {
        self.backend.switched(Switch::Sampler(false));
        self.enabled
            .store(false, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    fn drain(&mut self) {}
}
