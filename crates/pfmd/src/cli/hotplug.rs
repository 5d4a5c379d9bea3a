//! Tells the device when CPUs come online or go offline: the kernel's
//! uevents for the cpu subsystem (a netlink socket), or, where those cannot
//! be had (a container without them), a look at the online list every
//! second. Each event re-reads `/sys/devices/system/cpu/online` whole, so a
//! missed or reordered event costs nothing but its delay.

use super::host;
use crate::device::Device;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, socket,
};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

/// The kernel's multicast group of uevents.
const KERNEL_UEVENTS: u32 = 1;
/// How often the fallback looks at the online list.
const POLL_EVERY: Duration = Duration::from_secs(1);

/// Starts the thread that follows the online CPUs for `device`.
pub fn follow_cpus(device: Arc<Device>) -> std::io::Result<()> {
    let socket = uevent_socket();
    std::thread::Builder::new()
        .name("pfm-hotplug".into())
        .spawn(move || {
            // CPUs that changed between the start's read and now.
            refresh(&device);
            match socket {
                Ok(socket) => follow_uevents(&device, &socket),
                Err(e) => {
                    tracing::warn!(
                        "no kernel uevents ({e}): looking at the online CPUs every {POLL_EVERY:?} instead"
                    );
                    loop {
                        std::thread::sleep(POLL_EVERY);
                        refresh(&device);
                    }
                }
            }
        })
        .map(drop)
}

fn uevent_socket() -> nix::Result<OwnedFd> {
    let socket = socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkKObjectUEvent,
    )?;
    bind(socket.as_raw_fd(), &NetlinkAddr::new(0, KERNEL_UEVENTS))?;
    Ok(socket)
}

fn follow_uevents(device: &Device, socket: &OwnedFd) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match recv(socket.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(n) if is_cpu_hotplug(&buf[..n]) => refresh(device),
            Ok(_) => {}
            // ENOBUFS: uevents were dropped; one of them may have been ours.
            Err(nix::errno::Errno::ENOBUFS) => refresh(device),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                tracing::error!(
                    "reading kernel uevents: {e}; CPUs coming online will not be counted"
                );
                return;
            }
        }
    }
}

/// Whether a uevent (`ACTION@DEVPATH`, then `KEY=value` strings, each
/// NUL-terminated) says a CPU came online or went offline.
fn is_cpu_hotplug(message: &[u8]) -> bool {
    let mut fields = message.split(|&b| b == 0);
    let cpu = fields.clone().any(|f| f == b"SUBSYSTEM=cpu");
    let action = fields.any(|f| {
        matches!(
            f,
            b"ACTION=online" | b"ACTION=offline" | b"ACTION=add" | b"ACTION=remove"
        )
    });
    cpu && action
}

fn refresh(device: &Device) {
    match host::online_cpus() {
        Ok(online) => device.cpus_changed(online),
        Err(e) => tracing::error!("reading the online CPUs: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_uevents_are_told_from_others() {
        let online = b"online@/devices/system/cpu/cpu3\0ACTION=online\0DEVPATH=/devices/system/cpu/cpu3\0SUBSYSTEM=cpu\0SEQNUM=2210\0";
        let offline = b"offline@/devices/system/cpu/cpu3\0ACTION=offline\0DEVPATH=/devices/system/cpu/cpu3\0SUBSYSTEM=cpu\0SEQNUM=2209\0";
        let block = b"change@/devices/virtual/block/loop0\0ACTION=change\0SUBSYSTEM=block\0";
        let cpu_change = b"change@/devices/system/cpu/cpu3\0ACTION=change\0SUBSYSTEM=cpu\0";
        assert!(is_cpu_hotplug(online));
        assert!(is_cpu_hotplug(offline));
        assert!(!is_cpu_hotplug(block));
        assert!(!is_cpu_hotplug(cpu_change));
        assert!(!is_cpu_hotplug(b""));
    }
}
