//! `setup`: installs the Debian packages the cross steps need, only those missing.

use std::path::Path;

use xshell::cmd;

use crate::step::{Ctx, Step};
use crate::Result;

/// Install the missing packages (`apt-get update` first), or do nothing.
pub const SETUP: Step = Step {
    name: "setup",
    run: setup,
};

/// Each Debian package and the files that prove it is installed.
const PACKAGES: &[(&str, &[&str])] = &[
    ("qemu-system-arm", &["/usr/bin/qemu-system-aarch64"]),
    ("qemu-user", &["/usr/bin/qemu-aarch64"]),
    (
        "gcc-aarch64-linux-gnu",
        &[
            "/usr/bin/aarch64-linux-gnu-gcc",
            "/usr/bin/aarch64-linux-gnu-ld",
        ],
    ),
    (
        "libc6-dev-arm64-cross",
        &["/usr/aarch64-linux-gnu/lib/libc.so"],
    ),
    ("rustc-web", &["/usr/bin/rustc", "/usr/bin/rustdoc"]),
    ("cargo-web", &["/usr/bin/cargo"]),
    // A symlink to /usr/src/rustc-<version>; it is where `-Zbuild-std` looks
    // (`$(rustc --print sysroot)/lib/rustlib/src/rust/library`, sysroot = /usr).
    (
        "rust-web-src",
        &["/usr/lib/rustlib/src/rust/library/Cargo.lock"],
    ),
];

fn setup(ctx: &Ctx) -> Result {
    let missing = missing(PACKAGES);
    if missing.is_empty() {
        eprintln!("all {} packages present", PACKAGES.len());
        return Ok(());
    }
    eprintln!("missing: {}", missing.join(" "));
    if !Path::new("/usr/bin/apt-get").exists() {
        return Err(format!("no apt-get here: install {} by hand", missing.join(" ")).into());
    }
    // Root runs apt-get directly; anyone else goes through sudo. `env` carries
    // DEBIAN_FRONTEND past sudo's environment reset.
    let root = cmd!(ctx.sh, "id -u").quiet().read()? == "0";
    if !root && !on_path("sudo") {
        return Err(format!(
            "not root and no sudo: as root, run `apt-get update && apt-get install -y \
             --no-install-recommends {}`",
            missing.join(" ")
        )
        .into());
    }
    let (prog, env) = if root {
        ("env", &["DEBIAN_FRONTEND=noninteractive"][..])
    } else {
        ("sudo", &["env", "DEBIAN_FRONTEND=noninteractive"][..])
    };
    // Wait for another apt/dpkg run (e.g. unattended upgrades) instead of failing.
    let wait = ["-o", "DPkg::Lock::Timeout=600"];
    cmd!(ctx.sh, "{prog} {env...} apt-get {wait...} update -q").run()?;
    cmd!(
        ctx.sh,
        "{prog} {env...} apt-get {wait...} install -y -q --no-install-recommends {missing...}"
    )
    .run()?;
    let still = self::missing(PACKAGES);
    if !still.is_empty() {
        return Err(format!("still missing after apt-get install: {}", still.join(" ")).into());
    }
    Ok(())
}

/// Packages with at least one of their files absent.
fn missing(packages: &[(&'static str, &[&str])]) -> Vec<&'static str> {
    packages
        .iter()
        .filter(|(_, files)| !files.iter().all(|f| Path::new(f).exists()))
        .map(|(pkg, _)| *pkg)
        .collect()
}

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(prog).is_file()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn missing_lists_packages_with_an_absent_file() {
        let table: &[(&str, &[&str])] =
            &[("present", &["/"]), ("half", &["/", "/nonexistent/dvm-ci"])];
        assert_eq!(super::missing(table), ["half"]);
    }
}
