//! The flag words of the device: the open mode carried in `open(2)` flags and
//! the items of `PCNTSETITEMS`.

use crate::structs::{
    PCNTOPENALL, PCNTOPENEACH, PCNTOPENMASK, PCNTOPENONE, PFM_MODE_ALL, PFM_MODE_EACH,
    PFM_MODE_ONE, PFM_PROFME_MODE_MASK, PFM_PROFME_MODE_SHIFT,
};

/// The open mode (docs/device.md §2). Tru64 ORed it into the open flags; the
/// Linux header re-encodes it onto `O_DSYNC`/`O_APPEND`, which the kernel
/// passes to FUSE and CUSE unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenMode {
    /// Only the CPU the opener is bound to.
    One,
    /// Every CPU, data kept per CPU.
    Each,
    /// Every CPU, data aggregated.
    All,
}

impl OpenMode {
    /// The mode an `open(2)` flag word asks for; no mode bits at all is ALL,
    /// as with the pre-3.0 driver, which had no modes.
    pub fn from_open_flags(flags: i32) -> OpenMode {
        match flags & PCNTOPENMASK {
            PCNTOPENONE => OpenMode::One,
            PCNTOPENEACH => OpenMode::Each,
            _ => OpenMode::All,
        }
    }

    /// The bits to OR into `open(2)` flags.
    pub fn open_flags(self) -> i32 {
        match self {
            OpenMode::One => PCNTOPENONE,
            OpenMode::Each => PCNTOPENEACH,
            OpenMode::All => PCNTOPENALL,
        }
    }

    /// `pi_open_mode` of `struct pfm_info`.
    pub fn info_code(self) -> u64 {
        match self {
            OpenMode::One => PFM_MODE_ONE,
            OpenMode::Each => PFM_MODE_EACH,
            OpenMode::All => PFM_MODE_ALL,
        }
    }

    pub fn from_info_code(code: u64) -> Option<OpenMode> {
        [OpenMode::One, OpenMode::Each, OpenMode::All]
            .into_iter()
            .find(|m| m.info_code() == code)
    }

    /// Elements in a per-CPU reply (`*GETCNT`, `PCNTGETIPLHIS`): one per
    /// configured CPU in EACH mode, else one.
    pub fn elements(self, configured_cpus: usize) -> usize {
        match self {
            OpenMode::Each => configured_cpus.max(1),
            OpenMode::One | OpenMode::All => 1,
        }
    }
}

bitflags::bitflags! {
    /// What an open collects (`PCNTSETITEMS`). Bits 8..15 of the same word
    /// carry the EV67 profile-me statistic, see [`Items::profile_me`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Items: u64 {
        /// Interrupt counters (`PFM_COUNTERS`).
        const COUNTERS = 1;
        /// IPL histograms (`PFM_IPL`).
        const IPL = 2;
        /// PC-profile buckets (`PFM_PROFILING`).
        const PROFILING = 4;
    }
}

impl Items {
    /// The items of a `PCNTSETITEMS` word; other bits are ignored, as the
    /// original driver masked them.
    pub fn from_word(word: u64) -> Items {
        Items::from_bits_truncate(word)
    }

    /// The EV67 profile-me statistic the word selects (0: none).
    pub fn profile_me(word: u64) -> u64 {
        (word & PFM_PROFME_MODE_MASK) >> PFM_PROFME_MODE_SHIFT
    }

    /// Sampling is needed for these items (IPL histograms or profiles).
    pub fn sampled(self) -> bool {
        self.intersects(Items::IPL | Items::PROFILING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_modes_round_trip_through_flags_and_info() {
        for mode in [OpenMode::One, OpenMode::Each, OpenMode::All] {
            assert_eq!(OpenMode::from_open_flags(mode.open_flags()), mode);
            assert_eq!(OpenMode::from_info_code(mode.info_code()), Some(mode));
        }
        assert_eq!(OpenMode::from_open_flags(libc::O_RDONLY), OpenMode::All);
        assert_eq!(OpenMode::Each.elements(4), 4);
        assert_eq!(OpenMode::One.elements(4), 1);
    }

    #[test]
    fn items_ignore_unknown_bits_and_carry_the_statistic() {
        let word = 0x2a05;
        assert_eq!(Items::from_word(word), Items::COUNTERS | Items::PROFILING);
        assert_eq!(Items::profile_me(word), 0x2a);
        assert!(Items::IPL.sampled() && !Items::COUNTERS.sampled());
    }
}
