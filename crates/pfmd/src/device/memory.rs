//! Stores into caller memory for transports that cannot ask the kernel to copy
//! (FUSE ioctls on regular files are restricted, docs/device.md §1).

use crate::device::DeviceError;
use nix::sys::uio::{RemoteIoVec, process_vm_writev};
use nix::unistd::Pid;
use std::io::IoSlice;

/// Writes `bytes` at `addr` in the calling thread `tid`, the only address a
/// caller ever passes us. A failed or short write is `EFAULT`, like `copyout`.
pub fn store_to_caller(tid: i32, addr: u64, bytes: &[u8]) -> Result<(), DeviceError> {
    if bytes.is_empty() {
        return Ok(());
    }
    let fault = |why: String| {
        DeviceError::Fault(format!(
            "{} bytes at {addr:#x} in tid {tid}: {why}",
            bytes.len()
        ))
    };
    let remote = [RemoteIoVec {
        base: usize::try_from(addr).map_err(|_| fault("address out of range".into()))?,
        len: bytes.len(),
    }];
    match process_vm_writev(Pid::from_raw(tid), &[IoSlice::new(bytes)], &remote) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(n) => Err(fault(format!("short write of {n}"))),
        Err(errno) => Err(fault(errno.desc().to_string())),
    }
}

/// Has the allocator serve every allocation of a histogram chunk's size or
/// more with its own mapping, so that freeing it unmaps it at once. glibc
/// otherwise raises its mmap threshold after the first big free and serves
/// later chunks, read replies and snapshot copies from per-thread heaps,
/// whose free tops `malloc_trim` does not return: a daemon that once served
/// a few large profiles stayed tens of MiB above its idle size. Call once,
/// before any thread starts.
pub fn map_large_allocations() {
    // 64 KiB: one histogram chunk (`histogram::CHUNK` buckets of 4 bytes).
    const THRESHOLD: libc::c_int = 64 * 1024;
    // SAFETY: mallopt only sets the allocator's parameters; called before
    // any other thread exists, it races with no allocation.
    let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, THRESHOLD) };
    if set != 1 {
        tracing::debug!("mallopt(M_MMAP_THRESHOLD) refused; freed profiles are trimmed only");
    }
}

/// Gives memory freed by a large free (profile buckets) back to the system:
/// what `map_large_allocations` leaves to the heaps (smaller pieces).
pub fn return_freed_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists; it has
    // no preconditions and touches no memory of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_own_memory_and_faults_on_bad_addresses() {
        let tid = nix::unistd::gettid().as_raw();
        let mut target = [0u8; 8];
        store_to_caller(tid, target.as_mut_ptr() as u64, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(std::hint::black_box(target), [1, 2, 3, 4, 5, 6, 7, 8]);
        let err = store_to_caller(tid, 0, &[1]).unwrap_err();
        assert_eq!(err.errno(), nix::errno::Errno::EFAULT);
    }
}
