use std::fmt;
use std::str::FromStr;

/// The chip family, which decides which ioctl family the device answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    Ev4 = 0,
    Ev5 = 1,
    Ev6 = 2,
}

/// The emulated Alpha implementation (`--model`), as `PCNTGETINFO` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Implementation {
    Ev4 = 0,
    Ev45 = 1,
    Ev5 = 2,
    Ev56 = 3,
    Pca56 = 4,
    Ev6 = 5,
    Ev67 = 6,
}

impl Implementation {
    pub const ALL: [Implementation; 7] = [
        Self::Ev4,
        Self::Ev45,
        Self::Ev5,
        Self::Ev56,
        Self::Pca56,
        Self::Ev6,
        Self::Ev67,
    ];

    pub fn family(self) -> Family {
        match self {
            Self::Ev4 | Self::Ev45 => Family::Ev4,
            Self::Ev5 | Self::Ev56 | Self::Pca56 => Family::Ev5,
            Self::Ev6 | Self::Ev67 => Family::Ev6,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Ev4 => "ev4",
            Self::Ev45 => "ev45",
            Self::Ev5 => "ev5",
            Self::Ev56 => "ev56",
            Self::Pca56 => "pca56",
            Self::Ev6 => "ev6",
            Self::Ev67 => "ev67",
        }
    }

    /// The chip's part number, for logs and listings.
    pub fn chip(self) -> &'static str {
        match self {
            Self::Ev4 => "21064",
            Self::Ev45 => "21064A",
            Self::Ev5 => "21164",
            Self::Ev56 => "21164A",
            Self::Pca56 => "21164PC",
            Self::Ev6 => "21264",
            Self::Ev67 => "21264A",
        }
    }
}

impl fmt::Display for Implementation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown model {0:?} (expected one of {names})", names = Implementation::ALL.map(Implementation::name).join(", "))]
pub struct UnknownModel(String);

impl FromStr for Implementation {
    type Err = UnknownModel;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownModel(s.to_string()))
    }
}
