//! Names the build for `sluice --version`: the commit it was built from, the Cargo profile and
//! the allocator, so a binary found on a machine (a wheel, an npm package, an image) says what
//! it is.

use std::path::Path;
use std::process::Command;

fn main() {
    // The commit, when built from a git checkout; a source archive has none.
    let commit =
        git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown commit".into());
    // OUT_DIR is TARGET/[TRIPLE/]PROFILE/build/PKG-HASH/out: the profile is three levels up.
    // (`PROFILE` says only "debug" or "release", whatever custom profile inherits from them.)
    let out = std::env::var("OUT_DIR").unwrap_or_default();
    let profile = Path::new(&out)
        .ancestors()
        .nth(3)
        .and_then(|p| p.file_name())
        .map_or_else(|| "unknown".into(), |p| p.to_string_lossy().into_owned());
    let jemalloc = std::env::var_os("CARGO_FEATURE_JEMALLOC").is_some()
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("msvc");
    let allocator = if jemalloc {
        "jemalloc"
    } else {
        "system allocator"
    };
    println!(
        "cargo:rustc-env=SLUICE_BUILD={} ({commit}, {profile} profile, {allocator})",
        std::env::var("CARGO_PKG_VERSION").unwrap_or_default()
    );
    // A new commit renames the build. Git says where HEAD and the branches are (in a worktree
    // or a submodule `.git` is a file, and the branches live in the common directory).
    let head = git(&["rev-parse", "--git-path", "HEAD"]);
    let common = git(&["rev-parse", "--git-common-dir"]);
    let watched = [
        head,
        common.as_ref().map(|c| format!("{c}/refs/heads")),
        common.map(|c| format!("{c}/packed-refs")),
    ];
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}

/// One line git prints, if git runs here and succeeds.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}
