//! Files written as one: each to a temporary next to its destination (same
//! directory, so the rename is atomic), and renamed into place only once
//! every one is written. The temporaries are [`tempfile::NamedTempFile`]s,
//! removed when dropped: a failure part-way leaves none of them behind.
//! [`crate::npy::write_all`] and the CLI's outputs write through it.

use std::fs::Permissions;
use std::io::Write;
use std::path::{Path, PathBuf};

use tempfile::NamedTempFile;

/// Temporaries written and waiting for [`Staged::commit`].
#[derive(Default)]
pub struct Staged {
    files: Vec<(NamedTempFile, PathBuf)>,
}

/// An error of [`Staged`]: the destination it concerns and the I/O error.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct StageError {
    /// The destination being written or renamed onto.
    pub path: PathBuf,
    /// What went wrong.
    #[source]
    pub source: std::io::Error,
}

impl Staged {
    /// No files yet.
    pub fn new() -> Staged {
        Staged::default()
    }

    /// Writes `bytes` to a new temporary next to `target` and syncs it;
    /// with `keep`'s permissions when given (a file being replaced keeps
    /// its own), else those of a new file (`0o666` less the umask, where
    /// permissions have modes).
    ///
    /// # Errors
    ///
    /// The [`StageError`] naming `target` when the temporary cannot be
    /// created or written; it is removed then (and the others stay staged
    /// until `self` is dropped).
    pub fn stage(
        &mut self,
        target: &Path,
        bytes: &[u8],
        keep: Option<&Permissions>,
    ) -> Result<(), StageError> {
        let fail = |source| StageError {
            path: target.to_path_buf(),
            source,
        };
        let dir = target
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let prefix = format!(
            ".{}.",
            target
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        );
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // (tempfile's default is 0o600, for secrets; these are outputs.)
            builder.permissions(Permissions::from_mode(0o666));
        }
        let mut tmp = builder.tempfile_in(dir).map_err(fail)?;
        let file = tmp.as_file_mut();
        file.write_all(bytes).map_err(fail)?;
        if let Some(p) = keep {
            file.set_permissions(p.clone()).map_err(fail)?;
        }
        file.sync_all().map_err(fail)?;
        self.files.push((tmp, target.to_path_buf()));
        Ok(())
    }

    /// Renames every temporary onto its destination, in the order staged.
    ///
    /// # Errors
    ///
    /// The [`StageError`] of the first rename that fails, naming its
    /// destination; the temporaries not yet renamed are removed (the
    /// destinations renamed before it stay written).
    pub fn commit(self) -> Result<(), StageError> {
        for (tmp, target) in self.files {
            tmp.persist(&target).map_err(|e| StageError {
                path: target,
                source: e.error,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn files_appear_together_or_not_at_all() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a.bin"), d.path().join("b.bin"));
        let mut s = Staged::new();
        s.stage(&a, b"one", None).unwrap();
        s.stage(&b, b"two", None).unwrap();
        // Staged, not yet in place: only the temporaries exist.
        assert!(!a.exists() && !b.exists());
        assert_eq!(names(d.path()).len(), 2);
        s.commit().unwrap();
        assert_eq!(names(d.path()), ["a.bin", "b.bin"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");

        // A destination that cannot be written: an error naming it, and
        // the file staged before it is gone with the staging.
        let c = d.path().join("c.bin");
        let bad = d.path().join("missing").join("d.bin");
        let mut s = Staged::new();
        s.stage(&c, b"three", None).unwrap();
        let e = s.stage(&bad, b"four", None).unwrap_err();
        assert_eq!(e.path, bad);
        assert!(e.to_string().contains("missing/d.bin"), "{e}");
        drop(s);
        assert_eq!(names(d.path()), ["a.bin", "b.bin"]);
    }

    #[cfg(unix)]
    #[test]
    fn kept_permissions_are_applied() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a.bin");
        let mut s = Staged::new();
        s.stage(&a, b"x", Some(&Permissions::from_mode(0o640)))
            .unwrap();
        s.commit().unwrap();
        let mode = std::fs::metadata(&a).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640);
    }
}
