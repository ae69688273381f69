//! A schemars transform that makes our doc comments read well in `kubectl explain`.
//!
//! Doc comments are wrapped at 100 columns in the source; schemars keeps those line breaks, which
//! `kubectl explain` would print mid-sentence. This joins wrapped lines into one line per
//! paragraph (blank-line paragraph breaks stay).

use schemars::Schema;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::{Map, Value, json};

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

/// The longest quantity string accepted in `resources` (`"1.5Gi"` has 5 characters). A bound is
/// needed for CEL's cost estimate, which otherwise assumes strings as long as a whole request.
const MAX_QUANTITY_LENGTH: u64 = 64;

/// The most resource names in one `limits` or `requests` map (cpu, memory, ephemeral-storage,
/// hugepages-<size> and extended resources such as nvidia.com/gpu). Bounds CEL's cost estimate.
const MAX_RESOURCE_NAMES: u64 = 32;

/// Applied to each `resources` field (`ResourceRequirements`): every quantity in `limits` and
/// `requests` must be one the API server's own quantity parser reads, and not negative, so a
/// typo is refused at admission naming the field (`spec.resources.limits[memory]`) instead of
/// when the operator's StatefulSet is refused later. Requests must not exceed limits for the
/// same resource (the Pod validation would refuse that too). The long upstream description of
/// `Quantity` (repeated in every map) gives way to a short one.
pub(crate) fn resource_quantities(schema: &mut Schema) {
    if let Some(object) = schema.as_object_mut() {
        bound_quantities(object);
    }
}

fn bound_quantities(object: &mut Map<String, Value>) {
    let is_quantity = object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if is_quantity {
        object.insert(
            "description".to_owned(),
            json!("A quantity such as 500m, 2, 256Mi or 1Gi."),
        );
        object.insert("maxLength".to_owned(), json!(MAX_QUANTITY_LENGTH));
        object.insert(
            "x-kubernetes-validations".to_owned(),
            json!([{
                "rule": "type(self) == int ? self >= 0 : (isQuantity(self) && !quantity(self).isLessThan(quantity('0')))",
                "message": "must be a non-negative quantity such as 500m, 2, 256Mi or 1Gi"
            }]),
        );
        return;
    }
    let is_quantity_map = object
        .get("additionalProperties")
        .and_then(|values| values.get("x-kubernetes-int-or-string"))
        == Some(&Value::Bool(true));
    if is_quantity_map {
        object.insert("maxProperties".to_owned(), json!(MAX_RESOURCE_NAMES));
    }
    let has_both_maps = object
        .get("properties")
        .is_some_and(|p| p.get("limits").is_some() && p.get("requests").is_some());
    if has_both_maps {
        // `string()` turns an integer quantity (`cpu: 2`) into one `quantity()` reads; a value
        // that is no quantity at all is left to the per-value rule above.
        object.insert(
            "x-kubernetes-validations".to_owned(),
            json!([{
                "rule": "!has(self.limits) || !has(self.requests) || self.requests.all(r, !(r in self.limits) || !isQuantity(string(self.requests[r])) || !isQuantity(string(self.limits[r])) || quantity(string(self.requests[r])).compareTo(quantity(string(self.limits[r]))) <= 0)",
                "message": "requests must not exceed limits for the same resource (a Pod with requests above its limits is refused)",
                "fieldPath": ".requests"
            }]),
        );
    }
    for child in object.values_mut() {
        match child {
            Value::Object(child) => bound_quantities(child),
            Value::Array(items) => items
                .iter_mut()
                .filter_map(Value::as_object_mut)
                .for_each(bound_quantities),
            _ => {}
        }
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
