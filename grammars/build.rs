//! Builds every grammar with its parse tables out of the binary, gzipped, to be put back at
//! first use (`src/lib.rs` says why).
//!
//! For each grammar of [`GRAMMARS`], from the grammar crate's own `parser.c` and `scanner.c`
//! (found through `cargo metadata`, so the sources are the ones `Cargo.lock` pins):
//! 1. a helper is compiled for the build machine from the unchanged `parser.c` and run; it
//!    writes the four tables (`ts_parse_table`, `ts_small_parse_table`,
//!    `ts_small_parse_table_map`, `ts_parse_actions`) and their lengths, read by `sizeof`, so
//!    no table is parsed here; the bytes are gzipped into `OUT_DIR`;
//! 2. `parser.c` is compiled for the target with those four definitions replaced by
//!    zero-initialized storage of the same type and length (`.bss`: no bytes in the file) and a
//!    function that copies the tables in; every other line is the grammar's own. The language
//!    and scanner functions are renamed (`sluice_*`), so nothing references the grammar crate's
//!    own objects and the linker never takes them (they still define a few other globals of
//!    the same names, such as Swift's operator tables: using a grammar crate's `LANGUAGE` next
//!    to this one would fail to link).
//!
//! Where any step fails (the sources not found, a target of another byte order, a compiler
//! driver that is not Unix-style), nothing is slimmed: `src/lib.rs` then links every grammar
//! whole from its crate, as before, and the build says so in a warning.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each grammar: its crate, the folder of its sources in the crate, and its C name (the
/// language function is `tree_sitter_<name>`). `src/lib.rs` has the same list.
const GRAMMARS: &[(&str, &str, &str)] = &[
    ("tree-sitter-go", "src", "go"),
    ("tree-sitter-python", "src", "python"),
    ("tree-sitter-javascript", "src", "javascript"),
    ("tree-sitter-typescript", "typescript/src", "typescript"),
    ("tree-sitter-typescript", "tsx/src", "tsx"),
    ("tree-sitter-rust", "src", "rust"),
    ("tree-sitter-java", "src", "java"),
    ("tree-sitter-c", "src", "c"),
    ("tree-sitter-cpp", "src", "cpp"),
    ("tree-sitter-ruby", "src", "ruby"),
    ("tree-sitter-php", "php/src", "php"),
    ("tree-sitter-php", "php_only/src", "php_only"),
    ("tree-sitter-c-sharp", "src", "c_sharp"),
    ("tree-sitter-kotlin-ng", "src", "kotlin"),
    ("tree-sitter-swift", "src", "swift"),
    ("tree-sitter-scala", "src", "scala"),
];

/// The four tables, in the order the helper writes them and the loader copies them.
const TABLES: [&str; 4] = [
    "ts_parse_table",
    "ts_small_parse_table",
    "ts_small_parse_table_map",
    "ts_parse_actions",
];

/// The scanner's five functions, renamed with the language function.
const SCANNER: [&str; 5] = ["create", "destroy", "scan", "serialize", "deserialize"];

fn main() {
    println!("cargo::rustc-check-cfg=cfg(slim_grammars)");
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // What ships is built with this set (proxy/packaging/release.sh, the Containerfile): a
    // binary 26 MB larger must not pass for the shipped one.
    println!("cargo::rerun-if-env-changed=SLUICE_REQUIRE_SLIM_GRAMMARS");
    let required = std::env::var_os("SLUICE_REQUIRE_SLIM_GRAMMARS").is_some();
    match slim_all(&out) {
        Ok(()) => println!("cargo::rustc-cfg=slim_grammars"),
        Err(why) if required => panic!("SLUICE_REQUIRE_SLIM_GRAMMARS is set, and {why}"),
        Err(why) => println!(
            "cargo::warning=grammars linked whole (their parse tables uncompressed in the \
             binary): {why}"
        ),
    }
}

fn slim_all(out: &Path) -> Result<(), String> {
    // The helper runs here, so the tables are read in this machine's byte order; they hold
    // integers only (no pointers), so any target of the same byte order takes them as they are
    // (a static musl build on a glibc host, for one).
    let target_endian = env("CARGO_CFG_TARGET_ENDIAN")?;
    let host_endian = if cfg!(target_endian = "little") {
        "little"
    } else {
        "big"
    };
    if target_endian != host_endian {
        return Err(format!(
            "a {target_endian}-endian target built on a {host_endian}-endian host"
        ));
    }
    if cc::Build::new().get_compiler().is_like_msvc() {
        return Err("the helper is built with a Unix-style compiler driver".into());
    }
    let sources = crate_dirs()?;
    // Every grammar is prepared before any is compiled, so a failure in preparing links
    // nothing of ours. (One while compiling would leave earlier grammars' libraries linked
    // beside the whole ones, harmless: nothing references them.)
    let mut builds = Vec::new();
    for &(krate, folder, name) in GRAMMARS {
        let dir = sources
            .iter()
            .find(|(n, _)| n == krate)
            .map(|(_, d)| d.join(folder))
            .ok_or_else(|| format!("{krate} is not in `cargo metadata`"))?;
        // One library per grammar, each with its own headers: grammars of ABI 14 and 15 declare
        // different `TSLanguage`s in their `tree_sitter/parser.h`.
        let mut build = cc::Build::new();
        build.std("c11").warnings(false).include(&dir);
        slim_one(&dir, name, out, &mut build)?;
        builds.push((name, build));
    }
    for (name, build) in builds {
        build
            .try_compile(&format!("sluice_grammar_{name}"))
            .map_err(|e| format!("{name}: {e}"))?;
    }
    std::fs::write(out.join("slim.rs"), slim_rs()).map_err(|e| e.to_string())?;
    Ok(())
}

/// The Rust side of the slimmed grammars, `include!`d by `src/lib.rs`: the C functions, and
/// `SLIM`, one entry per grammar in the order of [`GRAMMARS`] (which is `Grammar::ALL`'s).
fn slim_rs() -> String {
    let mut rs = String::from("unsafe extern \"C\" {\n");
    for &(_, _, name) in GRAMMARS {
        rs.push_str(&format!(
            "    fn sluice_tables_size_{name}() -> usize;\n    \
             fn sluice_tables_load_{name}(bytes: *const u8);\n    \
             fn sluice_language_{name}() -> *const ();\n"
        ));
    }
    rs.push_str(&format!(
        "}}\n\nstatic SLIM: [Slim; {}] = [\n",
        GRAMMARS.len()
    ));
    for &(_, _, name) in GRAMMARS {
        rs.push_str(&format!(
            "    Slim {{\n        \
             tables: include_bytes!(concat!(env!(\"OUT_DIR\"), \"/{name}.tables.gz\")),\n        \
             size: sluice_tables_size_{name},\n        \
             load: sluice_tables_load_{name},\n        \
             language: sluice_language_{name},\n        \
             loaded: OnceLock::new(),\n    }},\n"
        ));
    }
    rs.push_str("];\n");
    rs
}

/// Dumps one grammar's tables into `OUT_DIR` and adds its slimmed parser (and scanner) to
/// `build`.
fn slim_one(src: &Path, name: &str, out: &Path, build: &mut cc::Build) -> Result<(), String> {
    let parser = src.join("parser.c");
    let scanner = src.join("scanner.c");
    let has_scanner = scanner.exists();
    println!("cargo::rerun-if-changed={}", parser.display());
    let text =
        std::fs::read_to_string(&parser).map_err(|e| format!("{}: {e}", parser.display()))?;
    let (lengths, tables) = dump(
        src,
        name,
        &parser,
        has_scanner.then_some(scanner.as_path()),
        out,
    )?;
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(out.join(format!("{name}.tables.gz"))).map_err(|e| e.to_string())?,
        flate2::Compression::best(),
    );
    gz.write_all(&tables).map_err(|e| e.to_string())?;
    gz.finish().map_err(|e| e.to_string())?;
    let slim = slimmed(src, &text, name, &lengths)?;
    let slim_path = out.join(format!("{name}.slim.c"));
    std::fs::write(&slim_path, slim).map_err(|e| e.to_string())?;
    build.file(&slim_path);
    if has_scanner {
        // The scanner's own file, its functions renamed the same way; it includes its headers
        // relative to its folder, which stays where it is.
        let wrapper = out.join(format!("{name}.scanner.c"));
        let mut c = renames(name);
        c.push_str(&format!("#include \"{}\"\n", scanner.display()));
        std::fs::write(&wrapper, c).map_err(|e| e.to_string())?;
        build.file(&wrapper);
    }
    Ok(())
}

/// `#define`s that rename the language function and the scanner's: the grammar crate's own
/// objects keep the original names, and nothing references them.
fn renames(name: &str) -> String {
    let mut c = format!("#define tree_sitter_{name} sluice_language_{name}\n");
    for f in SCANNER {
        c.push_str(&format!(
            "#define tree_sitter_{name}_external_scanner_{f} sluice_scanner_{name}_{f}\n"
        ));
    }
    c
}

/// Compiles and runs the helper: the grammar's unchanged `parser.c` with a `main` that prints
/// the four tables' lengths (in elements) on one line, then writes their bytes.
fn dump(
    src: &Path,
    name: &str,
    parser: &Path,
    scanner: Option<&Path>,
    out: &Path,
) -> Result<([usize; 4], Vec<u8>), String> {
    let helper_c = out.join(format!("{name}.dump.c"));
    // The bytes go to a file opened in binary mode (stdout would add a carriage return to
    // each newline byte where stdio has a text mode); the lengths, and the bytes' total to
    // check against, to stdout.
    let mut c = format!(
        "#include \"{}\"\n#include <stdio.h>\nint main(int argc, char **argv) {{\n",
        parser.display()
    );
    c.push_str("  FILE *f;\n  if (argc != 2 || !(f = fopen(argv[1], \"wb\"))) return 1;\n");
    c.push_str("  printf(\"%zu %zu %zu %zu %zu\\n\"");
    for t in TABLES {
        // Elements, or rows for the two-dimensional `ts_parse_table` (its length is the
        // grammar's own macros, so that one is not used).
        c.push_str(&format!(", sizeof {t} / sizeof {t}[0]"));
    }
    c.push_str(", (size_t)0");
    for t in TABLES {
        c.push_str(&format!(" + sizeof {t}"));
    }
    c.push_str(");\n");
    for t in TABLES {
        c.push_str(&format!("  fwrite({t}, 1, sizeof {t}, f);\n"));
    }
    c.push_str("  return fclose(f) != 0;\n}\n");
    std::fs::write(&helper_c, c).map_err(|e| e.to_string())?;
    let helper = out.join(format!("{name}.dump"));
    let compiler = cc::Build::new()
        .target(&env("HOST")?)
        .host(&env("HOST")?)
        .opt_level(0)
        .cargo_metadata(false)
        .get_compiler();
    let mut cmd = compiler.to_command();
    cmd.arg("-w").arg("-I").arg(src).arg(&helper_c);
    if let Some(scanner) = scanner {
        cmd.arg(scanner);
    }
    cmd.arg("-o").arg(&helper);
    let status = cmd
        .status()
        .map_err(|e| format!("the helper for {name}: {e}"))?;
    if !status.success() {
        return Err(format!("the helper for {name} did not compile ({status})"));
    }
    let tables_path = out.join(format!("{name}.tables"));
    let run = Command::new(&helper)
        .arg(&tables_path)
        .output()
        .map_err(|e| format!("the helper for {name}: {e}"))?;
    if !run.status.success() {
        return Err(format!("the helper for {name} failed ({})", run.status));
    }
    let head = String::from_utf8_lossy(&run.stdout);
    let numbers: Vec<usize> = head
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{name}: {head}: {e}"))?;
    let [a, b, c, d, total] = numbers[..] else {
        return Err(format!("{name}: the helper wrote {head:?}"));
    };
    let tables = std::fs::read(&tables_path).map_err(|e| format!("{name}: {e}"))?;
    if tables.len() != total {
        return Err(format!(
            "{name}: the helper wrote {} bytes of tables where they are {total}",
            tables.len()
        ));
    }
    Ok(([a, b, c, d], tables))
}

/// `parser.c` with each table's definition replaced by storage of the same type and length,
/// and a loader that copies the tables in (the bytes `dump` wrote, in the same order).
fn slimmed(src: &Path, text: &str, name: &str, lengths: &[usize; 4]) -> Result<String, String> {
    let mut out = renames(name);
    out.push_str("#include <string.h>\n");
    // The file is compiled from OUT_DIR: its own header by path, not beside it.
    let header = src.join("tree_sitter").join("parser.h");
    let text = text.replace(
        "#include \"tree_sitter/parser.h\"",
        &format!("#include \"{}\"", header.display()),
    );
    let mut rest = text.as_str();
    for (table, len) in TABLES.iter().zip(lengths) {
        // `static const TYPE NAME[...] = {` at the start of a line; the definition ends at the
        // next line that is `};`. The generator writes both exactly so.
        let opening = format!(" {table}[");
        let start = rest
            .match_indices(&opening)
            .map(|(at, _)| rest[..at].rfind('\n').map_or(0, |nl| nl + 1))
            .find(|&line| rest[line..].starts_with("static const "))
            .ok_or_else(|| format!("{name}: no definition of {table}"))?;
        let line_end = start + rest[start..].find('\n').ok_or("a truncated parser.c")?;
        let head = &rest[start..line_end];
        let ty = head["static const ".len()..]
            .split(' ')
            .next()
            .ok_or("a table without a type")?;
        let end = line_end
            + rest[line_end..]
                .find("\n};\n")
                .ok_or("an unterminated table")?
            + 4;
        out.push_str(&rest[..start]);
        if *table == "ts_parse_table" {
            out.push_str(&format!(
                "static {ty} {table}[LARGE_STATE_COUNT][SYMBOL_COUNT];\n"
            ));
        } else {
            out.push_str(&format!("static {ty} {table}[{len}];\n"));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.push_str(&format!(
        "\nsize_t sluice_tables_size_{name}(void) {{\n  return 0"
    ));
    for t in TABLES {
        out.push_str(&format!(" + sizeof {t}"));
    }
    out.push_str(&format!(
        ";\n}}\n\nvoid sluice_tables_load_{name}(const unsigned char *bytes) {{\n"
    ));
    for t in TABLES {
        out.push_str(&format!(
            "  memcpy({t}, bytes, sizeof {t});\n  bytes += sizeof {t};\n"
        ));
    }
    out.push_str("}\n");
    Ok(out)
}

/// Each grammar crate's folder: in cargo's registry cache at the version `Cargo.lock` pins
/// (where cargo has just unpacked it to build it), else as `cargo metadata` reports it (a
/// vendored or patched source). `cargo metadata` alone is not enough: offline, it fails where
/// a build fetched only what it needed (every package of the workspace, dev-dependencies and
/// other platforms' crates included, must be at hand), and online it could block on the cache
/// lock the build holds.
fn crate_dirs() -> Result<Vec<(String, PathBuf)>, String> {
    let mut names: Vec<&str> = GRAMMARS.iter().map(|(krate, _, _)| *krate).collect();
    names.dedup();
    let from_registry: Option<Vec<(String, PathBuf)>> = names
        .iter()
        .map(|name| Some((name.to_string(), registry_dir(name)?)))
        .collect();
    match from_registry {
        Some(dirs) => Ok(dirs),
        None => from_metadata(),
    }
}

/// `name`'s folder in the registry cache, at the one version `Cargo.lock` pins.
fn registry_dir(name: &str) -> Option<PathBuf> {
    let lock = Path::new(&std::env::var_os("CARGO_MANIFEST_DIR")?)
        .ancestors()
        .map(|dir| dir.join("Cargo.lock"))
        .find(|lock| lock.is_file())?;
    println!("cargo::rerun-if-changed={}", lock.display());
    let text = std::fs::read_to_string(&lock).ok()?;
    let mut versions = text.split("[[package]]").filter_map(|block| {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)?
                    .strip_prefix(" = \"")?
                    .strip_suffix('"')
            })
        };
        (field("name")? == name && field("source")?.starts_with("registry+"))
            .then(|| field("version"))
            .flatten()
    });
    let version = versions.next()?;
    if versions.next().is_some() {
        return None;
    }
    println!("cargo::rerun-if-env-changed=CARGO_HOME");
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"))?;
            Some(PathBuf::from(home).join(".cargo"))
        })?;
    std::fs::read_dir(home.join("registry").join("src"))
        .ok()?
        .filter_map(|index| Some(index.ok()?.path().join(format!("{name}-{version}"))))
        .find(|dir| dir.join("Cargo.toml").is_file())
}

/// Each package's name and folder, from `cargo metadata` on this workspace with its lock.
fn from_metadata() -> Result<Vec<(String, PathBuf)>, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR")?).join("Cargo.toml");
    let run = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &env("TARGET")?, "--manifest-path"])
        .arg(&manifest)
        .output()
        .map_err(|e| format!("cargo metadata: {e}"))?;
    if !run.status.success() {
        return Err(format!(
            "the grammars' sources are not in cargo's registry cache, and cargo metadata: {}",
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&run.stdout).map_err(|e| format!("cargo metadata: {e}"))?;
    let packages = meta["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?;
    Ok(packages
        .iter()
        .filter_map(|p| {
            let name = p["name"].as_str()?;
            let manifest = Path::new(p["manifest_path"].as_str()?);
            Some((name.to_owned(), manifest.parent()?.to_path_buf()))
        })
        .collect())
}

fn env(key: &str) -> Result<String, String> {
    std::env::var(key).map_err(|_| format!("{key} is not set"))
}
