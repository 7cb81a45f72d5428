//! The CLI's standard output and error. A write that fails (a full disk,
//! `> /dev/full`, a closed descriptor) is an error of the command, exit
//! code 1, never a panic as in `println!`. (A closed pipe ends the
//! process quietly instead: `main` restores SIGPIPE's default.)

use std::fmt;
use std::io::Write;

use crate::Failure;

/// `print!` that returns a [`Failure`] (exit code 1) when standard output
/// cannot be written.
macro_rules! out {
    ($($t:tt)*) => { $crate::say::stdout(format_args!($($t)*)) };
}

/// `println!` that returns a [`Failure`] (exit code 1) when standard output
/// cannot be written.
macro_rules! outln {
    ($($t:tt)*) => { $crate::say::stdout(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprintln!` that returns a [`Failure`] (exit code 1) when standard error
/// cannot be written.
macro_rules! errln {
    ($($t:tt)*) => { $crate::say::stderr(format_args!("{}\n", format_args!($($t)*))) };
}

pub(crate) use {errln, out, outln};

/// Writes `args` to standard output and flushes it, so that a failed write
/// is reported by the command that made it.
///
/// # Errors
/// Exit code 1, naming the stream and the system's error.
pub(crate) fn stdout(args: fmt::Arguments<'_>) -> Result<(), Failure> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args)
        .and_then(|()| o.flush())
        .map_err(|e| Failure(format!("cannot write to standard output: {e}"), 1))
}

/// Writes `args` to standard error.
///
/// # Errors
/// Exit code 1, naming the stream and the system's error.
pub(crate) fn stderr(args: fmt::Arguments<'_>) -> Result<(), Failure> {
    std::io::stderr()
        .lock()
        .write_fmt(args)
        .map_err(|e| Failure(format!("cannot write to standard error: {e}"), 1))
}

/// Reports a command's failure on standard error, as well as it can: when
/// standard error cannot be written either, the exit code is all that is
/// left to say it.
pub(crate) fn report(msg: &str) {
    let _ = writeln!(std::io::stderr().lock(), "dvm: error: {msg}");
}
