//! What the guest needs to know about ELF files: whether an included program
//! is dynamic (and for which machine), and which modules a kernel module
//! depends on (its `.modinfo`, read here so that no kmod is needed).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile, FileHeader, ProgramHeader};
use object::{Endianness, FileKind, Object, ObjectSection};

/// The dynamic-linking facts of an ELF file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `e_machine` (`object::elf::EM_X86_64`, `EM_AARCH64`, ...).
    pub machine: u16,
    /// The program interpreter (`PT_INTERP`), for dynamic executables.
    pub interpreter: Option<String>,
    /// `DT_NEEDED` shared libraries.
    pub needed: Vec<String>,
}

impl ElfInfo {
    pub fn is_dynamic(&self) -> bool {
        self.interpreter.is_some() || !self.needed.is_empty()
    }
}

/// The facts of `path`, or None when it is not an ELF file.
pub fn probe(path: &Path) -> io::Result<Option<ElfInfo>> {
    let mut magic = [0u8; 4];
    let mut file = File::open(path)?;
    // Most included files are not ELF; look at 4 bytes before reading all.
    if file.read_exact(&mut magic).is_err() || &magic != b"\x7fELF" {
        return Ok(None);
    }
    let data = std::fs::read(path)?;
    Ok(match FileKind::parse(&*data) {
        Ok(FileKind::Elf32) => info::<elf::FileHeader32<Endianness>>(&data),
        Ok(FileKind::Elf64) => info::<elf::FileHeader64<Endianness>>(&data),
        _ => None,
    })
}

fn info<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> Option<ElfInfo> {
    let file = ElfFile::<Elf>::parse(data).ok()?;
    let endian = file.endian();
    let interpreter = file
        .elf_program_headers()
        .iter()
        .find_map(|header| header.interpreter(endian, data).ok().flatten())
        .map(|bytes| String::from_utf8_lossy(bytes).into_owned());
    let mut needed = Vec::new();
    if let Ok(table) = file.elf_section_table().dynamic_table(endian, data) {
        for entry in &table {
            if entry.tag == elf::DT_NEEDED
                && let Ok(name) = table.string(entry)
            {
                needed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Some(ElfInfo {
        machine: file.elf_header().e_machine(endian).0,
        interpreter,
        needed,
    })
}

/// The modules a kernel module depends on (`depends=` of `.modinfo`).
pub fn module_depends(module: &[u8]) -> Result<Vec<String>, object::Error> {
    let file = object::File::parse(module)?;
    let Some(section) = file.section_by_name(".modinfo") else {
        return Ok(Vec::new());
    };
    let data = section.data()?;
    Ok(data
        .split(|&b| b == 0)
        .filter_map(|field| field.strip_prefix(b"depends="))
        .flat_map(|list| list.split(|&b| b == b','))
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_host_program() {
        let info = probe(Path::new("/bin/sh"))
            .unwrap()
            .expect("/bin/sh is ELF");
        assert!(info.is_dynamic());
        assert!(info.needed.iter().any(|n| n.starts_with("libc.so")));
    }

    #[test]
    fn not_elf() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("script");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        assert_eq!(probe(&path).unwrap(), None);
    }
}
