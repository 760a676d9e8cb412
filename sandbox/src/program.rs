//! A compiled filter ([`Program`]) and its budgets ([`Limits`]): starlark under a step budget,
//! a deadline and a heap cap, each tripping as its own [`SandboxError`].

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use starlark::environment::{FrozenModule, Globals, GlobalsBuilder, LibraryExtension, Module};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::list::AllocList;

/// The budgets of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Starlark ticks (one per call or loop iteration). Default 50,000,000.
    pub max_steps: u64,
    /// Wall clock per run. Default 2 s.
    pub deadline: Duration,
    /// Input bytes. Default 1 MiB.
    pub max_input_bytes: usize,
    /// Heap bytes, best effort (checked between steps). Default 256 MiB.
    pub max_heap_bytes: usize,
    /// Nested calls. Default 64: a filter has no business recursing.
    pub max_call_depth: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_steps: 50_000_000,
        deadline: Duration::from_secs(2),
        max_input_bytes: 1 << 20,
        max_heap_bytes: 256 << 20,
        max_call_depth: 64,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// Why a program did not produce an output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum SandboxError {
    #[error("syntax error: {0}")]
    Syntax(String),
    #[error("the program defines no `filter` function")]
    NoFilter,
    #[error("input of {size} bytes is over the {limit}-byte cap")]
    InputTooLarge { size: usize, limit: usize },
    #[error("step budget of {0} exhausted")]
    StepBudget(u64),
    #[error("deadline of {0:?} passed")]
    Deadline(Duration),
    #[error("heap cap exceeded")]
    Heap,
    #[error("call depth cap exceeded")]
    CallDepth,
    #[error("runtime error: {0}")]
    Runtime(String),
    #[error("filter returned {0}, not a string")]
    NotAString(String),
    /// The child process running the program died or could not run (an abort on a failed
    /// allocation, an out-of-memory kill, the wall clock).
    #[error("filter process failed: {0}")]
    Crashed(String),
}

/// A compiled, frozen program.
pub struct Program {
    module: FrozenModule,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").finish_non_exhaustive()
    }
}

fn dialect() -> Dialect {
    Dialect {
        enable_load: false,
        ..Dialect::Standard
    }
}

fn globals() -> &'static Globals {
    static GLOBALS: std::sync::OnceLock<Globals> = std::sync::OnceLock::new();
    GLOBALS.get_or_init(|| {
        GlobalsBuilder::extended_by(&[
            LibraryExtension::Json,
            LibraryExtension::Map,
            LibraryExtension::Filter,
        ])
        .with(regex_helpers)
        .build()
    })
}

impl Program {
    /// Parses and evaluates `source` once (top-level statements run under `limits`) and freezes
    /// it.
    ///
    /// # Errors
    /// [`SandboxError::Syntax`], [`SandboxError::NoFilter`], or a budget tripped at top level.
    pub fn compile(source: &str, limits: &Limits) -> Result<Program, SandboxError> {
        let ast = AstModule::parse("filter.star", source.to_owned(), &dialect())
            .map_err(|e| SandboxError::Syntax(first_line(&e.to_string())))?;
        let module = Module::with_temp_heap(|module| {
            {
                let mut eval = Evaluator::new(&module);
                let started = Instant::now();
                budget(&mut eval, limits, started)?;
                eval.eval_module(ast, globals())
                    .map_err(|e| classify(&e.to_string(), limits, started))?;
            }
            if module.get("filter").is_none() {
                return Err(SandboxError::NoFilter);
            }
            module
                .freeze()
                .map_err(|e| SandboxError::Runtime(first_line(&format!("{e:?}"))))
        })?;
        Ok(Program { module })
    }

    /// Runs `filter(input)` under `limits` and returns its string.
    ///
    /// # Errors
    /// A [`SandboxError`] naming the budget tripped or what went wrong.
    pub fn run(&self, input: &str, limits: &Limits) -> Result<String, SandboxError> {
        if input.len() > limits.max_input_bytes {
            return Err(SandboxError::InputTooLarge {
                size: input.len(),
                limit: limits.max_input_bytes,
            });
        }
        let filter = self
            .module
            .get("filter")
            .map_err(|_| SandboxError::NoFilter)?;
        Module::with_temp_heap(|module| {
            // The frozen value outlives this heap: `filter` owns a reference to its own.
            let function = module.heap().access_owned_frozen_value(&filter);
            let mut eval = Evaluator::new(&module);
            let started = Instant::now();
            budget(&mut eval, limits, started)?;
            let argument = module.heap().alloc(input);
            let output: Value<'_> = eval
                .eval_function(function, &[argument], &[])
                .map_err(|e| classify(&e.to_string(), limits, started))?;
            match output.unpack_str() {
                Some(text) => Ok(text.to_owned()),
                None => Err(SandboxError::NotAString(output.get_type().to_owned())),
            }
        })
    }
}

fn budget(
    eval: &mut Evaluator<'_, '_, '_>,
    limits: &Limits,
    started: Instant,
) -> Result<(), SandboxError> {
    let invalid = |e: anyhow::Error| SandboxError::Runtime(e.to_string());
    eval.set_max_tick_count(limits.max_steps.max(1))
        .map_err(invalid)?;
    eval.set_max_callstack_size(limits.max_call_depth.max(1))
        .map_err(invalid)?;
    eval.set_max_heap_size(limits.max_heap_bytes.max(1))
        .map_err(invalid)?;
    let deadline = started + limits.deadline;
    eval.set_check_cancelled(Box::new(move || Instant::now() >= deadline));
    Ok(())
}

/// Starlark reports budgets as error text; this turns them into typed errors. The phrases are
/// starlark's own messages, matched whole so a program's `fail("...tick...")` stays a runtime
/// error (and gets its repair round).
fn classify(message: &str, limits: &Limits, started: Instant) -> SandboxError {
    if message.contains("Execution duration limit of") {
        SandboxError::StepBudget(limits.max_steps)
    } else if message.contains("Evaluation cancelled") || started.elapsed() >= limits.deadline {
        SandboxError::Deadline(limits.deadline)
    } else if message.contains("Heap memory limit") {
        SandboxError::Heap
    } else if message.contains("call stack overflow") {
        SandboxError::CallDepth
    } else {
        SandboxError::Runtime(first_line(message))
    }
}

fn first_line(message: &str) -> String {
    let line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    line.chars().take(300).collect()
}

/// Compiled patterns of recent calls: filters call a helper per line with the same pattern.
/// Bounded; cleared when full.
fn pattern(source: &str) -> anyhow::Result<regex::Regex> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<String, regex::Regex>>> =
        std::sync::OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(re) = cache.lock().get(source) {
        return Ok(re.clone());
    }
    // A size limit keeps a hostile pattern from compiling into a huge automaton.
    let re = regex::RegexBuilder::new(source)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()?;
    let mut cache = cache.lock();
    if cache.len() >= 256 {
        cache.clear();
    }
    cache.insert(source.to_owned(), re.clone());
    Ok(re)
}

#[starlark_module]
fn regex_helpers(builder: &mut GlobalsBuilder) {
    /// Replaces every match of `pattern` in `text` with `repl` (`$1` refers to a group).
    fn re_sub(pattern_source: &str, repl: &str, text: &str) -> anyhow::Result<String> {
        Ok(pattern(pattern_source)?
            .replace_all(text, repl)
            .into_owned())
    }

    /// Every match of `pattern` in `text` (the first group's text when the pattern has one).
    fn re_findall<'v>(pattern_source: &str, text: &str) -> anyhow::Result<AllocList<Vec<String>>> {
        let re = pattern(pattern_source)?;
        let found = if re.captures_len() > 1 {
            re.captures_iter(text)
                .map(|c| c.get(1).map_or("", |m| m.as_str()).to_owned())
                .collect()
        } else {
            re.find_iter(text).map(|m| m.as_str().to_owned()).collect()
        };
        Ok(AllocList(found))
    }

    /// `text` split around every match of `pattern`.
    fn re_split<'v>(pattern_source: &str, text: &str) -> anyhow::Result<AllocList<Vec<String>>> {
        Ok(AllocList(
            pattern(pattern_source)?
                .split(text)
                .map(str::to_owned)
                .collect(),
        ))
    }

    /// Whether `pattern` matches anywhere in `text`.
    fn re_match(pattern_source: &str, text: &str) -> anyhow::Result<bool> {
        Ok(pattern(pattern_source)?.is_match(text))
    }
}
