//! The guest side: its /init, the markers it prints, and the layout of the
//! per-run files it reads.

use super::Arch;

/// /init prints this and the command's status when the command ends.
pub(crate) const EXIT_MARKER: &str = "PFM-VM-EXIT: ";
/// /init prints this and a reason when the guest cannot be set up.
pub(crate) const SETUP_ERROR_MARKER: &str = "PFM-VM-SETUP-ERROR: ";
/// Where includes land and where the command runs.
pub(crate) const WORK_DIR: &str = "work";
/// The per-run files: `cmd` (the command, shell-quoted) and `env`.
pub(crate) const RUN_DIR: &str = "etc/pfm-vm";
/// The modules to load, in order, and the list of them (`order`).
pub(crate) const MODULE_DIR: &str = "lib/modules/pfm-vm";

/// PID 1: mounts the usual file systems, loads the modules, runs
/// `/etc/pfm-vm/cmd` with busybox sh in /work, prints its status and powers
/// off. Everything goes to the serial console, which the host reads.
pub(crate) fn init_script(arch: Arch) -> String {
    let check = match arch {
        // The point of the x86_64 guest.
        Arch::X86_64 => {
            "if grep -qx cuse.ko /lib/modules/pfm-vm/order && [ ! -c /dev/cuse ]; then setup_error \"/dev/cuse missing\"; fi"
        }
        // Not fatal: a command may want to see what happens without it.
        Arch::Aarch64 => {
            "[ -d /sys/bus/event_source/devices/armv8_pmuv3 ] || echo \"pfm-vm: WARNING: no armv8_pmuv3 PMU in the guest\""
        }
    };
    format!(
        r#"#!/bin/sh
# PID 1 of the pfm VM guest (written by xtask).
# busybox finds its own path through /proc/self/exe to make the applet links.
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s
export PATH=/work:/work/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=dumb
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
setup_error() {{ echo "{SETUP_ERROR_MARKER}$*"; poweroff -f; }}
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=755 tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
ln -sf /proc/self/fd /dev/fd; ln -sf fd/0 /dev/stdin; ln -sf fd/1 /dev/stdout; ln -sf fd/2 /dev/stderr
ip link set lo up 2>/dev/null
hostname pfm-vm
for m in $(cat /{MODULE_DIR}/order); do
  insmod "/{MODULE_DIR}/$m" || setup_error "insmod $m failed"
done
{check}
[ -f /{RUN_DIR}/env ] && . /{RUN_DIR}/env
cd /{WORK_DIR} || setup_error "no /{WORK_DIR}"
sh /{RUN_DIR}/cmd </dev/null
rc=$?
echo "{EXIT_MARKER}$rc"
# tcsetattr(TCSADRAIN) returns once the console has sent everything.
stty -F /dev/console onlcr
poweroff -f
"#
    )
}

/// `words` as one line of busybox sh: each word single-quoted, so the shell
/// sees them unchanged and builtins (`exit 3`) still work.
pub(crate) fn shell_command(words: &[String]) -> String {
    let mut line = String::new();
    for word in words {
        line.push('\'');
        line.push_str(&word.replace('\'', r"'\''"));
        line.push_str("' ");
    }
    line.push('\n');
    line
}

/// What one console line means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ConsoleLine<'a> {
    /// Output of the command (or the kernel).
    Output(&'a str),
    /// The command ended with this status; `before` is output that had no
    /// newline of its own.
    Exit { before: &'a str, status: i32 },
    /// The guest could not be set up.
    SetupError(&'a str),
}

/// Classifies one console line (without its line ending).
pub(crate) fn classify(line: &str) -> ConsoleLine<'_> {
    if let Some(at) = line.find(SETUP_ERROR_MARKER) {
        return ConsoleLine::SetupError(&line[at + SETUP_ERROR_MARKER.len()..]);
    }
    if let Some(at) = line.rfind(EXIT_MARKER) {
        let digits = &line[at + EXIT_MARKER.len()..];
        if !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && let Ok(status) = digits.parse()
        {
            return ConsoleLine::Exit {
                before: &line[..at],
                status,
            };
        }
    }
    ConsoleLine::Output(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        let words = ["printf", "%s|", "a b", "it's", "$HOME"].map(String::from);
        assert_eq!(
            shell_command(&words),
            "'printf' '%s|' 'a b' 'it'\\''s' '$HOME' \n"
        );
    }

    #[test]
    fn markers() {
        assert_eq!(classify("hello"), ConsoleLine::Output("hello"));
        assert_eq!(
            classify("PFM-VM-EXIT: 3"),
            ConsoleLine::Exit {
                before: "",
                status: 3
            }
        );
        assert_eq!(
            classify("no newlinePFM-VM-EXIT: 0"),
            ConsoleLine::Exit {
                before: "no newline",
                status: 0
            }
        );
        assert_eq!(
            classify("PFM-VM-EXIT: x"),
            ConsoleLine::Output("PFM-VM-EXIT: x")
        );
        assert_eq!(
            classify("PFM-VM-SETUP-ERROR: insmod cuse.ko failed"),
            ConsoleLine::SetupError("insmod cuse.ko failed")
        );
    }
}
