//! The call a path-addressed provider route makes ([`PathCall`]): Gemini's and Vertex's
//! (`google.rs`) and Bedrock's (`bedrock.rs`) name the model, and sometimes whether the reply
//! streams, in the path, where the other dialects put them in the body.

use std::borrow::Cow;

use engine::wire::Dialect;

/// What a rewritten path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathCall<'a> {
    pub dialect: Dialect,
    /// The model named in the path (`gemini-2.5-pro`, `claude-opus-4-1@20250805`), decoded.
    pub model: Cow<'a, str>,
    /// Whether the reply is server-sent events, when the path says so (Gemini); `None` when
    /// the body's `stream` does (Claude on Vertex).
    pub stream: Option<bool>,
}

impl PathCall<'_> {
    /// What the path says, on a turn whose body does not say it: the reply streams when the
    /// path asks it to, and the model is the path's unless the body named one.
    pub(crate) fn route(&self, forward: &mut modes::turn::Forward) {
        if let Some(stream) = self.stream {
            forward.stream = stream;
        }
        forward
            .model
            .get_or_insert_with(|| self.model.clone().into_owned());
    }
}
