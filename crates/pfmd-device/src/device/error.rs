//! Why the device refused a request. Each variant has one errno (the table
//! in docs/device.md §9); the text is for the log.

use nix::errno::Errno;
use pfm_abi::DecodeError;
use pfm_model::ModelError;

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
    #[error("no such device: {0}")]
    NoDevice(String),
    /// The CPU a ONE open counts is offline (docs/device.md §2).
    #[error("CPU offline: {0}")]
    CpuOffline(String),
    /// The request hit a bug in pfmd (a panic); the daemon goes on.
    #[error("internal error: {0}")]
    Internal(String),
    #[error("host error: {0}")]
    Host(String, Errno),
    /// Not an answer: the request would wait for its open, or take long,
    /// on a thread that serves other callers. The transport runs it again
    /// where waiting is fine ([`Waiting::Allowed`](super::Waiting)).
    #[error("the request is served elsewhere")]
    ServeElsewhere,
}

impl From<crate::policy::CallerError> for DeviceError {
    fn from(e: crate::policy::CallerError) -> Self {
        DeviceError::Host(e.to_string(), Errno::ESRCH)
    }
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
            Self::NoDevice(_) => Errno::ENODEV,
            Self::CpuOffline(_) => Errno::ENXIO,
            Self::Internal(_) => Errno::EIO,
            Self::Host(_, errno) => *errno,
            // Never sent: a transport that sees it serves the request again.
            Self::ServeElsewhere => Errno::EAGAIN,
        }
    }

    /// The errno's name, for log summaries.
    pub fn errno_name(&self) -> &'static str {
        match self {
            Self::Busy(_) => "EBUSY",
            Self::Invalid(_) => "EINVAL",
            Self::Fault(_) => "EFAULT",
            Self::NotSupported(_) => "EOPNOTSUPP",
            Self::NotPermitted(_) => "EPERM",
            Self::AccessDenied(_) => "EACCES",
            Self::NoMemory(_) => "ENOMEM",
            Self::NoSpace(_) => "ENOSPC",
            Self::NoDevice(_) => "ENODEV",
            Self::CpuOffline(_) => "ENXIO",
            Self::Internal(_) => "EIO",
            Self::Host(..) => "host errors",
            Self::ServeElsewhere => "EAGAIN",
        }
    }

    pub fn invalid(why: impl Into<String>) -> Self {
        Self::Invalid(why.into())
    }
}

impl From<DecodeError> for DeviceError {
    fn from(e: DecodeError) -> Self {
        DeviceError::Invalid(e.to_string())
    }
}

impl From<ModelError> for DeviceError {
    fn from(e: ModelError) -> Self {
        match e {
            ModelError::Invalid(why) => DeviceError::Invalid(why),
            ModelError::NotSupported(why) => DeviceError::NotSupported(why),
        }
    }
}
