#!/usr/bin/env python3
"""Packs one built `sluice` binary into what users install, in dist/ with SHA256SUMS:

- `sluice-VERSION-TARGET.tar.gz`: the binary, the README and the licences;
- `sluice_proxy-VERSION-py3-none-PLATFORM.whl`: a wheel that carries just the executable (the
  layout maturin's `bindings = "bin"` makes), so `uv tool install sluice-proxy`, `pipx install
  sluice-proxy` and `uvx --from sluice-proxy sluice` give the `sluice` command;
- `npm/sluice-proxy-VERSION.tgz` (the launcher, with one optional dependency per platform) and
  `npm/sluice-proxy-PLATFORM-VERSION.tgz` (this platform's binary), so `npx sluice-proxy` runs
  it with no download at install time.

Usage: pack.py BINARY TARGET DIST. One table below says, per Rust target, the wheel's platform
tag and the npm package; proxy/pyproject.toml and the launcher's package.json list the same
targets (a test checks they agree).
"""

import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

NAME = "sluice-proxy"  # on PyPI and npm: `sluice` is another project's on PyPI and crates.io
ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

# Rust target -> (wheel platform tag, npm platform package, npm os, cpu, libc).
# `{glibc}` is filled from the binary itself: the newest glibc symbol version it needs.
TARGETS = {
    "x86_64-unknown-linux-gnu": ("manylinux_{glibc}_x86_64", "linux-x64-gnu", "linux", "x64", "glibc"),
    "aarch64-unknown-linux-gnu": ("manylinux_{glibc}_aarch64", "linux-arm64-gnu", "linux", "arm64", "glibc"),
    "x86_64-unknown-linux-musl": ("musllinux_1_2_x86_64", "linux-x64-musl", "linux", "x64", "musl"),
    "aarch64-unknown-linux-musl": ("musllinux_1_2_aarch64", "linux-arm64-musl", "linux", "arm64", "musl"),
    "x86_64-apple-darwin": ("macosx_10_12_x86_64", "darwin-x64", "darwin", "x64", None),
    "aarch64-apple-darwin": ("macosx_11_0_arm64", "darwin-arm64", "darwin", "arm64", None),
    "x86_64-pc-windows-msvc": ("win_amd64", "win32-x64", "win32", "x64", None),
}


def version() -> str:
    text = (ROOT / "Cargo.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def glibc_needed(binary: Path) -> tuple[int, int]:
    """The newest glibc the binary needs: its symbols' versions (`objdump -T`) and its version
    references (`objdump -p`, which also names needs without a symbol), never below 2.17, the
    oldest a manylinux tag names."""
    out = "".join(subprocess.run(["objdump", flag, str(binary)], capture_output=True, text=True,
                                 check=True).stdout for flag in ("-T", "-p"))
    versions = {tuple(int(p) for p in v.split(".")[:2]) for v in re.findall(r"\bGLIBC_(\d+\.\d+(?:\.\d+)?)\b", out)}
    return max(versions | {(2, 17)})


def sha256_b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def zip_entry(archive: zipfile.ZipFile, name: str, data: bytes, mode: int) -> None:
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def wheel(binary: Path, target: str, dist: Path, ver: str) -> Path:
    tag_template, *_ = TARGETS[target]
    if "{glibc}" in tag_template:
        major, minor = glibc_needed(binary)
        platform = tag_template.format(glibc=f"{major}_{minor}")
    else:
        platform = tag_template
    dist_name = NAME.replace("-", "_")
    tag = f"py3-none-{platform}"
    exe = "sluice.exe" if "windows" in target else "sluice"
    readme = (ROOT / "README.md").read_text()
    metadata = "\n".join([
        "Metadata-Version: 2.1",
        f"Name: {NAME}",
        f"Version: {ver}",
        "Summary: A sidecar proxy that cuts what LLM coding agents pay for context, without losing anything they need",
        "License: MIT OR Apache-2.0",
        "Requires-Python: >=3.8",
        "Classifier: Programming Language :: Rust",
        "Classifier: Environment :: Console",
        "Description-Content-Type: text/markdown",
        "",
        readme,
    ])
    wheel_info = f"Wheel-Version: 1.0\nGenerator: sluice pack.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    files = [
        (f"{dist_name}-{ver}.data/scripts/{exe}", binary.read_bytes(), 0o755),
        (f"{dist_name}-{ver}.dist-info/METADATA", metadata.encode(), 0o644),
        (f"{dist_name}-{ver}.dist-info/WHEEL", wheel_info.encode(), 0o644),
        (f"{dist_name}-{ver}.dist-info/licenses/LICENSE-MIT", (ROOT / "LICENSE-MIT").read_bytes(), 0o644),
        (f"{dist_name}-{ver}.dist-info/licenses/LICENSE-APACHE", (ROOT / "LICENSE-APACHE").read_bytes(), 0o644),
    ]
    record_name = f"{dist_name}-{ver}.dist-info/RECORD"
    record = "".join(f"{n},sha256={sha256_b64(d)},{len(d)}\n" for n, d, _ in files) + f"{record_name},,\n"
    path = dist / f"{dist_name}-{ver}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data, mode in files:
            zip_entry(archive, name, data, mode)
        zip_entry(archive, record_name, record.encode(), 0o644)
    return path


def npm(binary: Path, target: str, dist: Path, ver: str) -> list[Path]:
    _, key, os_name, cpu, libc = TARGETS[target]
    out = dist / "npm"
    out.mkdir(parents=True, exist_ok=True)
    stage = dist / "npm-stage"
    shutil.rmtree(stage, ignore_errors=True)
    # The launcher: its package.json names every platform package at this version.
    launcher = stage / NAME
    shutil.copytree(HERE / "npm" / NAME, launcher)
    manifest = json.loads((launcher / "package.json").read_text())
    manifest["version"] = ver
    manifest["optionalDependencies"] = {f"@{NAME}/{t[1]}": ver for t in TARGETS.values()}
    (launcher / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for licence in ("LICENSE-MIT", "LICENSE-APACHE"):
        shutil.copy(ROOT / licence, launcher / licence)
    # This platform's package: the binary, and the os/cpu/libc npm installs it on.
    platform = stage / key
    (platform / "bin").mkdir(parents=True)
    exe = "sluice.exe" if os_name == "win32" else "sluice"
    shutil.copy(binary, platform / "bin" / exe)
    os.chmod(platform / "bin" / exe, 0o755)
    for licence in ("LICENSE-MIT", "LICENSE-APACHE"):
        shutil.copy(ROOT / licence, platform / licence)
    package = {
        "name": f"@{NAME}/{key}",
        "version": ver,
        "description": f"The sluice binary for {target} (installed by the sluice-proxy package)",
        "license": "MIT OR Apache-2.0",
        "os": [os_name],
        "cpu": [cpu],
        "files": [f"bin/{exe}", "LICENSE-MIT", "LICENSE-APACHE"],
        "preferUnplugged": True,
    }
    if libc:
        package["libc"] = [libc]
    if libc == "glibc":
        # npm's `libc` cannot say which glibc: the launcher reads this and says so plainly on an
        # older system, rather than the loader's "GLIBC_2.xx not found".
        major, minor = glibc_needed(binary)
        package["sluice"] = {"glibc": f"{major}.{minor}"}
    (platform / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    made = []
    for folder in (launcher, platform):
        name = subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(out)], cwd=folder,
                              capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        made.append(out / name)
    shutil.rmtree(stage)
    return made


def archive(binary: Path, target: str, dist: Path, ver: str) -> Path:
    path = dist / f"sluice-{ver}-{target}.tar.gz"
    exe = "sluice.exe" if "windows" in target else "sluice"
    with tarfile.open(path, "w:gz") as tar:
        for source, name in [(binary, exe), (ROOT / "README.md", "README.md"),
                             (ROOT / "LICENSE-MIT", "LICENSE-MIT"), (ROOT / "LICENSE-APACHE", "LICENSE-APACHE")]:
            tar.add(source, arcname=f"sluice-{ver}-{target}/{name}")
    return path


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, target, dist = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    if target not in TARGETS:
        sys.exit(f"no package for target {target}: known targets are {', '.join(TARGETS)}")
    ver = version()
    dist.mkdir(parents=True, exist_ok=True)
    made = [archive(binary, target, dist, ver), wheel(binary, target, dist, ver), *npm(binary, target, dist, ver)]
    sums = "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(dist)}\n" for p in made)
    (dist / "SHA256SUMS").write_text(sums)
    for p in made:
        print(f"{p.relative_to(dist)}  {p.stat().st_size / (1 << 20):.1f} MiB")


if __name__ == "__main__":
    main()
