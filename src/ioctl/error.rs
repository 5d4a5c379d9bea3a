use nix::errno::Errno;

/// Why the device refused a request. Each variant has one errno (contract §9);
/// the text is for the log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("device busy: {0}")]
    Busy(String),
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("bad address: {0}")]
    Fault(String),
    #[error("not supported on this host: {0}")]
    NotSupported(String),
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    #[error("access denied: {0}")]
    AccessDenied(String),
    #[error("out of memory: {0}")]
    NoMemory(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("host error: {0}")]
    Host(String, Errno),
}

impl DeviceError {
    pub fn errno(&self) -> Errno {
        match self {
            Self::Busy(_) => Errno::EBUSY,
            Self::Invalid(_) => Errno::EINVAL,
            Self::Fault(_) => Errno::EFAULT,
            Self::NotSupported(_) => Errno::EOPNOTSUPP,
            Self::NotPermitted(_) => Errno::EPERM,
            Self::AccessDenied(_) => Errno::EACCES,
            Self::NoMemory(_) => Errno::ENOMEM,
            Self::NoSpace(_) => Errno::ENOSPC,
            Self::Host(_, errno) => *errno,
        }
    }

    pub fn invalid(why: impl Into<String>) -> Self {
        Self::Invalid(why.into())
    }
}
