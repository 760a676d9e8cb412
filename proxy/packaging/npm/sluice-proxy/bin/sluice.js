#!/usr/bin/env node
// The `sluice` command from npm: finds the binary of this platform's optional package
// (@sluice-proxy/<os>-<cpu>[-<libc>], which npm installed and nothing was downloaded for) and
// runs it with this process's arguments, standard streams and environment; exits as it does.
"use strict";

const { spawn } = require("child_process");
const path = require("path");

function glibcRuntime() {
  if (process.platform !== "linux") return null;
  // Node reports the glibc it runs on; without one, this is a musl system.
  const header = process.report && process.report.getReport().header;
  return (header && header.glibcVersionRuntime) || null;
}

function fail(message) {
  console.error(`sluice: ${message}`);
  process.exit(1);
}

function binary() {
  if (process.env.SLUICE_BINARY) return process.env.SLUICE_BINARY;
  const glibc = glibcRuntime();
  const libc = process.platform === "linux" ? (glibc ? "gnu" : "musl") : null;
  const key = [process.platform, process.arch, libc].filter(Boolean).join("-");
  const exe = process.platform === "win32" ? "sluice.exe" : "sluice";
  const name = `@sluice-proxy/${key}`;
  let manifest;
  try {
    manifest = require.resolve(`${name}/package.json`);
  } catch (_) {
    fail(
      `no binary for ${key}: the optional package ${name} is not installed.\n` +
        "Reinstall without --no-optional (or --omit=optional); docs/install.md has the other ways."
    );
  }
  const needs = (require(manifest).sluice || {}).glibc;
  const older = (a, b) => {
    const [x, y] = [a, b].map((v) => v.split(".").map(Number));
    return x[0] < y[0] || (x[0] === y[0] && x[1] < y[1]);
  };
  if (needs && glibc && older(glibc, needs)) {
    fail(
      `this binary needs glibc ${needs} or newer, and this system has ${glibc}.\n` +
        "Build from source (cargo install --locked --path proxy) or use the container image."
    );
  }
  return path.join(path.dirname(manifest), "bin", exe);
}

const child = spawn(binary(), process.argv.slice(2), { stdio: "inherit" });
// A supervisor's signal to this launcher is the binary's: passed on, and this process waits
// for the binary to exit. A terminal's Ctrl-C reaches both already (one process group), so
// SIGINT is only kept from ending the launcher first.
for (const signal of ["SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
process.on("SIGINT", () => {});
child.on("error", (error) => fail(`cannot run ${error.path || "the binary"}: ${error.message}`));
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so a caller sees what the binary saw.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});
