//! The access log: one line per request at `info`, target `sluice::access`.
//!
//! The rewritten routes attach what they learned ([`Access`]) to the response's extensions;
//! [`log`] writes it with the method, the route, the status and the time taken. Nothing in a
//! line identifies a caller: no header, no query string, no body, a route as its template (no
//! stash id, no deployment name, no provider resource id), and the session only as a keyed hash
//! (`modes::loud::log_id`: it cannot be reversed by guessing user ids). With a dashboard the key
//! is the dashboard's, so a line shows a session's dashboard label; without one it is drawn at
//! random per process, and lines do not link across restarts.

use std::time::{Duration, Instant};

use engine::pipeline::RunReport;
use engine::wire::Dialect;
use http::{Method, Response};

/// What a rewritten route knows about its request.
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub dialect: Option<Dialect>,
    /// A keyed hash of the session key.
    pub session: Option<String>,
    pub bytes_in: usize,
    pub bytes_out: usize,
    pub tokens_in: usize,
    pub tokens_out: usize,
    /// Components that acted, comma-separated.
    pub acted: String,
    /// Why the body went as it came, when it did.
    pub untouched: Option<&'static str>,
    /// The expand tool was declared, so the reply may go through the expand loop.
    pub expandable: bool,
    pub added: Duration,
    /// Until the upstream's response head.
    pub upstream: Option<Duration>,
}

impl Access {
    pub fn new(dialect: Dialect, bytes_in: usize) -> Access {
        Access {
            dialect: Some(dialect),
            bytes_in,
            ..Access::default()
        }
    }

    /// The run's facts: tokens, what acted, sluice's own time.
    pub fn turn(&mut self, report: &RunReport, added: Duration) {
        self.tokens_in = report.tokens_before;
        self.tokens_out = report.tokens_after;
        self.acted = report
            .components
            .iter()
            .filter(|c| c.acted)
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(",");
        self.added = added;
    }

    /// The session key, hashed as the dashboard hashes it (`modes::loud::log_id`).
    pub fn session(&mut self, session: &str) {
        self.session = Some(modes::loud::log_id(session));
    }

    /// `response` carrying these facts to [`log`].
    pub fn attach<B>(self, mut response: Response<B>) -> Response<B> {
        response.extensions_mut().insert(self);
        response
    }
}

/// The route a path is logged as: fixed routes as they are, the others as their template.
pub fn route_label(path: &str) -> &str {
    const FIXED: [&str; 12] = [
        "/healthz",
        "/ab",
        "/favicon.ico",
        "/stats",
        "/metrics",
        "/expand",
        "/compact",
        "/v1/compress",
        "/anthropic/v1/messages",
        "/anthropic/v1/messages/count_tokens",
        "/openai/v1/chat/completions",
        "/openai/v1/responses",
    ];
    if let Some(fixed) = FIXED.iter().find(|f| **f == path) {
        return fixed;
    }
    if path.starts_with("/v1/retrieve/") {
        "/v1/retrieve/{hash}"
    } else if path.starts_with("/dashboard/api/requests/") {
        "/dashboard/api/requests/{id}"
    } else if let Some((_, route, ..)) = crate::dashboard::ROUTES.iter().find(|r| r.1 == path) {
        route
    } else if path.starts_with("/openai/deployments/") {
        "/openai/deployments/{name}/..."
    } else if path.starts_with("/anthropic/") {
        "/anthropic/... (passthrough)"
    } else if path.starts_with("/openai/") {
        "/openai/... (passthrough)"
    } else if let Some(label) = crate::google::route_label(path) {
        label
    } else if let Some((_, stream)) = crate::bedrock::invokes(path) {
        if stream {
            "/bedrock/model/{model}/invoke-with-response-stream"
        } else {
            "/bedrock/model/{model}/invoke"
        }
    } else if path.starts_with("/bedrock/") {
        "/bedrock/... (passthrough)"
    } else {
        "(no route)"
    }
}

/// A duration in milliseconds as a log field: to the microsecond, so a line reads `4.5`, not
/// the float noise of `4.499987000000001` (still a number in JSON logs).
pub fn ms(duration: Duration) -> f64 {
    // Rounded to whole microseconds, over 1000: the nearest double to a three-decimal number,
    // which prints as that number.
    let micros = duration.as_nanos().saturating_add(500) / 1000;
    micros as f64 / 1e3
}

/// Writes the access line for a request that started at `started`.
pub fn log<B>(method: &Method, route: &str, response: &Response<B>, started: Instant) {
    let status = response.status().as_u16();
    let ms = ms(started.elapsed());
    let Some(a) = response.extensions().get::<Access>() else {
        tracing::info!(target: "sluice::access", %method, route, status, ms);
        return;
    };
    tracing::info!(
        target: "sluice::access",
        %method,
        route,
        status,
        dialect = a.dialect.map_or("", Dialect::as_str),
        session = a.session.as_deref().unwrap_or(""),
        bytes_in = a.bytes_in,
        bytes_out = a.bytes_out,
        tokens_in = a.tokens_in,
        tokens_out = a.tokens_out,
        tokens_saved = a.tokens_in.saturating_sub(a.tokens_out),
        acted = a.acted.as_str(),
        untouched = a.untouched.unwrap_or(""),
        expandable = a.expandable,
        added_ms = self::ms(a.added),
        upstream_ms = a.upstream.map_or(0.0, self::ms),
        ms,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_logged_to_the_microsecond() {
        assert_eq!(ms(Duration::from_nanos(4_499_987)).to_string(), "4.5");
        assert_eq!(ms(Duration::from_nanos(4_498_700)).to_string(), "4.499");
        assert_eq!(ms(Duration::from_secs(2)).to_string(), "2000");
        assert_eq!(ms(Duration::from_nanos(400)).to_string(), "0");
        assert_eq!(ms(Duration::from_nanos(600)).to_string(), "0.001");
    }
}
