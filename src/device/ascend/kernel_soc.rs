//! Which SoC a kernel library was built for, read from its ELF section
//! names: CANN's `ascendc_library` puts the kernel binary in a section named
//! `.ascend.kernel.<soc>.<target>` (cannmirror/asc-devkit
//! `cmake/asc/legacy_modules/util/update_host_stub.py`,
//! `get_ascendc_section`), such as `.ascend.kernel.ascend910b2.kernels`.
//! Only used to explain a library that does not run; a file that is not a
//! 64-bit little-endian ELF, or has no such section, gives `None`.

use std::path::Path;

const SECTION_PREFIX: &str = ".ascend.kernel.";

/// The SoC in the first `.ascend.kernel.<soc>.<target>` section of the
/// library at `path` (`ascend910b2`).
pub(crate) fn built_for(path: &Path) -> Option<String> {
    let bytes = std::fs::read(path).ok()?;
    section_names(&bytes)?
        .into_iter()
        .find_map(|name| soc_of(&name).map(str::to_owned))
}

/// `<soc>` of `.ascend.kernel.<soc>.<target>`.
fn soc_of(section: &str) -> Option<&str> {
    let rest = section.strip_prefix(SECTION_PREFIX)?;
    let (soc, target) = rest.split_once('.')?;
    (!soc.is_empty() && !target.is_empty()).then_some(soc)
}

fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_le_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn u32_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?)).ok()
}

fn u64_at(b: &[u8], at: usize) -> Option<usize> {
    usize::try_from(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?)).ok()
}

/// Every section name of a 64-bit little-endian ELF file.
fn section_names(b: &[u8]) -> Option<Vec<String>> {
    // e_ident: magic, ELFCLASS64, ELFDATA2LSB.
    if b.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = u64_at(b, 0x28)?;
    let shentsize = u16_at(b, 0x3a)?;
    let shnum = u16_at(b, 0x3c)?;
    let shstrndx = u16_at(b, 0x3e)?;
    if shentsize < 0x40 || shstrndx >= shnum {
        return None;
    }
    let header = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
    let strtab = header(shstrndx)?;
    let (str_off, str_len) = (u64_at(b, strtab + 0x18)?, u64_at(b, strtab + 0x20)?);
    let names = b.get(str_off..str_off.checked_add(str_len)?)?;
    let mut out = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let at = u32_at(b, header(i)?)?;
        let tail = names.get(at..)?;
        let end = tail.iter().position(|&c| c == 0)?;
        out.push(String::from_utf8_lossy(&tail[..end]).into_owned());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_names_give_the_soc() {
        assert_eq!(
            soc_of(".ascend.kernel.ascend910b2.kernels"),
            Some("ascend910b2")
        );
        assert_eq!(
            soc_of(".ascend.kernel.ascend910_9391.ta"),
            Some("ascend910_9391")
        );
        assert_eq!(soc_of(".ascend.kernel.ascend910b2"), None);
        assert_eq!(soc_of(".text"), None);
    }

    #[test]
    fn non_elf_files_have_no_soc() {
        assert!(section_names(b"not an ELF file at all").is_none());
        assert!(section_names(b"\x7fELF\x02\x01").is_none(), "truncated");
        let dir = std::env::temp_dir().join(format!("ta-soc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("lib.so");
        std::fs::write(&f, b"\x7fELF\x01\x01 32-bit").unwrap();
        assert_eq!(built_for(&f), None);
        assert_eq!(built_for(&dir.join("missing.so")), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(all(
        target_os = "linux",
        target_endian = "little",
        target_pointer_width = "64"
    ))]
    #[test]
    fn a_real_elf_file_lists_its_sections() {
        // This test binary is itself an ELF file with a `.text` section.
        let exe = std::env::current_exe().unwrap();
        let names = section_names(&std::fs::read(exe).unwrap()).unwrap();
        assert!(names.iter().any(|n| n == ".text"), "{names:?}");
    }
}
