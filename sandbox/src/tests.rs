//! The sandbox's promises: filters run, and every budget trips as its own error.
//!
//! These run in the debug profile, where starlark is about 300 times slower than in release:
//! budgets here are set so each test trips the budget it names, whichever profile runs it.

use std::time::Duration;

use super::*;

fn run(source: &str, input: &str) -> Result<String, SandboxError> {
    Program::compile(source, &Limits::DEFAULT)?.run(input, &Limits::DEFAULT)
}

#[test]
fn a_filter_drops_lines_with_the_helpers() {
    let source = r#"
def filter(text):
    kept = []
    for line in text.split("\n"):
        if re_match(r"PASSED", line):
            continue
        kept.append(re_sub(r"\s+$", "", line))
    return "\n".join(kept)
"#;
    let out = run(source, "test_a PASSED\ntest_b FAILED   \nE  assert 1 == 2").unwrap();
    assert_eq!(out, "test_b FAILED\nE  assert 1 == 2");
    let findall = "def filter(text):\n    return \",\".join(re_findall(r\"id=(\\d+)\", text))\n";
    assert_eq!(run(findall, "id=1 x id=22").unwrap(), "1,22");
    let split = "def filter(text):\n    return \"|\".join(re_split(r\",\\s*\", text))\n";
    assert_eq!(run(split, "a, b,c").unwrap(), "a|b|c");
}

#[test]
fn json_is_filtered_structurally() {
    let source = r#"
def filter(text):
    rows = json.decode(text)
    return json.encode([r for r in rows if r["status"] != "ok"])
"#;
    let out = run(
        source,
        r#"[{"id":1,"status":"ok"},{"id":2,"status":"error"}]"#,
    )
    .unwrap();
    assert_eq!(out, r#"[{"id":2,"status":"error"}]"#);
}

#[test]
fn compile_once_run_many_across_threads() {
    let program = std::sync::Arc::new(
        Program::compile(
            "def filter(text):\n    return text.upper()\n",
            &Limits::DEFAULT,
        )
        .unwrap(),
    );
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let program = program.clone();
            std::thread::spawn(move || program.run(&format!("run {i}"), &Limits::DEFAULT))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap().unwrap(), format!("RUN {i}"));
    }
}

#[test]
fn no_io_no_load_no_filter() {
    assert!(matches!(
        run("load('x.star', 'y')\ndef filter(t):\n    return t\n", ""),
        Err(SandboxError::Syntax(_))
    ));
    assert!(matches!(
        run("def filter(t):\n    return open('/etc/passwd')\n", ""),
        Err(SandboxError::Syntax(_) | SandboxError::Runtime(_))
    ));
    assert_eq!(
        run("def other(t):\n    return t\n", ""),
        Err(SandboxError::NoFilter)
    );
    assert!(matches!(
        run("def filter(t):\n    return 42\n", ""),
        Err(SandboxError::NotAString(_))
    ));
}

#[test]
fn an_infinite_loop_trips_the_step_budget() {
    let limits = Limits {
        max_steps: 100_000,
        ..Limits::DEFAULT
    };
    let source = "def filter(t):\n    n = 0\n    for i in range(2147483647):\n        for j in range(2147483647):\n            n += 1\n    return t\n";
    let program = Program::compile(source, &limits).unwrap();
    assert_eq!(
        program.run("x", &limits),
        Err(SandboxError::StepBudget(100_000))
    );
}

#[test]
fn a_slow_loop_trips_the_deadline() {
    let limits = Limits {
        max_steps: u64::MAX / 2,
        deadline: Duration::from_millis(50),
        ..Limits::DEFAULT
    };
    let source = "def filter(t):\n    n = 0\n    for i in range(2147483647):\n        n += 1\n    return t\n";
    let program = Program::compile(source, &limits).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        program.run("x", &limits),
        Err(SandboxError::Deadline(Duration::from_millis(50)))
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn deep_recursion_trips_the_call_depth() {
    let source = "def down(n):\n    return down(n + 1)\n\ndef filter(t):\n    return down(0)\n";
    assert_eq!(run(source, "x"), Err(SandboxError::CallDepth));
}

#[test]
fn a_huge_allocation_trips_the_heap_cap() {
    let limits = Limits {
        max_heap_bytes: 8 << 20,
        ..Limits::DEFAULT
    };
    // Each step keeps another 4 KiB string alive: the list crosses 8 MiB after about 2,000
    // steps, and the heap check (every thousand ticks or so) catches it soon after.
    let source = "def filter(t):\n    parts = []\n    for i in range(100000000):\n        parts.append(t + str(i))\n    return ''\n";
    let program = Program::compile(source, &limits).unwrap();
    assert_eq!(
        program.run(&"x".repeat(4096), &limits),
        Err(SandboxError::Heap)
    );
}

#[test]
fn oversized_input_is_refused_before_running() {
    let program = Program::compile("def filter(t):\n    return t\n", &Limits::DEFAULT).unwrap();
    let big = "x".repeat((1 << 20) + 1);
    assert_eq!(
        program.run(&big, &Limits::DEFAULT),
        Err(SandboxError::InputTooLarge {
            size: (1 << 20) + 1,
            limit: 1 << 20
        })
    );
}
