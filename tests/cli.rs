//! The daemon's command line and its systemd handshake.

use crate::common;

use common::{Daemon, can_run, run, text};
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

#[test]
fn list_events_shows_every_ev4_event_and_what_the_host_counts() {
    let out = run(Command::new(common::bin("pfmd")).arg("--list-events"));
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for table in pfm_model::ev4::EVENTS {
        for event in table {
            let line = stdout
                .lines()
                .find(|l| l.split_whitespace().any(|w| w == event.name))
                .unwrap_or_else(|| panic!("{} missing:\n{stdout}", event.name));
            assert!(
                ["exact", "approximate", "unavailable"]
                    .iter()
                    .any(|f| line.contains(f)),
                "{line}"
            );
        }
    }
    let cycles = stdout.lines().find(|l| l.contains("PF_CYCLES")).unwrap();
    assert!(
        !cycles.contains("unavailable"),
        "every host has cpu-clock: {cycles}"
    );
    let palmode = stdout.lines().find(|l| l.contains("PF_PALMODE")).unwrap();
    assert!(palmode.contains("unavailable"), "{palmode}");
}

#[test]
fn print_event_map_round_trips_through_event_map() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("events.map");
    // Bind PF_PALMODE (no host event anywhere) to the software cpu-clock.
    std::fs::write(&map, "# test\nPF_PALMODE type=1 config=0\n").unwrap();
    let out = run(Command::new(common::bin("pfmd"))
        .args(["--print-event-map", "--event-map"])
        .arg(&map));
    assert!(out.status.success(), "{}", text(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("PF_PALMODE type=1 config=0x0")),
        "{printed}"
    );
    // PF_CYCLES is either the hardware cycle counter or a formula over cpu-clock.
    assert!(
        printed
            .lines()
            .any(|l| l.starts_with("PF_CYCLES type=0 config=0x0")
                || l.starts_with("# PF_CYCLES: approximate")),
        "{printed}"
    );
    std::fs::write(&map, "PF_PALMODE type=x\n").unwrap();
    let out = run(Command::new(common::bin("pfmd"))
        .args(["--list-events", "--event-map"])
        .arg(&map));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        text(&out)
    );
}

/// A map line naming no event (a typo, a wrong case) stops pfmd naming the
/// line; a line for another model's event is kept for that model's daemons
/// and the log says this one does not use it.
#[test]
fn event_map_names_must_be_events() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("events.map");
    let pfmd = |model: &str| {
        let mut c = Command::new(common::bin("pfmd"));
        c.args(["--model", model, "--print-event-map", "--event-map"])
            .arg(&map);
        run(&mut c)
    };
    // A map that is not there names the option, with the errno in words.
    let out = pfmd("ev4");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "--event-map {}: No such file or directory\n",
            map.display()
        )),
        "{}",
        text(&out)
    );
    for (content, says) in [
        (
            "PF_PALMODE type=1 config=0\nPF_PALMOD type=1 config=0\n",
            "line 2: PF_PALMOD",
        ),
        ("pf_palmode type=1 config=0\n", "line 1: pf_palmode"),
        (
            "PF_PALMODE type=1 config=0\nPF_PALMODE type=1 config=1\n",
            "line 2",
        ),
    ] {
        std::fs::write(&map, content).unwrap();
        let out = pfmd("ev4");
        assert_eq!(out.status.code(), Some(1), "{content:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{content:?}: {stderr}");
    }
    std::fs::write(
        &map,
        "PF_PALMODE type=1 config=0\nPF5_MUX0_ISSUES type=1 config=1\n",
    )
    .unwrap();
    let out = pfmd("ev4");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PF_PALMODE type=1 config=0x0"),
        "{}",
        text(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("PF5_MUX0_ISSUES is not an event of --model ev4"),
        "{stderr}"
    );
}

/// A listing read only in part (`pfmd --list-events | head -1`) ends
/// pfmd with status 0, not a panic about the broken pipe.
#[test]
fn a_listing_into_a_closed_pipe_exits_0() {
    for args in [
        &["--list-events"][..],
        &["--list-events", "--json"],
        &["--print-event-map"],
    ] {
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let out = run(Command::new(common::bin("pfmd"))
            .args(args)
            .stdout(std::process::Stdio::from(write)));
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
}

/// An output file that cannot be created is found before the command runs
/// (a typo in `-o` once cost the whole run, found only at its end), with a
/// message that names the option.
#[test]
fn tools_check_their_output_files_before_running_the_command() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    for (tool, option, code) in [
        ("pfmstat", "-o", 125),
        ("pfmprof", "-o", 1),
        ("pfmprof", "--output", 1),
    ] {
        let out = run(common::tool(tool, &daemon).args([
            option,
            "/nonexistent/dir/out",
            "sh",
            "-c",
            &command,
        ]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{tool} {option}: {stderr}");
        assert!(
            stderr.contains(&format!("{option} /nonexistent/dir/out"))
                && stderr.contains("was not run")
                && !stderr.contains("os error"),
            "{tool} {option}: {stderr}"
        );
        assert!(!marker.exists(), "{tool} {option}: the command ran");
    }
    // A run refused after the check (an event that does not exist, a
    // command that cannot start) leaves the file that was there as it was:
    // a typo costs no earlier result.
    let kept = dir.path().join("kept");
    let unknown_event: &[&str] = &["-e", "nosuch", "sh", "-c", &command];
    let no_command: &[&str] = &["/nonexistent/command"];
    for (tool, option, rest) in [
        ("pfmstat", "-o", unknown_event),
        ("pfmprof", "-o", unknown_event),
        ("pfmprof", "--output", unknown_event),
        ("pfmstat", "-o", no_command),
        ("pfmprof", "-o", no_command),
    ] {
        std::fs::write(&kept, "an earlier result\n").unwrap();
        let out = run(common::tool(tool, &daemon)
            .arg(option)
            .arg(&kept)
            .args(rest));
        assert_ne!(out.status.code(), Some(0), "{tool} {option} {rest:?}");
        assert_eq!(
            std::fs::read_to_string(&kept).unwrap(),
            "an earlier result\n",
            "{tool} {option} {rest:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!marker.exists(), "{tool} {option}: the command ran");
    }
}

/// pfmprof's check of its output files opens nothing and leaves nothing:
/// no file where none was, a FIFO's reader gets the report (it saw an end
/// of file, and pfmprof then waited forever), a link to a file not there
/// yet is followed as by the write; and a report never replaces the profile
/// it comes from.
#[test]
fn pfmprof_output_checks_open_nothing_and_keep_the_profile() {
    if !can_run() {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("fresh");
    let out = run(common::pfmprof(&daemon)
        .arg("-o")
        .arg(&fresh)
        .args(["-e", "nosuch", "true"]));
    assert_ne!(out.status.code(), Some(0));
    assert!(!fresh.exists(), "a refused run left {}", fresh.display());
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let out = run(Command::new("timeout")
        .arg("60")
        .arg(common::bin("pfmprof"))
        .env("PFM_DEVICE", &daemon.device)
        .arg("--output")
        .arg(&fifo)
        .arg("true"));
    assert!(out.status.success(), "{}", text(&out));
    assert!(reader.join().unwrap().contains("interrupts "));
    let link = dir.path().join("link");
    let target = dir.path().join("target");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = run(common::pfmprof(&daemon)
        .arg("--output")
        .arg(&link)
        .arg("true"));
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        std::fs::read_to_string(&target)
            .unwrap()
            .contains("interrupts ")
    );
    // A report written over its own profile would lose the profile.
    let profile = dir.path().join("p.prof");
    for args in [
        vec!["-o", "P", "--output", "P", "true"],
        vec!["--report", "P", "--output", "P"],
    ] {
        std::fs::write(&profile, "kept\n").unwrap();
        let args: Vec<std::ffi::OsString> = args
            .iter()
            .map(|a| match *a {
                "P" => profile.clone().into_os_string(),
                a => a.into(),
            })
            .collect();
        let out = run(common::pfmprof(&daemon).args(&args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains("name the same file"), "{}", text(&out));
        assert_eq!(std::fs::read_to_string(&profile).unwrap(), "kept\n");
    }
}

#[test]
fn notifies_systemd_when_ready_stopping_and_on_the_watchdog() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // A watchdog of 0.2 s: pings every 0.1 s.
    let mut daemon = Daemon::start_env(
        &[],
        &[
            ("NOTIFY_SOCKET", socket_path.as_os_str()),
            ("WATCHDOG_USEC", std::ffi::OsStr::new("200000")),
        ],
    );
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("READY=1 on $NOTIFY_SOCKET");
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines[0], "READY=1", "{message}");
    assert!(
        lines[1].starts_with("STATUS=serving ") && lines[1].contains("model ev4"),
        "{message}"
    );
    assert!(
        std::fs::metadata(&daemon.device).is_ok(),
        "the device exists once ready"
    );
    let mut next = || {
        let n = socket.recv(&mut buf).expect("a message on $NOTIFY_SOCKET");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(
        next(),
        "WATCHDOG=1\n",
        "the watchdog the environment asked for"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
    let stopping = std::iter::repeat_with(next)
        .find(|m| m != "WATCHDOG=1\n")
        .unwrap();
    assert_eq!(stopping, "STOPPING=1\nSTATUS=stopping\n");
}

#[test]
fn refuses_what_it_cannot_do() {
    let pfmd = common::bin("pfmd");
    let out = run(Command::new(&pfmd).args(["--model", "ev9"]));
    assert!(!out.status.success());
    let out = run(Command::new(pfmd).args(["--mode", "999"]));
    assert!(!out.status.success());
}

#[test]
fn pfmstat_and_pfmprof_print_their_version() {
    for tool in ["pfmstat", "pfmprof"] {
        let out = run(Command::new(common::bin(tool)).arg("--version"));
        assert!(out.status.success(), "{tool}: {}", text(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{tool} {}\n", env!("CARGO_PKG_VERSION")),
            "{tool}"
        );
    }
}

/// A bad command line: exit status 2 in both tools, a short message that
/// says what is wrong and where to read more, not the whole usage text.
#[test]
fn usage_errors_exit_2_with_a_short_message() {
    let cases: [(&str, &[&str], &str); 6] = [
        ("pfmstat", &["-q", "true"], "'-q'"),
        ("pfmstat", &["-x,", "true"], "--field-separator"),
        ("pfmstat", &["-p", "1", "true"], "--pid PID"),
        ("pfmstat", &["--repeat", "0", "true"], "--repeat"),
        ("pfmprof", &["-bogus", "prog"], "unknown option -bogus"),
        ("pfmprof", &[], "no program"),
    ];
    for (tool, args, says) in cases {
        let out = run(Command::new(common::bin(tool)).args(args));
        assert_eq!(
            out.status.code(),
            Some(2),
            "{tool} {args:?}: {}",
            text(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{tool} {args:?}: {stderr}");
        assert!(stderr.contains("--help"), "{tool} {args:?}: {stderr}");
        assert!(
            stderr.lines().count() <= 10,
            "{tool} {args:?}: the whole usage text:\n{stderr}"
        );
        assert!(out.stdout.is_empty(), "{tool} {args:?}");
    }
    for tool in ["pfmstat", "pfmprof"] {
        let out = run(Command::new(common::bin(tool)).arg("--help"));
        assert!(out.status.success(), "{tool}: {}", text(&out));
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            assert!(line.chars().count() <= 100, "{tool}: {line}");
        }
    }
}

/// Listing without a daemon points at the listing that needs none.
#[test]
fn listings_without_a_daemon_point_at_model() {
    for (option, what) in [("-l", "events"), ("-t", "cost table")] {
        let out = run(Command::new(common::bin("pfmstat"))
            .env("PFM_DEVICE", "/nonexistent/pfcntr")
            .arg(option));
        assert_eq!(out.status.code(), Some(125), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&format!(
                "without a daemon, pfmstat {option} --model MODEL prints a model's {what}"
            )),
            "{}",
            text(&out)
        );
    }
}
