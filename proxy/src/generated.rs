//! Generated blocks in the docs: a table in the code is the one source, and a test renders it
//! between `<!-- generated: NAME -->` and `<!-- end: NAME -->` in a document, failing when the
//! document is stale. `SLUICE_BLESS=1` rewrites the document instead.

use std::path::Path;

/// `doc` with the block `name` replaced by `table`.
///
/// # Panics
/// When `doc` has no such block (a test helper: the document is wrong).
pub(crate) fn splice(doc: &str, name: &str, table: &str) -> String {
    let (open, close) = (
        format!("<!-- generated: {name} -->\n"),
        format!("<!-- end: {name} -->"),
    );
    let start = doc
        .find(&open)
        .expect("the generated block's opening marker")
        + open.len();
    let end = doc
        .find(&close)
        .expect("the generated block's closing marker");
    format!("{}{table}{}", &doc[..start], &doc[end..])
}

/// Checks `docs/<file>` against the blocks `render` produces from it, or rewrites it when
/// `SLUICE_BLESS` is set.
///
/// # Panics
/// When the document is stale (that is the test failing).
pub(crate) fn check_doc(file: &str, test: &str, render: impl Fn(&str) -> String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(file);
    let doc = std::fs::read_to_string(&path).expect("the document exists");
    let want = render(&doc);
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write the document");
    } else {
        assert!(
            doc == want,
            "docs/{file} is stale: run SLUICE_BLESS=1 cargo test --workspace {test}"
        );
    }
}
