//! Where a component reads its configuration: a `components.<name>` block of a YAML document,
//! or none (the component's documented defaults). Its home is beside the registry, not in
//! `config`, so components depend on this and `config` depends on components, never the reverse.

use serde::de::DeserializeOwned;

use super::BuildError;
use crate::yaml;

/// Where a component reads its `components.<name>` block from.
#[derive(Debug, Clone, Copy)]
pub struct ComponentSource<'a> {
    name: &'a str,
    /// The YAML document holding a `components:` map with this component's block, if any.
    document: Option<&'a str>,
}

impl<'a> ComponentSource<'a> {
    /// A source reading `name`'s block from `document` (which may have none).
    pub fn in_document(name: &'a str, document: &'a str) -> ComponentSource<'a> {
        ComponentSource {
            name,
            document: Some(document),
        }
    }

    /// A source with no block: the component's documented defaults.
    pub fn defaults(name: &'a str) -> ComponentSource<'a> {
        ComponentSource {
            name,
            document: None,
        }
    }

    /// Decodes the block strictly, or `None` when there is none (or it has no value).
    ///
    /// # Errors
    /// [`BuildError::Decode`]: a plain sentence with line and column.
    pub fn decode<T: DeserializeOwned>(&self) -> Result<Option<T>, BuildError> {
        let Some(document) = self.document else {
            return Ok(None);
        };
        yaml::decode_at::<T>(document, &["components", self.name])
            .map(Option::flatten)
            .map_err(|e| BuildError::Decode(yaml::plain(&e)))
    }
}
