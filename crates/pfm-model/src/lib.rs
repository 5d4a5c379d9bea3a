//! The Alpha performance-counter models pfmd emulates, and the vocabulary
//! they are written in.
//!
//! - [`ev4`], [`ev5`], [`ev6`]: each family's mux codes, periods, widths and
//!   event tables, and the decoders of its selection ioctls' words.
//! - [`registry`]: the models by implementation, above the families, so that
//!   nothing below it names more than its own family; each [`Model`] also
//!   carries what the tools show of it (aliases, PAPI presets ([`papi`]),
//!   default and cycle events, derived statistics as [`Derivation`]s,
//!   built-in costs as [`CostRow`]s), so no tool matches on the
//!   implementation.
//! - The vocabulary: Alpha events ([`AlphaEvent`]) with ordered host
//!   candidates over neutral host events ([`HostEvent`]), their
//!   [`Fidelity`], and [`resolve`], which picks the first candidate a host
//!   supports ([`HostSupport`]) or a site's [`EventMap`] binds.
//!
//! Models never name perf or a transport and never read the host: the
//! daemon's backend answers [`HostSupport`], the daemon turns [`ModelError`]
//! into errnos.

#![forbid(unsafe_code)]

mod cost;
mod derived;
pub mod ev4;
pub mod ev5;
pub mod ev6;
mod event;
mod host;
pub mod papi;
pub mod registry;
mod resolve;

pub use cost::CostRow;
pub use derived::{Count, Derivation};
pub use event::{
    AlphaEvent, Candidate, Fidelity, Scale, Term, approx, evaluate, event, exact, unavailable,
};
pub use host::HostEvent;
pub use pfm_abi::{Family, Implementation};
pub use registry::{Alias, Model, Pair, catalog};
pub use resolve::{EventMap, EventMapError, HostSupport, Resolution, ResolvedEvent, resolve};

/// Counters any model has at most (EV5 has three).
pub const MAX_COUNTERS: usize = 3;

/// One counter as a model's mux and period ioctls leave it.
#[derive(Debug, Clone, Copy)]
pub struct CounterSetting {
    pub event: &'static AlphaEvent,
    /// Events per interrupt.
    pub period: u64,
    /// False when the model's disable bits turned this counter off.
    pub enabled: bool,
}

/// Why a model refused a selection. The daemon gives each its errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Not a valid word for this model (`EINVAL`).
    #[error("{0}")]
    Invalid(String),
    /// Valid on the chip, but nothing pfmd drives can measure it (`EOPNOTSUPP`).
    #[error("{0}")]
    NotSupported(String),
}

impl ModelError {
    pub fn invalid(why: impl Into<String>) -> Self {
        Self::Invalid(why.into())
    }

    pub fn is_invalid(&self) -> bool {
        matches!(self, Self::Invalid(_))
    }
}
