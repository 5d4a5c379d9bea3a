//! The daemon's allocator settings: large allocations (profiles) go back to
//! the system when freed.

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
