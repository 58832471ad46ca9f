//! JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it, which is what the `tojson`
//! of Hugging Face chat templates gives: `", "` and `": "` between items, or with an indent a
//! newline and that many spaces per level and `","`; keys in their given order unless sorted;
//! non-ASCII text as is. A tool's schema rendered into the prompt must be byte for byte what the
//! model was trained on, and minijinja's own `tojson` is compact and escapes `<`, `>` and `&`.

use serde_json::Value;

/// `value` as `json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`.
pub fn dumps(value: &Value, indent: Option<usize>, sort_keys: bool) -> String {
    let mut out = String::new();
    write(&mut out, value, indent, sort_keys, 0);
    out
}

fn write(out: &mut String, value: &Value, indent: Option<usize>, sort_keys: bool, level: usize) {
    match value {
        Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separate(out, i == 0, indent, level + 1);
                write(out, item, indent, sort_keys, level + 1);
            }
            close(out, indent, level);
            out.push(']');
        }
        Value::Object(map) if !map.is_empty() => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                separate(out, i == 0, indent, level + 1);
                out.push_str(&Value::String(key.clone()).to_string());
                out.push_str(": ");
                write(out, item, indent, sort_keys, level + 1);
            }
            close(out, indent, level);
            out.push('}');
        }
        // Scalars and empty containers: serde_json writes these as Python does.
        other => out.push_str(&other.to_string()),
    }
}

/// What goes before an item: `", "` (or `","` and a new line when indenting).
fn separate(out: &mut String, first: bool, indent: Option<usize>, level: usize) {
    match indent {
        None if !first => out.push_str(", "),
        None => {}
        Some(width) => {
            if !first {
                out.push(',');
            }
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', width * level));
        }
    }
}

fn close(out: &mut String, indent: Option<usize>, level: usize) {
    if let Some(width) = indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', width * level));
    }
}

#[cfg(test)]
mod tests {
    use super::dumps;
    use serde_json::json;

    #[test]
    fn writes_what_python_writes() {
        // Each expectation is Python 3.11's json.dumps(v, ensure_ascii=False[, indent=2]).
        let v = json!({"name": "get_weather", "b": [1, 2.5, true, null], "a": {}, "c": [], "t": "é <&> \"q\"\n"});
        assert_eq!(
            dumps(&v, None, false),
            r#"{"name": "get_weather", "b": [1, 2.5, true, null], "a": {}, "c": [], "t": "é <&> \"q\"\n"}"#
        );
        assert_eq!(
            dumps(&v, None, true),
            r#"{"a": {}, "b": [1, 2.5, true, null], "c": [], "name": "get_weather", "t": "é <&> \"q\"\n"}"#
        );
        assert_eq!(
            dumps(&json!({"a": [1, {"b": 2}]}), Some(2), false),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": 2\n    }\n  ]\n}"
        );
        assert_eq!(dumps(&json!("x"), Some(4), false), "\"x\"");
    }
}
