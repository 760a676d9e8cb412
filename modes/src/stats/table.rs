//! One table per concept: every scalar `/stats` field and `/metrics` series is one [`Field`]
//! row (its JSON key, its Prometheus name and labels, type, unit and help), and both documents
//! are rendered from the rows. A counter is therefore named, typed and explained once; a test
//! checks every row against `docs/stats.md`.
//!
//! Rows are generic over the source they read ([`Field::value`]), so a host with counters of
//! its own (the proxy's cheap-model spend) renders them with the same two functions.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// How Prometheus should read a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Only ever grows.
    Counter,
    /// A level or an average that can fall.
    Gauge,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        }
    }
}

/// A field's value: whole counts stay integers in JSON.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Num {
    Count(u64),
    Real(f64),
}

impl From<Num> for Value {
    fn from(n: Num) -> Value {
        match n {
            Num::Count(c) => Value::from(c),
            Num::Real(r) => Value::from(r),
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Count(c) => write!(f, "{c}"),
            Num::Real(r) => write!(f, "{r}"),
        }
    }
}

/// One scalar of `/stats`, `/metrics` or both.
pub struct Field<S> {
    /// The `/stats` key (the reference's names, only ever added to), if it has one.
    pub json: Option<&'static str>,
    /// The `/metrics` series name, if it has one.
    pub metric: Option<&'static str>,
    /// Fixed labels of the series, rendered (`direction="input"`), or empty. Rows sharing a
    /// series name differ here, and the series' help and type come from its first row.
    pub labels: &'static str,
    pub kind: MetricType,
    /// Unit, for the docs (`tokens`, `requests`, `ms`, `%`, `USD`, ...).
    pub unit: &'static str,
    pub help: &'static str,
    pub value: fn(&S) -> Num,
}

impl<S> std::fmt::Debug for Field<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Field")
            .field("json", &self.json)
            .field("metric", &self.metric)
            .field("labels", &self.labels)
            .finish_non_exhaustive()
    }
}

/// Writes every row that has a `/stats` key into `object`.
pub fn write_json<S>(fields: &[Field<S>], source: &S, object: &mut Map<String, Value>) {
    for field in fields {
        if let Some(key) = field.json {
            object.insert(key.to_owned(), (field.value)(source).into());
        }
    }
}

/// Writes every row that has a `/metrics` series, `# HELP` and `# TYPE` once per series.
pub fn write_prometheus<S>(fields: &[Field<S>], source: &S, out: &mut String) {
    let mut previous: Option<&str> = None;
    for field in fields {
        let Some(name) = field.metric else { continue };
        if previous != Some(name) {
            let _ = writeln!(out, "# HELP {name} {}", field.help);
            let _ = writeln!(out, "# TYPE {name} {}", field.kind.as_str());
        }
        previous = Some(name);
        let value = (field.value)(source);
        if field.labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{}}} {value}", field.labels);
        }
    }
}

/// The table as a Markdown table, for `docs/stats.md`.
pub fn markdown<S>(fields: &[Field<S>]) -> String {
    let mut out = String::from(
        "| `/stats` key | `/metrics` series | type | unit | meaning |\n|---|---|---|---|---|\n",
    );
    for field in fields {
        let code = |s: Option<&str>| s.map_or_else(|| "—".to_owned(), |s| format!("`{s}`"));
        let metric = match (field.metric, field.labels) {
            (Some(name), "") => format!("`{name}`"),
            (Some(name), labels) => format!("`{name}{{{labels}}}`"),
            (None, _) => "—".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {metric} | {} | {} | {} |",
            code(field.json),
            field.kind.as_str(),
            field.unit,
            field.help
        );
    }
    out
}
