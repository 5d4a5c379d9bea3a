//! The profiled executable, read with the `object` crate: its loadable
//! segments, function symbols (static and dynamic tables, demangled), build
//! id, and source lines through `addr2line`. Never hand-parsed.

use super::ProfError;
use super::maps::Segment;
use super::symbols::{Symbol, SymbolTable};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};
use std::path::{Path, PathBuf};

pub struct ElfImage {
    pub path: PathBuf,
    /// ET_DYN (PIE or shared object): loaded at a bias chosen at exec time.
    pub position_independent: bool,
    pub segments: Vec<Segment>,
    /// Functions at link-time addresses.
    pub functions: SymbolTable,
    /// Executable sections as pseudo-symbols (`[.plt]`), for addresses no
    /// function covers.
    pub sections: SymbolTable,
    pub build_id: Option<String>,
    lines: Option<addr2line::Loader>,
}

impl std::fmt::Debug for ElfImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElfImage")
            .field("path", &self.path)
            .field("segments", &self.segments)
            .field("functions", &self.functions.len())
            .finish_non_exhaustive()
    }
}

/// Demangles C++ and Rust names; others are returned as they are.
pub fn demangle(name: &str) -> String {
    let languages = if name.starts_with("_R") || name.starts_with("_ZN") {
        &[
            addr2line::gimli::DW_LANG_Rust,
            addr2line::gimli::DW_LANG_C_plus_plus,
        ][..]
    } else if name.starts_with("_Z") {
        &[addr2line::gimli::DW_LANG_C_plus_plus][..]
    } else {
        &[][..]
    };
    languages
        .iter()
        .find_map(|&lang| addr2line::demangle(name, lang))
        .unwrap_or_else(|| name.to_string())
}

impl ElfImage {
    pub fn open(path: &Path) -> Result<ElfImage, ProfError> {
        let elf_error = |reason: String| ProfError::Elf {
            path: path.to_path_buf(),
            reason,
        };
        let data = std::fs::read(path).map_err(ProfError::io(path.display().to_string()))?;
        let file = object::File::parse(&*data).map_err(|e| elf_error(e.to_string()))?;
        if file.format() != object::BinaryFormat::Elf {
            return Err(elf_error(format!("{:?}, not ELF", file.format())));
        }
        let position_independent = match file.kind() {
            object::ObjectKind::Executable => false,
            object::ObjectKind::Dynamic => true,
            other => return Err(elf_error(format!("{other:?} object, not an executable"))),
        };
        let segments: Vec<Segment> = file
            .segments()
            .map(|s| {
                let executable = match s.flags() {
                    object::SegmentFlags::Elf { p_flags, .. } => {
                        p_flags.contains(object::elf::PF_X)
                    }
                    _ => false,
                };
                Segment {
                    vaddr: s.address(),
                    memsz: s.size(),
                    offset: s.file_range().0,
                    executable,
                }
            })
            .collect();
        if !segments.iter().any(|s| s.executable) {
            return Err(elf_error("no executable segment".into()));
        }
        let limit = segments
            .iter()
            .map(|s| s.vaddr + s.memsz)
            .max()
            .unwrap_or(0);
        // Static symbols first: they win over dynamic ones at the same address.
        let functions: Vec<Symbol> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                Some(Symbol {
                    start: s.address(),
                    end: s.address() + s.size(),
                    name: demangle(s.name().ok()?),
                })
            })
            .collect();
        let sections: Vec<Symbol> = file
            .sections()
            .filter(|s| s.kind() == SectionKind::Text && s.size() > 0)
            .map(|s| Symbol {
                start: s.address(),
                end: s.address() + s.size(),
                name: format!("[{}]", s.name().unwrap_or("?")),
            })
            .collect();
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect::<String>());
        Ok(ElfImage {
            path: path.to_path_buf(),
            position_independent,
            segments,
            functions: SymbolTable::new(functions, limit),
            sections: SymbolTable::new(sections, limit),
            build_id,
            lines: addr2line::Loader::new(path).ok(),
        })
    }

    /// The function (or section) at a link-time address.
    pub fn symbol(&self, addr: u64) -> Option<&Symbol> {
        self.functions
            .lookup(addr)
            .or_else(|| self.sections.lookup(addr))
    }

    /// `file:line` of a link-time address, where DWARF says.
    pub fn location(&self, addr: u64) -> Option<String> {
        let location = self.lines.as_ref()?.find_location(addr).ok()??;
        let file = location.file?;
        let file = Path::new(file)
            .file_name()
            .map_or(file.into(), |f| f.to_string_lossy());
        Some(match location.line {
            Some(line) => format!("{file}:{line}"),
            None => file.into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_test_binary() {
        // The test executable is an ELF with symbols: its own code is found.
        let exe = std::env::current_exe().unwrap();
        let image = ElfImage::open(&exe).unwrap();
        assert!(image.segments.iter().any(|s| s.executable));
        assert!(image.functions.len() > 100, "{image:?}");
        let here = reads_its_own_test_binary as fn() as usize as u64;
        let maps =
            super::super::maps::parse_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let path = std::fs::canonicalize(&exe).unwrap();
        let bias =
            super::super::maps::load_bias(&image.segments, &maps, path.to_str().unwrap(), 4096)
                .expect("the test binary is mapped");
        let symbol = image
            .symbol(here - bias)
            .expect("a symbol for this function");
        assert!(
            symbol.name.contains("reads_its_own_test_binary"),
            "{}",
            symbol.name
        );
    }

    #[test]
    fn demangles_cpp_and_rust_and_leaves_c_alone() {
        assert_eq!(demangle("_ZN3foo3barE"), "foo::bar");
        assert_eq!(demangle("_Z3bazi"), "baz(int)");
        assert_eq!(demangle("main"), "main");
    }

    #[test]
    fn refuses_non_elf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script");
        std::fs::write(&path, "#!/bin/sh\necho hi\n").unwrap();
        assert!(matches!(ElfImage::open(&path), Err(ProfError::Elf { .. })));
    }
}
