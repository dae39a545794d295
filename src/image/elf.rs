//! What an ELF executable needs at run time: its program interpreter
//! (`PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`) and the shared
//! libraries of its `DT_NEEDED` entries, transitively, found the way the
//! dynamic loader finds them in a Debian-style system (ld.so(8): `DT_RUNPATH`
//! of the object, then the default directories). Read with the `object`
//! crate.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use object::elf::{DT_NEEDED, DT_RUNPATH, PT_INTERP};
use object::read::elf::{Dyn, ElfFile64, FileHeader, ProgramHeader};
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

struct Parsed {
    interpreter: Option<String>,
    needed: Vec<String>,
    runpath: Vec<String>,
}

fn parse(path: &Path, data: &[u8]) -> Result<Parsed, ImageError> {
    let not = |problem: String| ImageError::NotExecutable {
        path: path.to_path_buf(),
        problem,
    };
    let file = ElfFile64::<Endianness>::parse(data)
        .map_err(|e| not(format!("not a 64-bit ELF file: {e}")))?;
    let endian = file.endian();
    let header = file.elf_header();
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
        for d in dynamic {
            let tag = d.d_tag(endian);
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
    }
    Ok(Parsed {
        interpreter,
        needed,
        runpath,
    })
}

/// Joins an absolute path under `root` (tests use a fake root).
fn under(root: &Path, absolute: &str) -> PathBuf {
    root.join(absolute.trim_start_matches('/'))
}

/// The interpreter and every shared library `binary` needs, transitively,
/// sorted by image path. A statically linked binary needs none.
///
/// # Errors
/// [`ImageError::NotExecutable`] for a file that is not 64-bit ELF;
/// [`ImageError::LibraryNotFound`] naming the library and the directories
/// searched; [`ImageError::Io`].
pub fn closure(binary: &Path, root: &Path) -> Result<Vec<Needed>, ImageError> {
    let mut out: BTreeSet<Needed> = BTreeSet::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut queue: Vec<(PathBuf, Parsed)> = Vec::new();
    let data = std::fs::read(binary).map_err(io_error(binary))?;
    let parsed = parse(binary, &data)?;
    if let Some(interp) = &parsed.interpreter {
        let host = under(root, interp);
        let real = std::fs::canonicalize(&host).map_err(io_error(&host))?;
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
            let next = parse(&real, &data)?;
            out.insert(Needed {
                image_path: format!("{}/{lib}", dir.trim_start_matches('/')),
                host_path: real.clone(),
            });
            queue.push((real, next));
        }
    }
    Ok(out.into_iter().collect())
}
