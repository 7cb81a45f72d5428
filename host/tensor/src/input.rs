//! Reading input files (graphs, modules, objects, assembly text) with a
//! size limit, so that a device such as `/dev/zero` or an enormous file is
//! refused instead of read until memory runs out. `.npy` files are read by
//! [`crate::npy`], bounded by their header instead.

use std::io::Read;
use std::path::Path;

/// The most bytes read from one input file (256 MiB): far beyond any
/// graph, module or object dvm writes, and what a device or pipe that
/// never ends is read up to before it is refused.
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// Reads all of `path`, refusing more than `limit` bytes: a regular file
/// by its length, before anything is read; a device or pipe once `limit`
/// bytes have been read from it.
///
/// # Errors
///
/// The error of opening or reading `path`; one of kind
/// [`std::io::ErrorKind::FileTooLarge`] saying so when the file is longer
/// than `limit`.
pub fn read_limited(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let too_large = || {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file is larger than {limit} bytes, the most dvm reads of an input"),
        )
    };
    let f = std::fs::File::open(path)?;
    let meta = f.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    if meta.is_file() {
        // Its length (at most `limit`), checked above.
        bytes.reserve_exact(meta.len() as usize);
    }
    f.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(bytes)
}

/// [`read_limited`] at [`MAX_INPUT_BYTES`], as UTF-8 text.
///
/// # Errors
///
/// As [`read_limited`], and one of kind
/// [`std::io::ErrorKind::InvalidData`] when the file is not UTF-8.
pub fn read_text(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_limited(path, MAX_INPUT_BYTES)?).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_devices_and_pipes_beyond_the_limit_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, [1u8; 100]).unwrap();
        assert_eq!(read_limited(&f, 100).unwrap(), [1u8; 100]);
        let e = read_limited(&f, 99).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert_eq!(
            e.to_string(),
            "the file is larger than 99 bytes, the most dvm reads of an input"
        );
        // A sparse terabyte is refused by its length, not read.
        let big = std::fs::File::create(&f).unwrap();
        big.set_len(1 << 40).unwrap();
        drop(big);
        let e = read_limited(&f, MAX_INPUT_BYTES).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        std::fs::write(&f, b"ok \xff").unwrap();
        assert_eq!(
            read_text(&f).unwrap_err().to_string(),
            "not UTF-8 text (byte 3)"
        );
        drop(d);
        // A device that never ends: read up to the limit, then refused
        // (`std::fs::read` read it until memory ran out).
        #[cfg(target_os = "linux")]
        {
            let e = read_limited(Path::new("/dev/zero"), 1 << 20).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        }
    }
}
