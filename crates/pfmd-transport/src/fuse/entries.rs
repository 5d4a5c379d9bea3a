//! A ring queue's entry buffers, which the kernel shares with us: the owning
//! type keeps the one rule that makes that sound. An entry is **lent** to
//! the kernel from the SQE that hands it over (REGISTER, COMMIT_AND_FETCH)
//! until that command's completion; while lent, nothing here reads, writes
//! or frees it. Given back, it is ours: [`Entries::buffers`] and
//! [`Entries::buffers_mut`] hand it out, and `Drop` frees it.
//!
//! An entry still lent when the queue ends is not freed: the kernel holds it
//! until the FUSE connection ends, and may write a request into it until
//! then. That happens only where REGISTER failed for some entries of a
//! queue and not others (the transport then goes on without the ring); on a
//! normal end every command completes (`ENOTCONN`) and everything is freed.

use crate::abi::FuseUringReqHeader;

/// One entry: `fuse_uring_req_header`, the payload, and the two iovecs
/// (`iov[0]` → header, `iov[1]` → payload) that `sqe->addr` points at.
/// Raw pointers from `Box::into_raw`, because the kernel writes them behind
/// any reference we could hold.
struct Entry {
    header: *mut FuseUringReqHeader,
    payload: *mut [u8],
    iovecs: *mut [libc::iovec; 2],
    lent: bool,
}

pub struct Entries {
    entries: Vec<Entry>,
}

impl Entries {
    /// `count` entries with a payload buffer of `payload_len` bytes each.
    pub fn new(count: usize, payload_len: usize) -> Entries {
        let entries = (0..count)
            .map(|_| {
                let header = Box::into_raw(Box::new(FuseUringReqHeader::default()));
                let payload = Box::into_raw(vec![0u8; payload_len].into_boxed_slice());
                let iovecs = Box::into_raw(Box::new([
                    libc::iovec {
                        iov_base: header.cast(),
                        iov_len: size_of::<FuseUringReqHeader>(),
                    },
                    libc::iovec {
                        iov_base: payload.cast(),
                        iov_len: payload_len,
                    },
                ]));
                Entry {
                    header,
                    payload,
                    iovecs,
                    lent: false,
                }
            })
            .collect();
        Entries { entries }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Lends entry `index` to the kernel: the address for `sqe->addr` of the
    /// command that hands it over. The entry is the kernel's until
    /// [`Entries::returned`].
    pub fn lend(&mut self, index: usize) -> u64 {
        let entry = &mut self.entries[index];
        debug_assert!(!entry.lent, "entry {index} lent twice");
        entry.lent = true;
        entry.iovecs as u64
    }

    /// The command that lent entry `index` completed: the kernel is done
    /// with its buffers.
    pub fn returned(&mut self, index: usize) {
        if let Some(entry) = self.entries.get_mut(index) {
            entry.lent = false;
        }
    }

    /// Entries the kernel holds.
    pub fn lent(&self) -> usize {
        self.entries.iter().filter(|e| e.lent).count()
    }

    /// Entry `index`'s request header and payload; `None` while lent.
    pub fn buffers(&self, index: usize) -> Option<(&FuseUringReqHeader, &[u8])> {
        let entry = self.entries.get(index).filter(|e| !e.lent)?;
        // SAFETY: the kernel does not hold the entry (its command completed
        // and it was not lent again), the pointers came from Box::into_raw
        // and stay allocated while `self` lives, and `&self` keeps anyone
        // here from writing them meanwhile.
        Some(unsafe { (&*entry.header, &*entry.payload) })
    }

    /// As [`Entries::buffers`], to write the reply into.
    pub fn buffers_mut(&mut self, index: usize) -> Option<(&mut FuseUringReqHeader, &mut [u8])> {
        let entry = self.entries.get_mut(index).filter(|e| !e.lent)?;
        // SAFETY: as in `buffers`, and `&mut self` makes these the only
        // references.
        Some(unsafe { (&mut *entry.header, &mut *entry.payload) })
    }
}

impl Drop for Entries {
    fn drop(&mut self) {
        let mut kept = 0;
        for entry in &self.entries {
            if entry.lent {
                // The kernel may still write it (module doc): not ours to free.
                kept += 1;
                continue;
            }
            // SAFETY: the pointers came from Box::into_raw in `new`, each is
            // freed once, here, and the kernel does not hold the entry.
            unsafe {
                drop(Box::from_raw(entry.header));
                drop(Box::from_raw(entry.payload));
                drop(Box::from_raw(entry.iovecs));
            }
        }
        if kept > 0 {
            tracing::warn!(
                entries = kept,
                "FUSE ring entries still registered with the kernel are left allocated until the process ends"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lent_entry_is_out_of_reach_until_returned() {
        let mut entries = Entries::new(2, 64);
        assert_eq!(entries.lent(), 0);
        let addr = entries.lend(1);
        assert_ne!(addr, 0);
        assert!(entries.buffers(1).is_none());
        assert!(entries.buffers_mut(1).is_none());
        assert_eq!(entries.buffers(0).map(|(_, p)| p.len()), Some(64));
        assert_eq!(entries.lent(), 1);
        entries.returned(1);
        let (header, payload) = entries.buffers_mut(1).unwrap();
        header.ring_ent_in_out.payload_sz = 3;
        payload[..3].copy_from_slice(b"abc");
        let (header, payload) = entries.buffers(1).unwrap();
        assert_eq!(
            (header.ring_ent_in_out.payload_sz, &payload[..3]),
            (3, &b"abc"[..])
        );
        // The iovecs point at the buffers.
        // SAFETY: the iovecs of entry 1, not lent, read only.
        let iov = unsafe { &*(addr as *const [libc::iovec; 2]) };
        assert_eq!(iov[1].iov_len, 64);
        assert_eq!(iov[0].iov_len, size_of::<FuseUringReqHeader>());
    }
}
