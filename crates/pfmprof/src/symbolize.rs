//! Names and source lines of sampled addresses, through the `blazesym`
//! crate: ELF symbol tables and DWARF of executables and shared libraries,
//! separate debug files (`.gnu_debuglink` next to the file or under
//! `/usr/lib/debug`, and `/usr/lib/debug/.build-id/xx/yyyy.debug`), and the
//! running kernel's `/proc/kallsyms`.
//!
//! A user range is resolved by *file offset* (run-time address minus the
//! mapping's start plus its file offset, from `/proc/PID/maps`), so it does
//! not matter how the loader placed the object (PIE, shared library,
//! prelinked) nor whether the process still runs.

use super::symbols::Symbol;
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as Blaze};
use blazesym::{MaybeDefault, helper};
use std::path::Path;

/// A sampled address resolved: its function at run-time addresses and,
/// where DWARF says, its source line (`/full/path/file.c:12`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub symbol: Symbol,
    pub location: Option<String>,
}

/// Where a user range's text comes from.
#[derive(Debug, Clone, Copy)]
pub struct Mapped<'a> {
    pub image: &'a Path,
    /// Run-time address of the mapping's first byte.
    pub start: u64,
    /// File offset of that byte.
    pub offset: u64,
}

pub struct Symbolizer {
    blaze: Blaze,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new()
    }
}

impl Symbolizer {
    pub fn new() -> Symbolizer {
        Symbolizer {
            blaze: Blaze::builder()
                .enable_code_info(true)
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
        }
    }

    /// Resolves run-time addresses of a user mapping (one answer each).
    pub fn user(&self, mapped: Mapped<'_>, addrs: &[u64]) -> Vec<Option<Resolved>> {
        let offsets: Vec<u64> = addrs
            .iter()
            .map(|a| a.wrapping_sub(mapped.start).wrapping_add(mapped.offset))
            .collect();
        let source = Source::Elf(Elf::new(mapped.image));
        self.resolve(&source, Input::FileOffset(&offsets), addrs)
    }

    /// Resolves kernel text addresses through `/proc/kallsyms`.
    pub fn kernel(&self, addrs: &[u64]) -> Vec<Option<Resolved>> {
        let kernel = Kernel {
            kallsyms: MaybeDefault::Default,
            // kallsyms holds run-time addresses already; a vmlinux would
            // need the KASLR offset guessed right.
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        };
        self.resolve(&Source::Kernel(kernel), Input::AbsAddr(addrs), addrs)
    }

    fn resolve(
        &self,
        source: &Source<'_>,
        input: Input<&[u64]>,
        addrs: &[u64],
    ) -> Vec<Option<Resolved>> {
        let answers = match self.blaze.symbolize(source, input) {
            Ok(answers) => answers,
            Err(e) => {
                tracing::warn!("symbolizing {source:?}: {e}");
                return vec![None; addrs.len()];
            }
        };
        answers
            .iter()
            .zip(addrs)
            .map(|(answer, &addr)| match answer {
                Symbolized::Sym(sym) => {
                    let start = addr.wrapping_sub(sym.offset as u64);
                    let size = sym.size.unwrap_or(0) as u64;
                    let location = sym.code_info.as_ref().map(|info| {
                        let path = info.to_path();
                        match info.line {
                            Some(line) => format!("{}:{line}", path.display()),
                            None => path.display().to_string(),
                        }
                    });
                    Some(Resolved {
                        symbol: Symbol {
                            start,
                            // Sizeless: ends where the next symbol starts
                            // (SymbolTable::new), or at this address.
                            end: if size == 0 { 0 } else { start + size },
                            name: sym.name.to_string(),
                        },
                        location,
                    })
                }
                Symbolized::Unknown(_) => None,
            })
            .collect()
    }
}

/// The GNU build id of an ELF file, in hex.
pub fn build_id(path: &Path) -> Option<String> {
    let id = helper::read_elf_build_id(path).ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// `file:line` with the file's directory left out (the report's column).
pub fn short_location(location: &str) -> &str {
    location.rsplit('/').next().unwrap_or(location)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps;

    #[inline(never)]
    fn a_function_to_find() -> u64 {
        std::hint::black_box(7)
    }

    #[test]
    fn resolves_its_own_function_by_file_offset() {
        assert_eq!(a_function_to_find(), 7);
        let here = a_function_to_find as fn() -> u64 as usize as u64;
        let text = maps::text_mappings_of(std::process::id() as i32).unwrap();
        let m = text
            .iter()
            .find(|m| (m.start..m.end).contains(&here))
            .expect("this function is mapped");
        let image = Path::new(&m.path);
        let mapped = Mapped {
            image,
            start: m.start,
            offset: m.offset,
        };
        let resolved = Symbolizer::new().user(mapped, &[here + 1]);
        let r = resolved[0].as_ref().expect("a symbol");
        assert!(r.symbol.name.contains("a_function_to_find"), "{r:?}");
        assert_eq!(r.symbol.start, here);
        assert!(
            r.location
                .as_deref()
                .unwrap_or("")
                .contains("symbolize.rs:"),
            "{r:?}"
        );
        assert!(build_id(image).is_some_and(|id| id.len() >= 16));
    }

    #[test]
    fn short_locations_drop_the_directory() {
        assert_eq!(short_location("/src/dir/hot.c:7"), "hot.c:7");
        assert_eq!(short_location("hot.c:7"), "hot.c:7");
    }
}
