//! YAML read as envoyproxy/ratelimit reads it (Go's `gopkg.in/yaml.v2`,
//! YAML 1.1 scalars: `yes`/`no`/`on`/`off` are booleans, `0x10` and `010`
//! integers), into a tree that remembers each node's line and column, so
//! that every error names where it is.

use std::collections::HashMap;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// Nodes an alias may expand to, in all: a few aliases of aliases must not
/// build a tree of billions of nodes ("billion laughs").
const MAX_NODES: usize = 1_000_000;

/// Where a node starts: line and column, from 1.
pub(crate) type Position = (usize, usize);

/// One node of a document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    pub(crate) at: Position,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    /// A scalar as written: its text, whether it was plain (unquoted, so
    /// resolved by YAML 1.1's rules) and its explicit tag, if any.
    Scalar {
        text: String,
        plain: bool,
        tag: Option<String>,
    },
    Seq(Vec<Node>),
    /// Entries in order; a key written twice keeps its last value, as Go's
    /// yaml.v2 does.
    Map(Vec<(Node, Node)>),
}

/// A scalar's value, resolved as yaml.v2 resolves it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    Null,
    Bool(bool),
    /// Any integer yaml.v2 reads (`int` up to 2^63 - 1, `uint64` above).
    Int(i128),
    Float(f64),
    Str(String),
}

impl Node {
    /// The scalar's value, or `None` for a sequence or a mapping.
    pub(crate) fn scalar(&self) -> Option<Scalar> {
        match &self.kind {
            Kind::Scalar { text, plain, tag } => Some(resolve(text, *plain, tag.as_deref())),
            _ => None,
        }
    }

    /// The node's YAML type as yaml.v2 names it in its errors
    /// (`!!str`, `!!int`, `!!seq`, ...).
    pub(crate) fn type_name(&self) -> &'static str {
        match &self.kind {
            Kind::Seq(_) => "!!seq",
            Kind::Map(_) => "!!map",
            Kind::Scalar { .. } => match self.scalar() {
                Some(Scalar::Null) => "!!null",
                Some(Scalar::Bool(_)) => "!!bool",
                Some(Scalar::Int(_)) => "!!int",
                Some(Scalar::Float(_)) => "!!float",
                _ => "!!str",
            },
        }
    }

    /// The scalar's text as written (what yaml.v2 puts in a string field).
    pub(crate) fn text(&self) -> Option<&str> {
        match &self.kind {
            Kind::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self.scalar(), Some(Scalar::Null))
    }
}

/// A document that is not valid YAML: where, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyntaxError {
    pub(crate) at: Option<Position>,
    pub(crate) message: String,
}

/// The first document of `text` (`None` when there is none: an empty file,
/// or only comments).
pub(crate) fn parse(text: &str) -> Result<Option<Node>, SyntaxError> {
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    parser.load(&mut builder, false).map_err(|e| SyntaxError {
        at: Some((e.marker().line(), e.marker().col() + 1)),
        message: e.info().to_owned(),
    })?;
    if let Some(message) = builder.error {
        return Err(SyntaxError {
            at: builder.error_at,
            message,
        });
    }
    Ok(builder.done)
}

/// Builds the tree from the parser's events.
#[derive(Default)]
struct Builder {
    open: Vec<Open>,
    anchors: HashMap<usize, Node>,
    done: Option<Node>,
    nodes: usize,
    error: Option<String>,
    error_at: Option<Position>,
}

/// A sequence or mapping being read, and the anchor it will be saved as.
struct Open {
    at: Position,
    anchor: usize,
    items: Vec<Node>,
    /// For a mapping: `items` are keys and values in turn.
    map: bool,
}

impl Builder {
    fn fail(&mut self, at: Position, message: String) {
        if self.error.is_none() {
            self.error = Some(message);
            self.error_at = Some(at);
        }
    }

    /// Puts a finished node where it belongs: in the open collection, or
    /// as the document.
    fn place(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.open.last_mut() {
            Some(open) => open.items.push(node),
            None => {
                if self.done.is_none() {
                    self.done = Some(node);
                }
            }
        }
    }
}

fn count(node: &Node) -> usize {
    match &node.kind {
        Kind::Scalar { .. } => 1,
        Kind::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        Kind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| count(k) + count(v))
                .sum::<usize>()
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let at = (mark.line(), mark.col() + 1);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                self.nodes += 1;
                let node = Node {
                    kind: Kind::Scalar {
                        text,
                        plain: style == TScalarStyle::Plain,
                        tag: tag.map(|t| format!("{}{}", t.handle, t.suffix)),
                    },
                    at,
                };
                self.place(node, anchor);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                let map = matches!(event, Event::MappingStart(..));
                self.open.push(Open {
                    at,
                    anchor,
                    items: Vec::new(),
                    map,
                });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(open) = self.open.pop() else {
                    return;
                };
                let kind = if open.map {
                    let mut items = open.items.into_iter();
                    let mut entries = Vec::new();
                    while let (Some(key), Some(value)) = (items.next(), items.next()) {
                        entries.push((key, value));
                    }
                    match merge_keys(entries) {
                        Ok(merged) => Kind::Map(merged),
                        Err((at, message)) => return self.fail(at, message),
                    }
                } else {
                    Kind::Seq(open.items)
                };
                // A block mapping is where its first key is.
                let at = match &kind {
                    Kind::Map(entries) if !entries.is_empty() => entries[0].0.at.min(open.at),
                    _ => open.at,
                };
                self.nodes += 1;
                self.place(Node { kind, at }, open.anchor);
            }
            Event::Alias(anchor) => {
                let Some(node) = self.anchors.get(&anchor).cloned() else {
                    return self.fail(at, "unknown anchor".to_owned());
                };
                self.nodes += count(&node);
                if self.nodes > MAX_NODES {
                    return self.fail(at, format!("aliases expand to more than {MAX_NODES} nodes"));
                }
                self.place(node, 0);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

/// Applies `<<` merge keys (a mapping, or a sequence of mappings, whose
/// entries come in where the key is) and keeps the last value of a key
/// written twice, as yaml.v2 does.
fn merge_keys(entries: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, (Position, String)> {
    let mut out: Vec<(Node, Node)> = Vec::with_capacity(entries.len());
    let push = |out: &mut Vec<(Node, Node)>, key: Node, value: Node| match out
        .iter_mut()
        .find(|(k, _)| same_key(k, &key))
    {
        Some(slot) => slot.1 = value,
        None => out.push((key, value)),
    };
    for (key, value) in entries {
        let is_merge = matches!(&key.kind, Kind::Scalar { text, plain: true, tag: None } if text == "<<")
            || matches!(&key.kind, Kind::Scalar { tag: Some(t), .. } if t == "!!merge" || t == "tag:yaml.org,2002:merge");
        if !is_merge {
            push(&mut out, key, value);
            continue;
        }
        let sources = match value.kind {
            Kind::Map(entries) => vec![entries],
            Kind::Seq(items) => {
                let mut maps = Vec::new();
                // Earlier mappings take precedence: applied last.
                for item in items.into_iter().rev() {
                    match item.kind {
                        Kind::Map(entries) => maps.push(entries),
                        _ => {
                            return Err((
                                item.at,
                                "map merge requires map or sequence of maps as the value"
                                    .to_owned(),
                            ));
                        }
                    }
                }
                maps
            }
            _ => {
                return Err((
                    value.at,
                    "map merge requires map or sequence of maps as the value".to_owned(),
                ));
            }
        };
        for entries in sources {
            for (k, v) in entries {
                push(&mut out, k, v);
            }
        }
    }
    Ok(out)
}

/// Two mapping keys that yaml.v2 takes for the same key.
fn same_key(a: &Node, b: &Node) -> bool {
    match (a.scalar(), b.scalar()) {
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

/// A scalar's value as yaml.v2 resolves it: quoted scalars and `!!str`
/// are strings; plain ones may be null, booleans, integers or floats.
fn resolve(text: &str, plain: bool, tag: Option<&str>) -> Scalar {
    let tag = tag.map(|t| t.strip_prefix("tag:yaml.org,2002:").map_or(t, |s| s));
    match tag {
        Some("!!str" | "str") => return Scalar::Str(text.to_owned()),
        Some(_) => {}
        None if !plain => return Scalar::Str(text.to_owned()),
        None => {}
    }
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match text.as_bytes()[0] {
        b'.' => {
            if let Ok(f) = text.parse::<f64>()
                && is_go_float(text)
            {
                return Scalar::Float(f);
            }
        }
        b'+' | b'-' | b'0'..=b'9' => {
            let plain = text.replace('_', "");
            if let Some(n) = go_int(&plain) {
                return Scalar::Int(n);
            }
            if is_yaml_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
            {
                return Scalar::Float(f);
            }
        }
        _ => {}
    }
    Scalar::Str(text.to_owned())
}

/// Go's `strconv.ParseInt(s, 0, 64)` or `ParseUint`, and yaml.v2's `0b`
/// forms: a sign, then `0x`, `0o`, `0b`, a leading `0` (octal) or decimal.
fn go_int(s: &str) -> Option<i128> {
    let (negative, digits) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (radix, body) = if let Some(rest) = digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        (16, rest)
    } else if let Some(rest) = digits
        .strip_prefix("0o")
        .or_else(|| digits.strip_prefix("0O"))
    {
        (8, rest)
    } else if let Some(rest) = digits
        .strip_prefix("0b")
        .or_else(|| digits.strip_prefix("0B"))
    {
        (2, rest)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u128::from_str_radix(body, radix).ok()?;
    // int64, or uint64 for a positive number above it.
    if negative {
        (magnitude <= 1 << 63).then(|| -(magnitude as i128))
    } else {
        (magnitude <= u128::from(u64::MAX)).then_some(magnitude as i128)
    }
}

/// yaml.v2's float pattern: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`.
fn is_yaml_float(s: &str) -> bool {
    let s = s.strip_prefix(['-', '+']).unwrap_or(s);
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(at) => (&s[..at], Some(&s[at + 1..])),
        None => (s, None),
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        None => digits(mantissa),
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}

/// What Go's `strconv.ParseFloat` takes after a leading `.`.
fn is_go_float(s: &str) -> bool {
    is_yaml_float(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Scalar {
        resolve(text, true, None)
    }

    #[test]
    fn scalars_resolve_as_yaml_v2_does() {
        assert_eq!(value("yes"), Scalar::Bool(true));
        assert_eq!(value("Off"), Scalar::Bool(false));
        assert_eq!(value("~"), Scalar::Null);
        assert_eq!(value("0x10"), Scalar::Int(16));
        assert_eq!(value("010"), Scalar::Int(8));
        assert_eq!(value("1_000"), Scalar::Int(1000));
        assert_eq!(value("-5"), Scalar::Int(-5));
        assert_eq!(value("4294967295"), Scalar::Int(4_294_967_295));
        assert_eq!(value("18446744073709551615"), Scalar::Int(u64::MAX.into()));
        assert_eq!(value("1.5"), Scalar::Float(1.5));
        assert_eq!(value("09"), Scalar::Float(9.0));
        assert_eq!(value("minute"), Scalar::Str("minute".into()));
        assert_eq!(value("50.0.0.5"), Scalar::Str("50.0.0.5".into()));
        assert_eq!(resolve("yes", false, None), Scalar::Str("yes".into()));
        assert_eq!(resolve("5", true, Some("!!str")), Scalar::Str("5".into()));
    }

    #[test]
    fn nodes_know_where_they_are() {
        let doc = parse("domain: d\ndescriptors:\n  - key: a\n    value: 'b'\n")
            .unwrap()
            .unwrap();
        let Kind::Map(entries) = &doc.kind else {
            panic!("{doc:?}")
        };
        assert_eq!(entries[0].0.text(), Some("domain"));
        assert_eq!(entries[0].1.at, (1, 9));
        let Kind::Seq(items) = &entries[1].1.kind else {
            panic!()
        };
        let Kind::Map(inner) = &items[0].kind else {
            panic!()
        };
        assert_eq!(inner[1].1.at.0, 4);
        assert_eq!(inner[1].1.scalar(), Some(Scalar::Str("b".into())));
        assert_eq!(parse("# nothing\n").unwrap(), None);
        let error = parse("a: [b\n").unwrap_err();
        assert!(error.at.is_some(), "{error:?}");
    }

    #[test]
    fn merge_keys_and_duplicates_keep_the_last_value() {
        let doc = parse("base: &b {unit: minute, requests_per_unit: 2}\nx:\n  <<: *b\n  unit: hour\nx2: {a: 1, a: 2}\n")
            .unwrap()
            .unwrap();
        let Kind::Map(entries) = &doc.kind else {
            panic!()
        };
        let Kind::Map(x) = &entries[1].1.kind else {
            panic!()
        };
        assert_eq!(x.len(), 2);
        assert_eq!(x[0].1.text(), Some("hour"));
        let Kind::Map(x2) = &entries[2].1.kind else {
            panic!()
        };
        assert_eq!((x2.len(), x2[0].1.text()), (1, Some("2")));
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n",
                p = i - 1
            ));
        }
        let error = parse(&text).unwrap_err();
        assert!(error.message.contains("aliases expand"), "{error:?}");
    }
}
