//! What every Alpha model shares: the implementations, the event-table types
//! and the neutral host-event vocabulary that event tables are written in.
//! Models never name perf; the backend never names Alpha events.

mod event;
mod host;
mod implementation;
mod resolve;

pub use event::{
    AlphaEvent, Candidate, Fidelity, Scale, Term, approx, evaluate, event, exact, unavailable,
};
pub use host::HostEvent;
pub use implementation::{Family, Implementation};
pub use resolve::{EventMap, EventMapError, HostSupport, Resolution, ResolvedEvent, resolve};

/// One counter as a model's mux and period ioctls leave it.
#[derive(Debug, Clone, Copy)]
pub struct CounterSetting {
    pub event: &'static AlphaEvent,
    /// Events per interrupt.
    pub period: u64,
    /// False when the model's disable bits turned this counter off.
    pub enabled: bool,
}

/// Every event of `implementation`'s tables, counter by counter (EV5: each
/// counter's base table, then its Cbox table for that implementation).
pub fn catalog(implementation: Implementation) -> Vec<&'static [AlphaEvent]> {
    match implementation {
        Implementation::Ev4 | Implementation::Ev45 => crate::ev4::EVENTS.to_vec(),
        Implementation::Ev5 | Implementation::Ev56 => crate::ev5::EV5_EVENTS.to_vec(),
        Implementation::Pca56 => crate::ev5::PCA56_EVENTS.to_vec(),
        Implementation::Ev6 => crate::ev6::EV6_EVENTS.to_vec(),
        Implementation::Ev67 => crate::ev6::EV67_EVENTS.to_vec(),
    }
}
