#!/usr/bin/env node
// The `sluice` command from npm: finds the binary of this platform's optional package
// (@sluice-proxy/<os>-<cpu>[-<libc>], which npm installed and nothing was downloaded for) and
// runs it with this process's arguments, standard streams and environment; exits as it does.
"use strict";

const { spawnSync } = require("child_process");
const path = require("path");

function libc() {
  if (process.platform !== "linux") return null;
  // Node reports the glibc it runs on; without one, this is a musl system.
  const header = process.report && process.report.getReport().header;
  return header && header.glibcVersionRuntime ? "gnu" : "musl";
}

function binary() {
  if (process.env.SLUICE_BINARY) return process.env.SLUICE_BINARY;
  const key = [process.platform, process.arch, libc()].filter(Boolean).join("-");
  const exe = process.platform === "win32" ? "sluice.exe" : "sluice";
  const name = `@sluice-proxy/${key}`;
  try {
    return require.resolve(`${name}/bin/${exe}`);
  } catch (_) {
    console.error(
      `sluice: no binary for ${key}: the optional package ${name} is not installed.\n` +
        "Reinstall without --no-optional (or --omit=optional), or see " +
        "docs/install.md for the other ways to install sluice."
    );
    process.exit(1);
  }
}

const result = spawnSync(binary(), process.argv.slice(2), { stdio: "inherit" });
if (result.error) {
  console.error(`sluice: cannot run ${result.error.path || "the binary"}: ${result.error.message}`);
  process.exit(1);
}
if (result.signal) {
  // Die of the same signal, so a caller sees what the binary saw.
  process.kill(process.pid, result.signal);
}
process.exit(result.status === null ? 1 : result.status);
