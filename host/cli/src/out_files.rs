//! How the `dvm` CLI writes its outputs: all of a command's files as
//! one (checked, written to temporaries, then renamed into place), so a
//! failure leaves none of them behind; devices and FIFOs written in
//! place; directories it made for them removed again on failure.

use std::path::{Path, PathBuf};

use crate::Failure;

/// Writes `bytes` to `path` as [`write_all_atomic`] does.
///
/// # Errors
///
/// As [`write_all_atomic`].
pub(crate) fn write_atomic(
    path: &Path,
    bytes: &[u8],
    inputs: &[&Path],
    announce: impl FnOnce() -> Result<(), Failure>,
) -> Result<(), Failure> {
    write_all_atomic(&[(path, bytes)], inputs, announce)
}

/// How one file of [`write_all_atomic`] reaches its destination.
enum Dest {
    /// A temporary file next to `target`, renamed onto it: `target` is the
    /// path given, or the regular file a symbolic link there points to (so
    /// the link stays a link).
    Rename {
        target: PathBuf,
        /// The permissions of the file replaced, kept.
        keep: Option<std::fs::Permissions>,
    },
    /// Written in place: the destination exists and is not a regular file
    /// (a device such as `/dev/null`, a FIFO), which a rename would replace.
    InPlace,
}

/// Where `path` is written (see [`Dest`]), found before anything is
/// written.
///
/// # Errors
///
/// Exit code 2 when `path` is a directory or a symbolic link to nothing.
fn destination(path: &Path) -> Result<Dest, Failure> {
    let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Err(Failure(
            format!("cannot write {}: it is a directory", path.display()),
            2,
        )),
        Ok(m) if m.is_file() => {
            let target = if is_link {
                std::fs::canonicalize(path)
                    .map_err(|e| Failure(format!("cannot resolve {}: {e}", path.display()), 1))?
            } else {
                path.to_path_buf()
            };
            Ok(Dest::Rename {
                target,
                keep: Some(m.permissions()),
            })
        }
        Ok(_) => Ok(Dest::InPlace),
        Err(_) if is_link => Err(Failure(
            format!(
                "cannot write {}: it is a symbolic link to a missing file",
                path.display()
            ),
            2,
        )),
        // Missing (or unreachable: writing the temporary names the error).
        Err(_) => Ok(Dest::Rename {
            target: path.to_path_buf(),
            keep: None,
        }),
    }
}

/// `path` with its directory resolved (the file itself may not exist
/// yet): two paths to one file compare equal. (For an input, which exists,
/// resolve the whole path first, so that a link to a file keys as it.)
fn file_key(path: &Path) -> PathBuf {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(dir), Some(name)) => dir.join(name),
        _ => path.to_path_buf(),
    }
}

/// Writes several files as one, so a failure leaves none of them behind
/// (nor anything else): every destination is checked first (none may be a
/// directory), then every file is written to a temporary next to its
/// destination, and only when all are written are they renamed into place.
/// A destination that is a symbolic link to a regular file is replaced at
/// the link's target, so the link stays; one that exists but is not a
/// regular file (`/dev/null`, a FIFO) is written in place, after the
/// temporaries, as a rename would replace the device itself.
///
/// `announce` prints what the command reports of its files; it runs once
/// every file is written and before any is renamed into place, so a
/// report that cannot be printed (a full or closed standard output)
/// fails the command with nothing left behind.
///
/// # Errors
///
/// Exit code 2 when a destination is a directory or a dangling symbolic
/// link, two name one file, or one is one of the command's `inputs`
/// (the same file under any name, as a compiler refuses `cc -o x.c x.c`:
/// the input was read whole, but the user's source would be gone);
/// nothing is written then. 1 when a file cannot be written or renamed,
/// naming it. Whatever `announce` returns.
pub(crate) fn write_all_atomic(
    files: &[(&Path, &[u8])],
    inputs: &[&Path],
    announce: impl FnOnce() -> Result<(), Failure>,
) -> Result<(), Failure> {
    let fail = |path: &Path, e: std::io::Error| {
        Failure(format!("cannot write {}: {e}", path.display()), 1)
    };
    let dests = files
        .iter()
        .map(|(path, _)| destination(path))
        .collect::<Result<Vec<_>, _>>()?;
    // Two outputs onto one file: the second would silently win.
    let keys: Vec<PathBuf> = files
        .iter()
        .zip(&dests)
        .map(|((path, _), dest)| match dest {
            Dest::Rename { target, .. } => file_key(target),
            Dest::InPlace => file_key(path),
        })
        .collect();
    for (i, k) in keys.iter().enumerate() {
        if let Some(j) = keys[..i].iter().position(|x| x == k) {
            return Err(Failure(
                format!(
                    "{} and {} are the same file: give each output its own",
                    files[j].0.display(),
                    files[i].0.display()
                ),
                2,
            ));
        }
    }
    for input in inputs {
        let k = file_key(&std::fs::canonicalize(input).unwrap_or_else(|_| input.to_path_buf()));
        if let Some(i) = keys.iter().position(|x| *x == k) {
            return Err(Failure(
                format!(
                    "{} is the input {}: refusing to write over it (choose another output)",
                    files[i].0.display(),
                    input.display()
                ),
                2,
            ));
        }
    }
    let mut staged = dvm_tensor::staged::Staged::new();
    for ((path, bytes), dest) in files.iter().zip(&dests) {
        if let Dest::Rename { target, keep } = dest {
            staged
                .stage(target, bytes, keep.as_ref())
                .map_err(|e| fail(path, e.source))?;
        }
    }
    // (Dropping `staged` on an error removes its temporaries.)
    for ((path, bytes), dest) in files.iter().zip(&dests) {
        if let Dest::InPlace = dest {
            std::fs::write(path, bytes).map_err(|e| fail(path, e))?;
        }
    }
    announce()?;
    staged.commit().map_err(|e| fail(&e.path, e.source))
}

/// A directory made for outputs, and the part of it that did not exist
/// before (removed again by [`MadeDir::undo`] if nothing was written).
pub(crate) struct MadeDir {
    /// The directories created, deepest first.
    created: Vec<PathBuf>,
}

impl MadeDir {
    /// Creates `dir` and any missing parents.
    ///
    /// # Errors
    ///
    /// Exit code 2 when `dir` (or a parent) exists and is not a directory,
    /// or cannot be created.
    pub(crate) fn create(dir: &Path) -> Result<MadeDir, Failure> {
        check_dir(dir)?;
        let created: Vec<PathBuf> = dir
            .ancestors()
            .filter(|a| !a.as_os_str().is_empty())
            .take_while(|a| std::fs::symlink_metadata(a).is_err())
            .map(Path::to_path_buf)
            .collect();
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display()), 2))?;
        Ok(MadeDir { created })
    }

    /// Removes the directories [`MadeDir::create`] made, where empty.
    pub(crate) fn undo(&self) {
        for d in &self.created {
            // Best effort, and only if empty: `remove_dir` refuses otherwise.
            if std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
}

/// Checks that `dir` is a directory or does not exist.
///
/// # Errors
///
/// Exit code 2 naming `dir` when it exists and is not a directory.
pub(crate) fn check_dir(dir: &Path) -> Result<(), Failure> {
    match std::fs::metadata(dir) {
        Ok(m) if !m.is_dir() => Err(Failure(
            format!("{} exists and is not a directory", dir.display()),
            2,
        )),
        _ => Ok(()),
    }
}
