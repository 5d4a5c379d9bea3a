//! The device: transports (FUSE, CUSE), open files, callers, caller memory.
