//! `/proc/kallsyms`: the kernel text bounds (`_stext`, `_etext`) the kernel
//! range covers. Addresses read as 0 without privilege (`kptr_restrict`,
//! `perf_event_paranoid`). The kernel's function names come from blazesym
//! ([`crate::symbolize`]).

use super::ProfError;

/// Kernel text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelText {
    pub text: (u64, u64),
}

/// Parses kallsyms text for `[_stext, _etext)`.
pub fn parse(text: &str) -> Result<KernelText, ProfError> {
    let mut stext = None;
    let mut etext = None;
    let mut all_zero = true;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(addr), Some(_kind), Some(name)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr, 16) else {
            continue;
        };
        all_zero &= addr == 0;
        match name {
            "_stext" => stext = Some(addr),
            "_etext" => etext = Some(addr),
            _ => {}
        }
    }
    if all_zero {
        return Err(ProfError::Kallsyms(
            "/proc/kallsyms shows this user no addresses, which pfmprof needs to place and \
             name a kernel profile: run it as root or with CAP_SYSLOG, or set \
             kernel.kptr_restrict=0 and kernel.perf_event_paranoid<=1 (the kernel decides \
             who reads them; pfmd's --allow-group does not)"
                .into(),
        ));
    }
    let (Some(start), Some(end)) = (stext, etext) else {
        return Err(ProfError::Kallsyms(
            "/proc/kallsyms has no _stext/_etext".into(),
        ));
    };
    if start >= end {
        return Err(ProfError::Kallsyms(format!(
            "kernel text [{start:#x}, {end:#x}) is empty"
        )));
    }
    Ok(KernelText { text: (start, end) })
}

/// Reads and parses `/proc/kallsyms`.
pub fn load() -> Result<KernelText, ProfError> {
    let text =
        std::fs::read_to_string("/proc/kallsyms").map_err(ProfError::io("/proc/kallsyms"))?;
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T startup_64
ffffffff81000100 t secondary_startup
ffffffff81001000 T do_syscall_64
ffffffff81002000 D some_data
ffffffff81003000 T _etext
ffffffff81003000 T after_text
ffffffffc0000000 t mod_func\t[ext4]
";

    #[test]
    fn text_bounds() {
        let k = parse(KALLSYMS).unwrap();
        assert_eq!(k.text, (0xffffffff81000000, 0xffffffff81003000));
    }

    #[test]
    fn hidden_addresses_are_an_error() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 T _etext\n";
        assert!(matches!(parse(hidden), Err(ProfError::Kallsyms(m)) if m.contains("root")));
        assert!(parse("ffffffff81000000 T foo\n").is_err());
    }
}
