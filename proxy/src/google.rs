//! Google's routes: the Gemini API (`/gemini/...`) and Vertex AI (`/vertex/...`), whose paths
//! say what other dialects put in the body (the model, whether the reply streams) or in a
//! header (the key).
//!
//! Rewritten, everything else under both prefixes goes upstream untouched:
//! - `POST /gemini/{version}/models/{model}:generateContent`, and `:streamGenerateContent`
//!   with `alt=sse`: Gemini.
//! - `POST /vertex/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:`
//!   the same two methods: Gemini on Vertex.
//! - `POST /vertex/{version}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:`
//!   `rawPredict` and `:streamRawPredict`: Claude on Vertex, the Messages API without `model`
//!   and with `anthropic_version` (it streams when the body says `"stream": true`, as on
//!   Anthropic's own API). Its `count-tokens:rawPredict` passes through.
//!
//! A `:streamGenerateContent` without `alt=sse` answers with one JSON array streamed piece by
//! piece, which the expand loop does not read, so it passes through like `:countTokens`.

use std::borrow::Cow;

use engine::wire::Dialect;

use crate::path_call::PathCall;
use http::{HeaderMap, HeaderValue, Uri};

/// The header gemini-cli and Google's SDKs send the API key in.
pub const KEY_HEADER: &str = "x-goog-api-key";

/// The call a path makes, when it is one sluice rewrites (see the module's list).
pub fn generates<'a>(path: &'a str, query: Option<&str>) -> Option<PathCall<'a>> {
    if let Some(rest) = path.strip_prefix("/gemini/") {
        let (version, rest) = rest.split_once('/')?;
        return gemini_call(version, rest.strip_prefix("models/")?, query);
    }
    let (version, publisher, target) = vertex_parts(path)?;
    match publisher {
        "google" => gemini_call(version, target, query),
        "anthropic" => {
            let (model, method) = target.rsplit_once(':')?;
            let known = matches!(method, "rawPredict" | "streamRawPredict");
            (known && is_model(model) && model != "count-tokens").then_some(PathCall {
                dialect: Dialect::Anthropic,
                model: Cow::Borrowed(model),
                stream: None,
            })
        }
        _ => None,
    }
}

/// `{model}:{method}` of a Gemini call under `version`.
fn gemini_call<'a>(version: &str, target: &'a str, query: Option<&str>) -> Option<PathCall<'a>> {
    if !is_version(version) {
        return None;
    }
    let (model, method) = target.rsplit_once(':')?;
    if !is_model(model) {
        return None;
    }
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" if sse_asked(query) => true,
        _ => return None,
    };
    Some(PathCall {
        dialect: Dialect::Gemini,
        model: Cow::Borrowed(model),
        stream: Some(stream),
    })
}

/// `(version, publisher, "{model}:{method}")` of a Vertex AI publisher-model path whose
/// location is one.
fn vertex_parts(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/vertex/")?;
    let mut segments = rest.splitn(8, '/');
    let version = segments.next()?;
    let (projects, _project, locations, location) = (
        segments.next()?,
        segments.next()?,
        segments.next()?,
        segments.next()?,
    );
    let (publishers, publisher, models_and_target) =
        (segments.next()?, segments.next()?, segments.next()?);
    let target = models_and_target.strip_prefix("models/")?;
    let shaped = projects == "projects" && locations == "locations" && publishers == "publishers";
    (shaped && is_version(version) && is_location(location)).then_some((version, publisher, target))
}

fn is_version(version: &str) -> bool {
    version.starts_with('v') && (2..=10).contains(&version.len())
}

fn is_model(model: &str) -> bool {
    !model.is_empty() && !model.contains('/')
}

/// A Vertex location as Google names them (`us-east5`, `europe-west1`, `global`): it becomes
/// part of a host name, so nothing else is one.
fn is_location(location: &str) -> bool {
    (1..=40).contains(&location.len())
        && location
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !location.starts_with('-')
        && !location.ends_with('-')
}

/// The upstream for a path under `/vertex/`: `configured` when the operator set one, else the
/// region's own endpoint that the path names (`https://us-east5-aiplatform.googleapis.com`,
/// `https://aiplatform.googleapis.com` for `global`), as Google's clients pick it. `None` for a
/// path that names no valid location.
pub fn vertex_upstream<'a>(configured: Option<&'a str>, path: &str) -> Option<Cow<'a, str>> {
    if let Some(base) = configured {
        return Some(Cow::Borrowed(base));
    }
    let rest = path.strip_prefix("/vertex/")?;
    // `{version}/projects/{p}/locations/{l}/...`
    let segments: Vec<&str> = rest.splitn(6, '/').collect();
    let location = match segments[..] {
        [_, "projects", _, "locations", location, ..] if is_location(location) => location,
        _ => return None,
    };
    Some(Cow::Owned(if location == "global" {
        "https://aiplatform.googleapis.com".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com")
    }))
}

/// Whether the query asks for server-sent events (`alt=sse`).
fn sse_asked(query: Option<&str>) -> bool {
    query.is_some_and(|q| q.split('&').any(|pair| pair == "alt=sse"))
}

/// The headers the turn reads: the request's own, plus the `?key=` credential as
/// [`KEY_HEADER`] when the key came in the query, so it scopes the session's stashes like a
/// key in a header. Only the turn sees the copy; upstream gets the request as it came.
pub fn turn_headers(headers: &HeaderMap, uri: &Uri) -> Option<HeaderMap> {
    if headers.contains_key(KEY_HEADER) {
        return None;
    }
    let key = uri
        .query()?
        .split('&')
        .find_map(|pair| pair.strip_prefix("key="))?;
    let value = HeaderValue::from_str(key).ok()?;
    let mut copy = headers.clone();
    copy.insert(KEY_HEADER, value);
    Some(copy)
}

/// The access log's label for a Google path: the call, never the project, location or model.
pub fn route_label(path: &str) -> Option<&'static str> {
    let vertex = path.starts_with("/vertex/");
    if !vertex && !path.starts_with("/gemini/") {
        return None;
    }
    let call = generates(path, Some("alt=sse"));
    Some(match (vertex, call.map(|c| (c.dialect, c.stream))) {
        (false, Some((_, Some(false)))) => "/gemini/{version}/models/{model}:generateContent",
        (false, Some(_)) => "/gemini/{version}/models/{model}:streamGenerateContent",
        (false, None) => "/gemini/... (passthrough)",
        (true, Some((Dialect::Anthropic, _))) => {
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict"
        }
        (true, Some((_, Some(false)))) => {
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent"
        }
        (true, Some(_)) => {
            "/vertex/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent"
        }
        (true, None) => "/vertex/... (passthrough)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(path: &str, query: Option<&str>) -> Option<(Dialect, String, Option<bool>)> {
        generates(path, query).map(|g| (g.dialect, g.model.into_owned(), g.stream))
    }

    #[test]
    fn only_generate_calls_are_rewritten() {
        let path = "/gemini/v1beta/models/gemini-2.5-pro:generateContent";
        assert_eq!(
            call(path, None),
            Some((Dialect::Gemini, "gemini-2.5-pro".into(), Some(false)))
        );
        let stream = "/gemini/v1beta/models/gemini-2.5-flash:streamGenerateContent";
        assert_eq!(call(stream, Some("alt=sse")).and_then(|c| c.2), Some(true));
        assert_eq!(
            call(stream, Some("key=k&alt=sse")).and_then(|c| c.2),
            Some(true)
        );
        // A JSON-array stream, token counting and listing models pass through.
        assert_eq!(call(stream, None), None);
        assert_eq!(call(stream, Some("alt=json")), None);
        for other in [
            "/gemini/v1beta/models/gemini-2.5-pro:countTokens",
            "/gemini/v1beta/models",
            "/gemini/v1beta/models/:generateContent",
            "/gemini/v1beta/tunedModels/x:generateContent",
            "/openai/v1beta/models/m:generateContent",
        ] {
            assert_eq!(call(other, Some("alt=sse")), None, "{other}");
        }
    }

    #[test]
    fn vertex_paths_name_the_publishers_dialect() {
        let base = "/vertex/v1/projects/my-project/locations/us-east5/publishers";
        assert_eq!(
            call(
                &format!("{base}/anthropic/models/claude-opus-4-1@20250805:streamRawPredict"),
                None
            ),
            Some((Dialect::Anthropic, "claude-opus-4-1@20250805".into(), None))
        );
        assert_eq!(
            call(
                &format!("{base}/anthropic/models/claude-sonnet-4-5:rawPredict"),
                None
            )
            .map(|c| c.0),
            Some(Dialect::Anthropic)
        );
        assert_eq!(
            call(
                &format!("{base}/google/models/gemini-2.5-pro:streamGenerateContent"),
                Some("alt=sse")
            ),
            Some((Dialect::Gemini, "gemini-2.5-pro".into(), Some(true)))
        );
        for other in [
            format!("{base}/anthropic/models/count-tokens:rawPredict"),
            format!("{base}/google/models/gemini-2.5-pro:countTokens"),
            format!("{base}/meta/models/llama:rawPredict"),
            "/vertex/v1/projects/p/locations/US_EAST/publishers/google/models/g:generateContent"
                .into(),
            "/vertex/v1/projects/p/regions/us/publishers/google/models/g:generateContent".into(),
        ] {
            assert_eq!(call(&other, Some("alt=sse")), None, "{other}");
        }
    }

    #[test]
    fn the_vertex_upstream_is_the_paths_region_unless_configured() {
        let path =
            "/vertex/v1/projects/p/locations/us-east5/publishers/anthropic/models/m:rawPredict";
        assert_eq!(
            vertex_upstream(None, path).as_deref(),
            Some("https://us-east5-aiplatform.googleapis.com")
        );
        let global = path.replace("us-east5", "global");
        assert_eq!(
            vertex_upstream(None, &global).as_deref(),
            Some("https://aiplatform.googleapis.com")
        );
        assert_eq!(
            vertex_upstream(Some("http://127.0.0.1:9"), path).as_deref(),
            Some("http://127.0.0.1:9")
        );
        // A location is part of a host name: nothing else becomes one.
        for hostile in ["evil.com%2f", "a.b", "x@y", "-a", ""] {
            let path = path.replace("us-east5", hostile);
            assert_eq!(vertex_upstream(None, &path), None, "{hostile}");
        }
    }

    #[test]
    fn a_key_in_the_query_scopes_like_a_key_in_a_header() {
        let uri: Uri = "/gemini/v1beta/models/m:generateContent?alt=sse&key=AIza-secret"
            .parse()
            .unwrap();
        let headers = turn_headers(&HeaderMap::new(), &uri).unwrap();
        assert_eq!(headers[KEY_HEADER], "AIza-secret");
        let mut sent = HeaderMap::new();
        sent.insert(KEY_HEADER, HeaderValue::from_static("header-key"));
        assert_eq!(turn_headers(&sent, &uri), None);
        let bare: Uri = "/gemini/v1beta/models/m:generateContent".parse().unwrap();
        assert_eq!(turn_headers(&HeaderMap::new(), &bare), None);
    }

    #[test]
    fn labels_name_the_call_never_the_project_or_model() {
        let label = route_label(
            "/vertex/v1/projects/secret-project/locations/us-east5/publishers/anthropic/models/claude:streamRawPredict",
        )
        .unwrap();
        assert!(!label.contains("secret-project") && label.ends_with(":rawPredict"));
        assert_eq!(
            route_label("/gemini/v1beta/models/gemini-2.5-pro:countTokens"),
            Some("/gemini/... (passthrough)")
        );
        assert_eq!(route_label("/openai/v1/models"), None);
    }
}
