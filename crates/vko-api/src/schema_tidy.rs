//! A schemars transform that makes our doc comments read well in `kubectl explain`.
//!
//! Doc comments are wrapped at 100 columns in the source; schemars keeps those line breaks, which
//! `kubectl explain` would print mid-sentence. This joins wrapped lines into one line per
//! paragraph (blank-line paragraph breaks stay).

use schemars::Schema;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::Value;

/// Applied to `ValkeySpec` and `ValkeyStatus` (and so to everything inlined in them).
pub(crate) fn tidy(schema: &mut Schema) {
    Tidy.transform(schema);
}

/// Applied to the enum types: kube hoists an `Option<Enum>`'s schema into the field's schema, and
/// the enum type's own description would replace the field's doc comment there.
pub(crate) fn drop_description(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        object.remove("description");
    }
}

struct Tidy;

impl Transform for Tidy {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(object) = schema.as_object_mut() else {
            return;
        };
        if let Some(Value::String(description)) = object.get_mut("description") {
            *description = join_wrapped_lines(description);
        }
    }
}

/// Joins lines inside a paragraph with a space; keeps blank-line paragraph breaks.
fn join_wrapped_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|paragraph| !paragraph.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_wrapped_lines_but_keeps_paragraphs() {
        assert_eq!(
            join_wrapped_lines("one\ntwo three\n\nfour\nfive"),
            "one two three\n\nfour five"
        );
        assert_eq!(join_wrapped_lines("single"), "single");
    }
}
