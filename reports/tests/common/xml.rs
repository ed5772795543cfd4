//! A tiny XML well-formedness check for the SVG the crate writes (tests
//! only): one root element, tags nested and closed in order, attributes
//! quoted and not repeated, no raw `<` in text or attribute values, and
//! every `&` starting a known entity or a character reference. And
//! [`tags`] / [`attr`]: the tags of a document as quick-xml reads them, for
//! assertions on attributes (the JUnit files).
//!
//! Shared by the integration tests and, through `#[path]`, by the crate's
//! unit tests.

#![allow(dead_code)]

/// `Ok` if `s` is one well-formed XML element (comments and processing
/// instructions apart), else what is wrong and where.
pub fn check(s: &str) -> Result<(), String> {
    let b = s.as_bytes();
    let mut stack: Vec<&str> = Vec::new();
    let mut roots = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'<' {
            let end = s[i..].find('<').map_or(b.len(), |n| i + n);
            if stack.is_empty() && !s[i..end].trim().is_empty() {
                return Err(format!("text outside the root at {i}"));
            }
            entities(&s[i..end]).map_err(|e| format!("{e} in text at {i}"))?;
            i = end;
            continue;
        }
        if s[i..].starts_with("<!--") {
            i = s[i..]
                .find("-->")
                .map(|n| i + n + 3)
                .ok_or("unclosed comment")?;
            continue;
        }
        if s[i..].starts_with("<?") {
            i = s[i..]
                .find("?>")
                .map(|n| i + n + 2)
                .ok_or("unclosed processing instruction")?;
            continue;
        }
        if s[i..].starts_with("</") {
            let end = s[i..].find('>').map(|n| i + n).ok_or("unclosed end tag")?;
            let name = s[i + 2..end].trim_end();
            match stack.pop() {
                Some(open) if open == name => {}
                other => return Err(format!("</{name}> at {i} closes {other:?}")),
            }
            i = end + 1;
            continue;
        }
        // A start tag: name, attributes, `>` or `/>`.
        i += 1;
        let name_end = s[i..]
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .map(|n| i + n)
            .ok_or("unclosed start tag")?;
        let name = &s[i..name_end];
        if !is_name(name) {
            return Err(format!("bad tag name {name:?} at {i}"));
        }
        i = name_end;
        let mut seen: Vec<&str> = Vec::new();
        loop {
            while i < b.len() && b[i].is_ascii_whitespace() {
                i += 1;
            }
            if i >= b.len() {
                return Err(format!("<{name}> unclosed"));
            }
            if s[i..].starts_with("/>") {
                i += 2;
                if stack.is_empty() {
                    roots += 1;
                }
                break;
            }
            if b[i] == b'>' {
                i += 1;
                if stack.is_empty() {
                    roots += 1;
                }
                stack.push(name);
                break;
            }
            let eq = s[i..]
                .find('=')
                .map(|n| i + n)
                .ok_or(format!("attribute without value in <{name}>"))?;
            let attr = &s[i..eq];
            if !is_name(attr) {
                return Err(format!("bad attribute name {attr:?} in <{name}>"));
            }
            if seen.contains(&attr) {
                return Err(format!("attribute {attr} repeated in <{name}>"));
            }
            seen.push(attr);
            let quote = *b.get(eq + 1).ok_or("truncated attribute")?;
            if quote != b'"' && quote != b'\'' {
                return Err(format!("unquoted attribute {attr} in <{name}>"));
            }
            let close = s[eq + 2..]
                .find(quote as char)
                .map(|n| eq + 2 + n)
                .ok_or(format!("unclosed attribute {attr} in <{name}>"))?;
            let value = &s[eq + 2..close];
            if value.contains('<') {
                return Err(format!("raw < in attribute {attr} of <{name}>"));
            }
            entities(value).map_err(|e| format!("{e} in attribute {attr} of <{name}>"))?;
            i = close + 1;
            if i < b.len() && !(b[i].is_ascii_whitespace() || b[i] == b'>' || b[i] == b'/') {
                return Err(format!("no space after attribute {attr} in <{name}>"));
            }
        }
    }
    if let Some(open) = stack.last() {
        return Err(format!("<{open}> never closed"));
    }
    if roots != 1 {
        return Err(format!("{roots} root elements"));
    }
    Ok(())
}

/// Every `&` in `s` starts `&amp;`, `&lt;`, `&gt;`, `&quot;`, `&apos;` or
/// `&#…;`.
fn entities(s: &str) -> Result<(), String> {
    let mut rest = s;
    while let Some(n) = rest.find('&') {
        rest = &rest[n + 1..];
        let end = rest.find(';').ok_or("& without ;")?;
        let e = &rest[..end];
        let ok = matches!(e, "amp" | "lt" | "gt" | "quot" | "apos")
            || e.strip_prefix("#x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            || e.strip_prefix('#')
                .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(format!("unknown entity &{e};"));
        }
        rest = &rest[end + 1..];
    }
    Ok(())
}

/// An XML name (ASCII is enough here): a letter or `_`, then letters,
/// digits, `-`, `_`, `.`, `:`.
fn is_name(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Every `<svg …>…</svg>` in `html`.
pub fn svgs(html: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find("<svg") {
        let Some(len) = rest[start..].find("</svg>") else {
            break;
        };
        out.push(&rest[start..start + len + "</svg>".len()]);
        rest = &rest[start + len..];
    }
    out
}

/// A start or empty tag: its name and its attributes, in order.
pub type Tag = (String, Vec<(String, String)>);

/// Every start or empty tag of `xml`, parsed by quick-xml's reader (which
/// also refuses ill-formed XML).
pub fn tags(xml: &str) -> Vec<Tag> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut out = Vec::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => {
                let attrs = e
                    .attributes()
                    .map(|a| {
                        let a = a.unwrap();
                        (
                            String::from_utf8(a.key.as_ref().to_vec()).unwrap(),
                            a.normalized_value(quick_xml::XmlVersion::Explicit1_0)
                                .unwrap()
                                .into_owned(),
                        )
                    })
                    .collect();
                out.push((
                    String::from_utf8(e.name().as_ref().to_vec()).unwrap(),
                    attrs,
                ));
            }
            _ => {}
        }
    }
    out
}

/// The value of attribute `name` of `tag`; panics naming both if absent.
pub fn attr<'a>(tag: &'a Tag, name: &str) -> &'a str {
    tag.1
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} on {tag:?}"))
}
