//! `docs/configuration.md`'s command-line reference, rendered from the clap definitions: every
//! subcommand, then a table of its flags with their environment variables, defaults and help.
//! The doc comments on `cli.rs`'s argument structs are the one source; the test below fails
//! when the document is stale (`SLUICE_BLESS=1` rewrites it).

use std::fmt::Write;

use clap::Command;

/// One section per visible subcommand (nested ones under their parent's name).
fn markdown(root: &Command) -> String {
    let mut out = String::new();
    for command in root.get_subcommands().filter(|c| !c.is_hide_set()) {
        section(&mut out, root.get_name(), command);
    }
    out
}

fn section(out: &mut String, parent: &str, command: &Command) {
    let name = format!("{parent} {}", command.get_name());
    if command.has_subcommands() {
        for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
            section(out, &name, sub);
        }
        return;
    }
    let about = command
        .get_about()
        .map(ToString::to_string)
        .unwrap_or_default();
    let _ = writeln!(out, "### `{name}`\n\n{}\n", one_line(&about));
    let rows: Vec<String> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && arg.get_id() != "help")
        .map(row)
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "| argument | environment | default | what |\n|---|---|---|---|"
    );
    for row in rows {
        let _ = writeln!(out, "{row}");
    }
    out.push('\n');
}

fn row(arg: &clap::Arg) -> String {
    let name = match arg.get_long() {
        Some(long) => format!("`--{long}`"),
        None => format!("`<{}>`", arg.get_id().as_str().to_uppercase()),
    };
    let env = arg
        .get_env()
        .map(|e| format!("`{}`", e.to_string_lossy()))
        .unwrap_or_default();
    let defaults: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| format!("`{}`", v.to_string_lossy()))
        .collect();
    let help = arg
        .get_long_help()
        .or_else(|| arg.get_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    format!(
        "| {name} | {env} | {} | {} |",
        defaults.join(", "),
        one_line(&help)
    )
}

/// A help text on one table row: lines joined, pipes escaped.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `sluice serve`'s dashboard flags, as `docs/configuration.md`'s rows spell them:
/// `docs/dashboard.md` lists them (`dashboard.rs`'s doc test renders them there).
pub(crate) fn dashboard_flags() -> String {
    let root = crate::cli::command();
    let serve = root
        .find_subcommand("serve")
        .expect("sluice has a serve subcommand");
    let mut out = String::from("| argument | environment | default | what |\n|---|---|---|---|\n");
    for arg in serve.get_arguments().filter(|arg| {
        !arg.is_hide_set()
            && arg
                .get_long()
                .is_some_and(|long| long.contains("dashboard"))
    }) {
        let _ = writeln!(out, "{}", row(arg));
    }
    out
}

#[test]
fn configuration_doc_matches_the_command_line() {
    let reference = markdown(&crate::cli::command());
    crate::generated::check_doc("configuration.md", "configuration_doc", |doc| {
        crate::generated::splice(doc, "cli", &reference)
    });
}

#[test]
fn every_flag_of_serve_is_in_the_reference() {
    let reference = markdown(&crate::cli::command());
    for long in [
        "--listen",
        "--store",
        "--trusted",
        "--sandbox",
        "--dashboard-db",
    ] {
        assert!(reference.contains(&format!("`{long}`")), "{long}");
    }
    assert!(reference.contains("`SLUICE_LISTEN`") && reference.contains("`127.0.0.1:4000`"));
}

/// Every argument says what it is, positional ones included (`config check <FILE>`, `filters
/// apply <NAME>`): the `what` column of `docs/configuration.md`'s table is never empty.
#[test]
fn every_argument_has_help() {
    fn walk(parent: &str, command: &Command, missing: &mut Vec<String>) {
        let name = format!("{parent} {}", command.get_name());
        for arg in command
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        {
            if arg.get_help().is_none() && arg.get_long_help().is_none() {
                missing.push(format!("{name} <{}>", arg.get_id()));
            }
        }
        for sub in command.get_subcommands() {
            walk(&name, sub, missing);
        }
    }
    let mut missing = Vec::new();
    for command in crate::cli::command().get_subcommands() {
        walk("sluice", command, &mut missing);
    }
    assert!(missing.is_empty(), "arguments without help: {missing:?}");
}

/// `serve`'s summary names every route an agent is pointed at, or none (it points to the docs):
/// never a few, which reads as all there is.
#[test]
fn serves_summary_names_every_route_or_none() {
    let cli = crate::cli::command();
    let serve = cli.find_subcommand("serve").expect("serve");
    let about = serve
        .get_about()
        .map(ToString::to_string)
        .unwrap_or_default();
    let long = serve
        .get_long_about()
        .map(ToString::to_string)
        .unwrap_or_default();
    let routes = ["/anthropic", "/openai", "/gemini", "/vertex", "/bedrock"];
    for text in [about, long] {
        let named = routes.iter().filter(|r| text.contains(**r)).count();
        assert!(named == 0 || named == routes.len(), "{text}");
    }
}

/// `docs/components.md`'s table of gates: every gate, what it means, and the components whose
/// factories list it ("any" for the gates every component may record).
fn gates_markdown() -> String {
    use engine::gate;
    let mut out = String::from("| gate | meaning | recorded by |\n|---|---|---|\n");
    for g in gate::ALL {
        let by: Vec<String> = if gate::ANY_COMPONENT.contains(g) {
            vec!["any".to_owned()]
        } else {
            engine::components::ALL
                .iter()
                .filter(|f| f.gates().contains(g))
                .map(|f| format!("`{}`", f.name()))
                .collect()
        };
        out += &format!("| `{}` | {} | {} |\n", g.name, g.doc, by.join(", "));
    }
    out
}

#[test]
fn components_doc_matches_the_tables() {
    crate::generated::check_doc("components.md", "components_doc", |doc| {
        let doc = crate::generated::splice(doc, "defaults", &defaults_markdown());
        crate::generated::splice(&doc, "gates", &gates_markdown())
    });
}

#[test]
fn every_gate_is_recorded_by_some_component() {
    let markdown = gates_markdown();
    for line in markdown.lines().skip(2) {
        assert!(
            !line.ends_with("|  |"),
            "a gate no component records: {line}"
        );
    }
}

/// `docs/components.md`'s table of defaults: each component's config block as it would read
/// with nothing set, in YAML's flow style, from the factory.
fn defaults_markdown() -> String {
    let mut out = String::from("| component | defaults |\n|---|---|\n");
    for factory in engine::components::ALL {
        out += &format!(
            "| `{}` | `{}` |\n",
            factory.name(),
            flow(&factory.defaults())
        );
    }
    out
}

/// A value in YAML's flow style, on one line; a string is quoted only when YAML would misread it.
fn flow(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{k}: {}", flow(v)))
                .collect();
            format!("{{{}}}", entries.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(s)
            if s.is_empty() || s.contains([':', ',', '{', '}', '[', ']', '#', '|']) =>
        {
            format!("{s:?}")
        }
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[test]
fn every_rendered_default_is_a_block_the_component_accepts() {
    // Each row, set as the component's block, is a config it builds from: the table spells
    // keys and values as a user would. (That the values are the real defaults is the derive's
    // doing; tests/it/docs.rs checks the stated ones by behaviour.)
    for factory in engine::components::ALL {
        let defaults = factory.defaults();
        // A derive that failed to serialize would show as null, which reads as "no block".
        assert!(defaults.is_object(), "{}: {defaults}", factory.name());
        let yaml = format!("components:\n  {}: {}\n", factory.name(), flow(&defaults));
        let source = engine::components::ComponentSource::in_document(factory.name(), &yaml);
        factory.build(&source).unwrap_or_else(|e| {
            panic!(
                "{}: the rendered defaults do not build: {e}",
                factory.name()
            )
        });
    }
}
