//! What pfmd tells systemd (`Type=notify`), through the sd-notify crate:
//! READY=1 with a STATUS line once the device serves, STOPPING=1 on the way
//! out, and WATCHDOG=1 pings when the unit sets `WatchdogSec=` — sent only
//! while the device's open table can be locked, so a daemon whose table is
//! wedged stops pinging and systemd restarts it. Without `$NOTIFY_SOCKET`
//! (not under systemd) each is nothing.

use crate::device::Device;
use sd_notify::NotifyState;
use std::sync::Arc;

/// The device serves: READY=1 and what it serves.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A stop signal arrived.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Starts the watchdog pings if the unit asks for them.
pub fn start_watchdog(device: Arc<Device>) -> std::io::Result<()> {
    let Some(timeout) = sd_notify::watchdog_enabled() else {
        return Ok(());
    };
    tracing::info!(?timeout, "systemd watchdog on");
    std::thread::Builder::new()
        .name("pfm-watchdog".into())
        .spawn(move || {
            loop {
                std::thread::sleep(timeout / 2);
                // Blocks, and so stops the pings, if the table is wedged.
                let _ = device.open_count();
                send(&[NotifyState::Watchdog]);
            }
        })
        .map(drop)
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify systemd: {e}");
    }
}
