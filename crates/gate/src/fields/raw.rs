//! The raw text of a JSON object's members and of an array's elements, from text the strict
//! reader already accepted ([`crate::strict_json`]): what [`super::Fields`] reads a number's
//! literal from, so a decimal is taken as written, never through a double.

/// The members of the JSON object `text`: each key (unescaped) and its value's text. `None` if
/// `text` is not an object (never for text the strict reader accepted as one).
pub(super) fn members(text: &str) -> Option<Vec<(String, &str)>> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut out = Vec::new();
    if b.get(i) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let key_end = value_end(b, i)?;
        let key: String = serde_json::from_str(&text[i..key_end]).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(b, i + 1);
        let end = value_end(b, start)?;
        out.push((key, &text[start..end]));
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Some(out),
            _ => return None,
        }
    }
}

/// The elements' texts of the JSON array `text`; `None` if it is not an array.
pub(super) fn elements(text: &str) -> Option<Vec<&str>> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'[') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let mut out = Vec::new();
    if b.get(i) == Some(&b']') {
        return Some(out);
    }
    loop {
        let end = value_end(b, i)?;
        out.push(&text[i..end]);
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b']') => return Some(out),
            _ => return None,
        }
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while b
        .get(i)
        .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
    {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON value starting at `start`: a string to its closing quote,
/// an object or array to its matching bracket (strings inside skipped), anything else to the
/// next delimiter.
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    loop {
        match *b.get(i)? {
            b'"' => {
                i += 1;
                while *b.get(i)? != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                i += 1;
            }
            b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' if depth == 0 => return Some(i),
            _ => i += 1,
        }
        if depth == 0 && i > start && matches!(b[start], b'"' | b'{' | b'[') {
            return Some(i);
        }
        if i >= b.len() {
            return (depth == 0).then_some(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_elements_keep_their_text() {
        let text = r#" { "a" : 12.50 , "b\"q": ["x,]", {"c": [1, 2]}], "d":-1e2,"e":{} } "#;
        let m = members(text).unwrap();
        let got: Vec<(&str, &str)> = m.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            got,
            [
                ("a", "12.50"),
                ("b\"q", r#"["x,]", {"c": [1, 2]}]"#),
                ("d", "-1e2"),
                ("e", "{}")
            ]
        );
        assert_eq!(
            elements(r#"["x,]", {"c": [1, 2]}]"#).unwrap(),
            [r#""x,]""#, r#"{"c": [1, 2]}"#]
        );
        assert_eq!(elements("[]").unwrap(), Vec::<&str>::new());
        assert_eq!(members("{}").unwrap(), vec![]);
        assert!(members("[1]").is_none());
        assert!(elements("{}").is_none());
    }
}
