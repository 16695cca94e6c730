//! A tool's JSON Schema as Gemini's `parameters` take it: Gemini reads an OpenAPI subset and
//! refuses a request with any other keyword, so the schema is written through a filter (never
//! copied into a second JSON tree: the shared schema is serialized as it is read).
//!
//! Kept: `type`, `format` (only `date-time`, `enum`, `int32`, `int64`, `float`, `double`),
//! `title`, `description`, `nullable`, `enum`, `properties`, `required`, `items`, `anyOf`,
//! `minItems`, `maxItems`, `minProperties`, `maxProperties`, `minLength`, `maxLength`, `pattern`,
//! `minimum`, `maximum`, `default`, `example`, `propertyOrdering`. Converted: a `type` list
//! (`["string", "null"]`) is its first non-null type with `nullable: true`; `const` is a one-value
//! `enum`; `oneOf` is `anyOf`. Dropped: everything else (`$schema`, `$ref`, `$defs`,
//! `additionalProperties`, `allOf`, `not`, `exclusiveMinimum`, other formats, ...).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Value;

/// A schema (or any value inside one) written through Gemini's filter.
pub struct Schema<'a>(pub &'a Value);

/// Keywords whose value is written as it is.
const PLAIN: &[&str] = &[
    "title",
    "description",
    "nullable",
    "enum",
    "required",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "default",
    "example",
    "propertyOrdering",
];

const FORMATS: &[&str] = &["date-time", "enum", "int32", "int64", "float", "double"];

/// Whether a schema has nothing for Gemini to read as parameters (an object with no
/// properties): such a function is declared without `parameters`.
pub fn is_empty(schema: &Value) -> bool {
    match schema {
        Value::Object(o) => o
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.is_empty()),
        _ => true,
    }
}

impl Serialize for Schema<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let Value::Object(o) = self.0 else {
            return self.0.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        let (ty, nullable) = match o.get("type") {
            Some(Value::Array(types)) => (
                types
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|t| *t != "null"),
                types.iter().any(|t| t == "null"),
            ),
            Some(Value::String(t)) if t != "null" => (Some(t.as_str()), false),
            Some(Value::String(_)) => (None, true),
            _ => (None, false),
        };
        if let Some(t) = ty {
            map.serialize_entry("type", t)?;
        }
        if nullable && !o.contains_key("nullable") {
            map.serialize_entry("nullable", &true)?;
        }
        for (k, v) in o {
            match k.as_str() {
                "properties" => {
                    if let Value::Object(props) = v {
                        map.serialize_entry(k, &Properties(props))?;
                    }
                }
                "items" => map.serialize_entry(k, &Schema(v))?,
                "anyOf" => map.serialize_entry(k, &List(v))?,
                "oneOf" if !o.contains_key("anyOf") => map.serialize_entry("anyOf", &List(v))?,
                "const" if !o.contains_key("enum") => map.serialize_entry("enum", &[v])?,
                "format" if v.as_str().is_some_and(|f| FORMATS.contains(&f)) => {
                    map.serialize_entry(k, v)?
                }
                k if PLAIN.contains(&k) => map.serialize_entry(k, v)?,
                _ => {}
            }
        }
        map.end()
    }
}

struct Properties<'a>(&'a serde_json::Map<String, Value>);

impl Serialize for Properties<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            map.serialize_entry(k, &Schema(v))?;
        }
        map.end()
    }
}

struct List<'a>(&'a Value);

impl Serialize for List<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let items = self.0.as_array().map(Vec::as_slice).unwrap_or_default();
        let mut seq = s.serialize_seq(Some(items.len()))?;
        for v in items {
            seq.serialize_element(&Schema(v))?;
        }
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_gemini_refuses_is_dropped_or_converted() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "city": {"type": "string", "description": "City.", "format": "hostname"},
                "when": {"type": ["string", "null"], "format": "date-time"},
                "unit": {"const": "c"},
                "tags": {"type": "array", "items": {"type": "string", "minLength": 1, "$ref": "#/x"}},
                "either": {"oneOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "boolean"}]}
            },
            "required": ["city"],
            "$defs": {"x": {}}
        });
        assert_eq!(
            serde_json::to_value(Schema(&schema)).unwrap(),
            json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City."},
                    "when": {"type": "string", "nullable": true, "format": "date-time"},
                    "unit": {"enum": ["c"]},
                    "tags": {"type": "array", "items": {"type": "string", "minLength": 1}},
                    "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}
                },
                "required": ["city"]
            })
        );
        assert!(is_empty(&json!({"type": "object", "properties": {}})));
        assert!(is_empty(&json!({"type": "object"})));
        assert!(!is_empty(&schema));
    }
}
