//! The guest-script convention of the VM tests: a shell function `run NAME
//! CMD...` that brackets CMD's output between markers with its exit status,
//! and the parser that gives each step back by name.

use crate::vm::{Arch, Output, Vm};
use std::collections::HashMap;

/// Shell to put before a guest script: defines `run NAME CMD...` and
/// `wait_ready LOG [NODE]`.
pub const RUN_PRELUDE: &str = r#"
export NO_COLOR=1
# run NAME CMD...: CMD's output between markers, with its exit status.
run() { n=$1; shift; echo "@@begin $n"; "$@" 2>&1; echo "@@end $n rc=$?"; }
# wait_ready LOG [NODE]: until pfmd has logged that it serves and NODE
# (default /dev/pfcntr) exists; up to 120 s, since a loaded host's TCG guest
# can take that long. Past it the log goes to stderr with "@@not-ready", so
# the step that follows fails with the reason next to it.
wait_ready() {
  i=0; node=${2:-/dev/pfcntr}
  while ! { grep -q "pfmd ready" "$1" && [ -e "$node" ]; } && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done
  if [ $i -ge 2400 ]; then echo "@@not-ready $1:" >&2; cat "$1" >&2; fi
}
"#;

/// Runs `command` in `vm` on behalf of the test `test`: where the VM cannot
/// be set up the test is skipped (or fails under CI: [`crate::ci`]); a
/// request the harness refuses, or a guest that fails, panics with the
/// guest's output; a run is recorded ([`crate::ci::vm_test_ran`]).
pub fn run_for_test<S: AsRef<str>>(
    test: &str,
    vm: &Vm,
    command: impl IntoIterator<Item = S>,
) -> Option<Output> {
    let output = match vm.run(command) {
        Ok(output) => output,
        Err(e) if e.is_environment() => {
            crate::ci::skip_or_fail(test, format_args!("the VM could not be set up: {e}"));
            return None;
        }
        Err(e) => panic!("{test}: bad VM request: {e}"),
    };
    assert!(
        output.success(),
        "{test}: the VM run failed with exit {} (124: timeout, 125: the guest died)\nguest output:\n{}",
        output.code(),
        output.stdout
    );
    let bed = match vm.arch() {
        Arch::X86_64 => "x86_64 VM with CUSE",
        Arch::Aarch64 => "aarch64 VM with the armv8_pmuv3 PMU",
    };
    crate::ci::vm_test_ran(
        test,
        format_args!(
            "{bed}, kernel {}, {:.1} s",
            output.kernel_release,
            output.boot_to_exit.as_secs_f64()
        ),
    );
    Some(output)
}

/// One step's exit status and output.
#[derive(Debug, Clone)]
pub struct Step {
    pub rc: i32,
    pub out: String,
}

/// The guest's steps by name, and its whole output for messages.
#[derive(Debug, Clone)]
pub struct Steps {
    pub steps: HashMap<String, Step>,
    pub all: String,
}

impl Steps {
    pub fn parse(stdout: &str) -> Steps {
        let mut steps = HashMap::new();
        let mut current: Option<(String, String)> = None;
        for line in stdout.lines() {
            if let Some(name) = line.strip_prefix("@@begin ") {
                current = Some((name.trim().to_string(), String::new()));
            } else if let Some(rest) = line.strip_prefix("@@end ") {
                let rc = rest
                    .rsplit_once("rc=")
                    .and_then(|(_, rc)| rc.trim().parse().ok())
                    .unwrap_or(-1);
                if let Some((name, out)) = current.take() {
                    steps.insert(name, Step { rc, out });
                }
            } else if let Some((_, out)) = current.as_mut() {
                out.push_str(line);
                out.push('\n');
            }
        }
        Steps {
            steps,
            all: stdout.to_string(),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Step> {
        self.steps.get(name)
    }

    /// The output of a step that must have run and succeeded; panics with
    /// the whole guest output otherwise.
    pub fn ok(&self, name: &str) -> &str {
        let step = self
            .steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name} in the guest output:\n{}", self.all));
        assert_eq!(
            step.rc, 0,
            "step {name} failed:\n{}\n--- all ---\n{}",
            step.out, self.all
        );
        &step.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_come_back_by_name_with_their_status() {
        let steps =
            Steps::parse("boot\n@@begin a\nx\ny\n@@end a rc=0\nnoise\n@@begin b\n@@end b rc=3\n");
        assert_eq!(steps.ok("a"), "x\ny\n");
        assert_eq!(steps.get("b").unwrap().rc, 3);
        assert!(steps.get("c").is_none());
    }
}
