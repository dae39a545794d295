//! What an ELF executable needs at run time: its program interpreter
//! (`PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`) and the shared
//! libraries of its `DT_NEEDED` entries, transitively, found the way the
//! dynamic loader finds them in a Debian-style system (ld.so(8): `DT_RUNPATH`
//! of the object, then the default directories). Read with the `object`
//! crate: the dynamic table from the section headers, or, in a binary
//! without them (`sstrip`), from the `PT_DYNAMIC` segment as the loader
//! reads it. The binary, its interpreter and every library must be built
//! for x86-64, and the binary must be an executable ([`closure`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use object::elf::ProgramHeader64;
use object::elf::{
    Dyn64, FileType, Machine, DT_NEEDED, DT_NULL, DT_RUNPATH, DT_STRSZ, DT_STRTAB, EM_386,
    EM_AARCH64, EM_ARM, EM_LOONGARCH, EM_PPC64, EM_RISCV, EM_S390, EM_X86_64, ET_CORE, ET_DYN,
    ET_EXEC, ET_REL, PT_INTERP, PT_LOAD,
};
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
use object::read::StringTable;
use object::Endianness;

use super::{io_error, ImageError};

/// Library directories searched after `DT_RUNPATH`, in order: Debian's
/// multiarch directories for x86-64, then the generic ones (ld.so(8),
/// `/etc/ld.so.conf.d/x86_64-linux-gnu.conf`).
pub const DEFAULT_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/lib",
    "/usr/lib",
];

/// One file to put in the image.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Needed {
    /// Its path in the image, relative to `/` (the path the loader asks
    /// for: the interpreter's absolute path, or `<dir>/<soname>`).
    pub image_path: String,
    /// Where it is read from on this machine (symlinks resolved).
    pub host_path: PathBuf,
}

/// The CPU architecture an `e_machine` value names (System V ABI, gABI
/// "ELF Header", `e_machine`; the values of `elf.h`), as Go's `GOARCH` and
/// the OCI image config spell it where it has such a name.
fn machine_name(machine: Machine) -> String {
    match machine {
        EM_X86_64 => "amd64 (x86-64)".into(),
        EM_AARCH64 => "aarch64".into(),
        EM_386 => "i386".into(),
        EM_ARM => "arm".into(),
        EM_PPC64 => "ppc64".into(),
        EM_S390 => "s390x".into(),
        EM_RISCV => "riscv".into(),
        EM_LOONGARCH => "loongarch".into(),
        other => format!("machine {}", other.0),
    }
}

/// What an `e_type` value says the file is (gABI "ELF Header", `e_type`).
fn type_name(e_type: FileType) -> String {
    match e_type {
        ET_REL => "a relocatable object file".into(),
        ET_CORE => "a core dump".into(),
        ET_EXEC => "an executable".into(),
        ET_DYN => "a shared object".into(),
        other => format!("an ELF file of type {}", other.0),
    }
}

/// Refuses a file the image cannot run: one built for another machine than
/// x86-64 (`e_machine` other than `EM_X86_64`, 62: the image is
/// `linux/amd64`, [`super::manifest::ARCHITECTURE`]), and, when it is the
/// program itself (`program`), one whose `e_type` is neither `ET_EXEC` (2)
/// nor `ET_DYN` (3, a position-independent executable): a relocatable
/// object (`ET_REL`) or a core dump cannot be executed. Values from the
/// System V ABI, gABI "ELF Header".
fn check_runnable(
    path: &Path,
    e_machine: Machine,
    e_type: FileType,
    program: bool,
) -> Result<(), ImageError> {
    if e_machine != EM_X86_64 {
        return Err(ImageError::WrongArchitecture {
            path: path.to_path_buf(),
            machine: machine_name(e_machine),
            e_machine: e_machine.0,
        });
    }
    if program && e_type != ET_EXEC && e_type != ET_DYN {
        return Err(ImageError::NotAProgram {
            path: path.to_path_buf(),
            kind: type_name(e_type),
            e_type: e_type.0,
        });
    }
    Ok(())
}

struct Parsed {
    interpreter: Option<String>,
    needed: Vec<String>,
    runpath: Vec<String>,
}

/// Parses `path` (its bytes `data`), checked by [`check_runnable`]
/// (`program`: it is the binary itself, not a library).
fn parse(path: &Path, data: &[u8], program: bool) -> Result<Parsed, ImageError> {
    let not = |problem: String| ImageError::NotExecutable {
        path: path.to_path_buf(),
        problem,
    };
    let file = ElfFile64::<Endianness>::parse(data)
        .map_err(|e| not(format!("not a 64-bit ELF file: {e}")))?;
    let endian = file.endian();
    let header = file.elf_header();
    check_runnable(
        path,
        header.e_machine(endian),
        header.e_type(endian),
        program,
    )?;
    let mut interpreter = None;
    let segments = header
        .program_headers(endian, data)
        .map_err(|e| not(e.to_string()))?;
    for ph in segments {
        if ph.p_type(endian) == PT_INTERP {
            let bytes = ph
                .data(endian, data)
                .map_err(|()| not("bad PT_INTERP".into()))?;
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            interpreter = Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        }
    }
    let mut needed = Vec::new();
    let mut runpath = Vec::new();
    let mut collect =
        |dynamic: &[Dyn64<Endianness>], strings: StringTable<'_>| -> Result<(), ImageError> {
            for d in dynamic {
                let tag = d.d_tag(endian);
                if tag == DT_NULL {
                    break;
                }
                if tag != DT_NEEDED && tag != DT_RUNPATH {
                    continue;
                }
                let s = d.string(endian, strings).map_err(|e| not(e.to_string()))?;
                let s = String::from_utf8_lossy(s).into_owned();
                if tag == DT_NEEDED {
                    needed.push(s);
                } else {
                    runpath.extend(s.split(':').map(str::to_string));
                }
            }
            Ok(())
        };
    let sections = header
        .sections(endian, data)
        .map_err(|e| not(e.to_string()))?;
    if let Some((dynamic, index)) = sections
        .dynamic(endian, data)
        .map_err(|e| not(e.to_string()))?
    {
        let strings = sections
            .strings(endian, data, index)
            .map_err(|e| not(e.to_string()))?;
        collect(dynamic, strings)?;
    } else if let Some((dynamic, strings)) = dynamic_segment(segments, endian, data)
        .map_err(|problem| not(format!("its PT_DYNAMIC segment: {problem}")))?
    {
        // No section headers (stripped with `sstrip`, or never written):
        // the loader reads the dynamic segment, and so does this.
        collect(dynamic, strings)?;
    } else if interpreter.is_some() {
        return Err(not(
            "it names a program interpreter (PT_INTERP) but has no dynamic table (neither a \
             SHT_DYNAMIC section nor a PT_DYNAMIC segment): its libraries cannot be known"
                .into(),
        ));
    }
    Ok(Parsed {
        interpreter,
        needed,
        runpath,
    })
}

/// A dynamic table and the string table its string values index.
type DynamicSegment<'data> = (&'data [Dyn64<Endianness>], StringTable<'data>);

/// The dynamic table of the `PT_DYNAMIC` segment and its string table
/// (`DT_STRTAB`, a virtual address, and `DT_STRSZ` bytes, found in the
/// `PT_LOAD` segment that maps it), as the dynamic loader reads them (gABI
/// "Dynamic Section"); `None` without a `PT_DYNAMIC` segment.
fn dynamic_segment<'data>(
    segments: &'data [ProgramHeader64<Endianness>],
    endian: Endianness,
    data: &'data [u8],
) -> Result<Option<DynamicSegment<'data>>, String> {
    let Some(dynamic) = segments
        .iter()
        .find_map(|ph| ph.dynamic(endian, data).transpose())
        .transpose()
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let value = |tag| {
        dynamic
            .iter()
            .take_while(|d| d.d_tag(endian) != DT_NULL)
            .find(|d| d.d_tag(endian) == tag)
            .map(|d| d.d_val(endian))
    };
    let (Some(address), Some(size)) = (value(DT_STRTAB), value(DT_STRSZ)) else {
        return Err("no DT_STRTAB or DT_STRSZ".into());
    };
    let bytes = segments
        .iter()
        .filter(|ph| ph.p_type(endian) == PT_LOAD)
        .find_map(|ph| ph.data_range(endian, data, address, size).ok().flatten())
        .ok_or_else(|| format!("DT_STRTAB {address:#x} ({size} bytes) is in no PT_LOAD segment"))?;
    Ok(Some((dynamic, StringTable::new(bytes, 0, size))))
}

/// Joins an absolute path under `root` (tests use a fake root).
fn under(root: &Path, absolute: &str) -> PathBuf {
    root.join(absolute.trim_start_matches('/'))
}

/// The interpreter and every shared library `binary` needs, transitively,
/// sorted by image path. A statically linked binary needs none.
///
/// # Errors
/// [`ImageError::NotExecutable`] for a file that is not 64-bit ELF, or
/// names an interpreter but has no dynamic table;
/// [`ImageError::WrongArchitecture`] when the binary, its interpreter or a
/// library is not built for x86-64; [`ImageError::NotAProgram`] when the
/// binary is not an executable (e.g. a relocatable `.o` file);
/// [`ImageError::LibraryNotFound`] naming the library and the directories
/// searched; [`ImageError::Io`].
pub fn closure(binary: &Path, root: &Path) -> Result<Vec<Needed>, ImageError> {
    let mut out: BTreeSet<Needed> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut queue: Vec<(PathBuf, Parsed)> = Vec::new();
    let data = std::fs::read(binary).map_err(io_error(binary))?;
    let parsed = parse(binary, &data, true)?;
    if let Some(interp) = &parsed.interpreter {
        let host = under(root, interp);
        let real = std::fs::canonicalize(&host).map_err(io_error(&host))?;
        let interp_data = std::fs::read(&real).map_err(io_error(&real))?;
        parse(&real, &interp_data, false)?;
        out.insert(Needed {
            image_path: interp.trim_start_matches('/').to_string(),
            host_path: real,
        });
        seen.insert(
            Path::new(interp)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
    }
    queue.push((binary.to_path_buf(), parsed));
    while let Some((from, parsed)) = queue.pop() {
        let dirs: Vec<String> = parsed
            .runpath
            .iter()
            .cloned()
            .chain(DEFAULT_DIRS.iter().map(|d| d.to_string()))
            .collect();
        for lib in &parsed.needed {
            if !seen.insert(lib.clone()) {
                continue;
            }
            let found = dirs
                .iter()
                .map(|d| (d, under(root, &format!("{d}/{lib}"))))
                .find(|(_, p)| p.is_file());
            let Some((dir, host)) = found else {
                return Err(ImageError::LibraryNotFound {
                    binary: from.clone(),
                    library: lib.clone(),
                    searched: dirs.iter().map(PathBuf::from).collect(),
                });
            };
            let real = std::fs::canonicalize(&host).map_err(io_error(&host))?;
            let data = std::fs::read(&real).map_err(io_error(&real))?;
            let next = parse(&real, &data, false)?;
            out.insert(Needed {
                image_path: format!("{}/{lib}", dir.trim_start_matches('/')),
                host_path: real.clone(),
            });
            queue.push((real, next));
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 64-bit little-endian ELF header (gABI "ELF Header") with no
    /// program or section headers: enough for `object` to parse.
    fn header(e_type: FileType, e_machine: Machine) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2; // ELFCLASS64
        h[5] = 1; // ELFDATA2LSB
        h[6] = 1; // EV_CURRENT
        h[16..18].copy_from_slice(&e_type.0.to_le_bytes());
        h[18..20].copy_from_slice(&e_machine.0.to_le_bytes());
        h[20..24].copy_from_slice(&1u32.to_le_bytes());
        h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
        h
    }

    fn closure_of(bytes: &[u8]) -> (tempfile::TempDir, Result<Vec<Needed>, ImageError>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trainer");
        std::fs::write(&path, bytes).unwrap();
        let got = closure(&path, dir.path());
        (dir, got)
    }

    #[test]
    fn an_x86_64_executable_is_accepted() {
        let (_dir, got) = closure_of(&header(ET_EXEC, EM_X86_64));
        assert_eq!(got.unwrap(), vec![]);
        let (_dir, got) = closure_of(&header(ET_DYN, EM_X86_64));
        assert_eq!(got.unwrap(), vec![]);
    }

    #[test]
    fn a_binary_for_another_cpu_is_refused() {
        let (dir, got) = closure_of(&header(ET_EXEC, EM_AARCH64));
        let err = got.unwrap_err();
        assert!(
            matches!(&err, ImageError::WrongArchitecture { e_machine: 183, path, .. }
                if *path == dir.path().join("trainer")),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .ends_with("trainer: built for aarch64 (e_machine 183); the image is linux/amd64"),
            "{err}"
        );
    }

    #[test]
    fn a_relocatable_object_file_is_refused() {
        let (_dir, got) = closure_of(&header(ET_REL, EM_X86_64));
        let err = got.unwrap_err();
        assert!(
            matches!(err, ImageError::NotAProgram { e_type: 1, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .ends_with("trainer: a relocatable object file (e_type 1), not a program"),
            "{err}"
        );
    }

    /// `/bin/true` and its libraries copied under a fake root, libc's
    /// `e_machine` patched to aarch64: the library is refused, by name.
    #[test]
    fn a_library_for_another_cpu_is_refused() {
        let real = closure(Path::new("/bin/true"), Path::new("/")).unwrap();
        let root = tempfile::tempdir().unwrap();
        for n in &real {
            let to = root.path().join(&n.image_path);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&n.host_path, &to).unwrap();
        }
        let binary = root.path().join("true");
        std::fs::copy("/bin/true", &binary).unwrap();
        // Unpatched, the copy resolves.
        assert_eq!(closure(&binary, root.path()).unwrap().len(), real.len());
        let libc = real
            .iter()
            .find(|n| n.image_path.ends_with("/libc.so.6"))
            .expect("/bin/true needs libc.so.6");
        let patched = root.path().join(&libc.image_path);
        let mut bytes = std::fs::read(&patched).unwrap();
        bytes[18..20].copy_from_slice(&EM_AARCH64.0.to_le_bytes());
        std::fs::write(&patched, bytes).unwrap();
        let err = closure(&binary, root.path()).unwrap_err();
        assert!(
            matches!(&err, ImageError::WrongArchitecture { path, e_machine: 183, .. }
                if *path == std::fs::canonicalize(&patched).unwrap()),
            "{err:?}"
        );
    }

    /// `/bin/true` without its section headers (as `sstrip` leaves a
    /// binary): `e_shoff`, `e_shnum` and `e_shstrndx` zeroed.
    fn without_sections(dir: &Path) -> (PathBuf, Vec<u8>) {
        let mut bytes = std::fs::read("/bin/true").unwrap();
        bytes[40..48].fill(0);
        bytes[60..64].fill(0);
        let path = dir.join("true");
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    #[test]
    fn libraries_are_read_from_the_dynamic_segment_without_section_headers() {
        let dir = tempfile::tempdir().unwrap();
        let (stripped, _) = without_sections(dir.path());
        let expected = closure(Path::new("/bin/true"), Path::new("/")).unwrap();
        assert!(
            expected
                .iter()
                .any(|n| n.image_path.ends_with("/libc.so.6")),
            "{expected:?}"
        );
        assert_eq!(closure(&stripped, Path::new("/")).unwrap(), expected);
    }

    #[test]
    fn an_interpreter_without_a_dynamic_table_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut bytes) = without_sections(dir.path());
        // Its PT_DYNAMIC program header made PT_NULL.
        let u = |at: usize, n: usize| {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&bytes[at..at + n]);
            u64::from_le_bytes(b) as usize
        };
        let (phoff, phentsize, phnum) = (u(32, 8), u(54, 2), u(56, 2));
        let dynamic = (0..phnum)
            .map(|i| phoff + i * phentsize)
            .find(|&at| u(at, 4) == object::elf::PT_DYNAMIC.0 as usize)
            .expect("/bin/true has a PT_DYNAMIC segment");
        bytes[dynamic..dynamic + 4].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        let err = closure(&path, Path::new("/")).unwrap_err();
        assert!(
            matches!(&err, ImageError::NotExecutable { problem, .. }
                if problem.contains("program interpreter (PT_INTERP) but has no dynamic table")),
            "{err:?}"
        );
    }
}
