//! envoyproxy/ratelimit's configuration, read as that service reads it:
//! YAML files, one domain each, nested `descriptors` matched by key and
//! value (`*` wildcards anywhere in a value), with every field it accepts
//! (`rate_limit` {`unit` in any case, `requests_per_unit` any `uint32`,
//! `unlimited`, `name`, `replaces`}, `shadow_mode`, `quota_mode`,
//! `detailed_metric`, `value_to_metric`, `share_threshold`, `metadata`),
//! and one of ratelab's own: `rate_limit.algorithm`.
//!
//! What it refuses is refused here too, and each error names the file, the
//! line and column, and the problem in the reference's words (`invalid rate
//! limit unit 'foo'`, `replaces should not contain name of same
//! descriptor`, `config error, unknown key 'ratelimit'`, ...).
//!
//! A descriptor is matched as the reference matches it
//! ([`Config::find`]): each entry in turn, `key_value` exactly, then the
//! first wildcard value that matches in the order the file lists them,
//! then the key alone; a limit applies only where the last entry lands.
//! The names its statistics carry (`domain.key_value.key`, or the
//! request's values with `detailed_metric` and `value_to_metric`) are
//! computed the same way.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::google::protobuf::{
    ListValue, NullValue, Struct, Value as ProtoValue, value::Kind as ProtoKind,
};
use ratelab::{AlgorithmKind, Quota};

use crate::yaml::{self, Kind, Node, Position, Scalar};

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file or directory could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not valid: its YAML, an unknown field, a bad value.
    #[error("{}{}: {message}", path.display(), location.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Line and column (from 1), where known.
        location: Option<(usize, usize)>,
        /// What is wrong.
        message: String,
    },
}

/// The unit of a `rate_limit`, as Envoy's `RateLimitResponse.RateLimit.Unit`
/// names them (the files may write them in any case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3600 seconds.
    Hour,
    /// 86 400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days, as envoyproxy/ratelimit counts a month.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit's length in seconds: the window of a fixed window on the
    /// clock (windows start at multiples of it since the Unix epoch, UTC).
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The unit's length.
    pub fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }

    /// The unit a file names, in any case (`minute`, `MINUTE`, `Minute`).
    pub fn from_name(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// The unit from Envoy's `RateLimitResponse.RateLimit.Unit` number.
    pub fn from_proto(unit: i32) -> Option<Unit> {
        Some(match unit {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// Envoy's `RateLimitResponse.RateLimit.Unit` number.
    pub fn to_proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The proto enum's name (`SECOND`, ...), as the JSON endpoint and the
    /// configuration dump write it.
    pub fn proto_name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.proto_name().to_ascii_lowercase())
    }
}

/// What counts a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// `envoy-fixed-window`: as envoyproxy/ratelimit counts. A counter per
    /// window of the unit on the wall clock (UTC); every hit is added,
    /// refused ones included (unless the server stops adding to a request's
    /// counters once one of them is over the limit); a descriptor is over
    /// the limit when its counter passes `requests_per_unit`. What a limit
    /// without `algorithm` uses unless the server is told otherwise.
    EnvoyFixedWindow,
    /// One of ratelab's algorithms (`gcra`, `token-bucket`,
    /// `sliding-log`, ...): a request is counted all or nothing, refusals
    /// cost nothing.
    Ratelab(AlgorithmKind),
}

impl Algorithm {
    /// The name a file gives it.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::EnvoyFixedWindow => ENVOY_FIXED_WINDOW,
            Algorithm::Ratelab(kind) => kind.name(),
        }
    }
}

const ENVOY_FIXED_WINDOW: &str = "envoy-fixed-window";

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        if name == ENVOY_FIXED_WINDOW {
            return Ok(Algorithm::EnvoyFixedWindow);
        }
        name.parse::<AlgorithmKind>()
            .map(Algorithm::Ratelab)
            .map_err(|_| {
                let known: Vec<&str> = std::iter::once(ENVOY_FIXED_WINDOW)
                    .chain(AlgorithmKind::ALL.iter().map(|k| k.name()))
                    .collect();
                format!("unknown algorithm {name:?}: one of {}", known.join(", "))
            })
    }
}

/// One configured `rate_limit`.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// Its `name` ("" when none): what `current_limit.name` carries and
    /// what `replaces` names.
    pub name: String,
    /// `requests_per_unit` (0: every request is over the limit).
    pub requests_per_unit: u32,
    /// `unit` (none for an unlimited one).
    pub unit: Option<Unit>,
    /// `unlimited: true`.
    pub unlimited: bool,
    /// `shadow_mode`: counted and reported, never refused.
    pub shadow: bool,
    /// `quota_mode`: refuses only when every quota descriptor of the
    /// request is over its limit.
    pub quota_mode: bool,
    /// The names of the limits this one replaces when both apply.
    pub replaces: Vec<String>,
    /// `detailed_metric`: statistics name the request's values.
    pub detailed_metric: bool,
    /// `algorithm` (ratelab's field), or none: the server's default.
    pub algorithm: Option<Algorithm>,
    /// `lease` (ratelab's field): `Some(false)` keeps the limit off
    /// leases when the server leases (`--lease-lifetime-ms`), `Some(true)`
    /// requires it to be leased; none: leased when the server leases.
    pub lease: Option<bool>,
    /// The descriptor's path (`domain.key_value.key`): the name of its
    /// statistics.
    pub full_key: String,
    /// Where it is written, for messages about it.
    pub origin: Option<(PathBuf, (usize, usize))>,
}

impl Limit {
    /// The quota ratelab's algorithms count it with, or why they cannot
    /// (a limit of 0 is refused whole without one).
    pub fn quota(&self) -> Result<Quota, String> {
        let unit = self.unit.ok_or("an unlimited limit has no quota")?;
        quota(self.requests_per_unit, unit)
    }

    /// A limit from a request's own `limit` override: unnamed, not in
    /// shadow mode, named in statistics by the descriptor's keys and
    /// values.
    pub fn from_override(full_key: String, requests_per_unit: u32, unit: Unit) -> Limit {
        Limit {
            name: String::new(),
            requests_per_unit,
            unit: Some(unit),
            unlimited: false,
            shadow: false,
            quota_mode: false,
            replaces: Vec::new(),
            detailed_metric: false,
            algorithm: None,
            // A request's own quota is never leased: leases are kept for
            // the configured limits only, so their memory stays bounded.
            lease: Some(false),
            full_key,
            origin: None,
        }
    }
}

/// `requests_per_unit` per `unit` for ratelab's algorithms, or why they
/// cannot count it (zero, or finer than a microsecond apart).
pub fn quota(requests_per_unit: u32, unit: Unit) -> Result<Quota, String> {
    Quota::new(requests_per_unit, unit.duration())
        .map_err(|e| format!("{requests_per_unit} per {unit}: {e}"))
}

/// A descriptor's match: the limit, and what its statistics and counter
/// key are named after.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The limit (unlimited ones included).
    pub limit: Arc<Limit>,
    /// The name of its statistics (`domain.key_value.key`, or with the
    /// request's values under `detailed_metric` / `value_to_metric`).
    pub stats_key: String,
    /// For each entry of the descriptor, the wildcard value its counter is
    /// shared under (`share_threshold`), or "".
    pub share_patterns: Option<Vec<String>>,
    /// The descriptor's `metadata`.
    pub metadata: Option<Arc<Struct>>,
}

/// One node of the descriptor tree: children by `key_value` (or `key`),
/// the wildcard ones in the order they are written, and a limit.
#[derive(Debug, Clone, Default, PartialEq)]
struct Node2 {
    children: HashMap<String, Node2>,
    limit: Option<Arc<Limit>>,
    /// The children whose value holds a `*`: their map key, split on `*`.
    wildcards: Vec<(String, Vec<String>)>,
    value_to_metric: bool,
    share_threshold: bool,
    /// The map key, when `share_threshold` is set on a wildcard.
    wildcard_pattern: String,
    metadata: Option<Arc<Struct>>,
}

/// One domain: its descriptors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Domain {
    root: Node2,
}

/// The whole configuration: every domain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    domains: HashMap<String, Domain>,
    /// Why no configuration is loaded, when none is.
    refused: Option<String>,
}

impl Config {
    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// A configuration of `domains` (name and descriptors), as [`parse`]
    /// gives them.
    pub fn from_domains(domains: impl IntoIterator<Item = (String, Domain)>) -> Config {
        Config {
            domains: domains.into_iter().collect(),
            refused: None,
        }
    }

    /// No configuration, because the files did not load (`why`): every
    /// request is answered with an error until a reload succeeds, as the
    /// reference answers when it started on files it refused.
    pub fn refused(why: impl Into<String>) -> Config {
        Config {
            domains: HashMap::new(),
            refused: Some(why.into()),
        }
    }

    /// Why no configuration is loaded, if none is.
    pub fn refusal(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The number of domains.
    pub fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether there is no domain.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Reads `files` in order. A domain in two files is an error unless
    /// `merge` (the reference's `MERGE_DOMAIN_CONFIG`), which adds the
    /// second file's descriptors to the first's.
    pub fn load_files(files: &[PathBuf], merge: bool) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for file in files {
            let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Io {
                path: file.clone(),
                source,
            })?;
            config.add(file, &text, merge)?;
        }
        Ok(config)
    }

    /// Reads `paths`: files, or directories whose `.yaml` and `.yml` files
    /// are read (not their subdirectories). A domain in two files is an
    /// error.
    pub fn load(paths: &[PathBuf]) -> Result<Config, ConfigError> {
        Config::load_files(&files(paths)?, false)
    }

    /// Adds one file's domain.
    pub fn add(&mut self, path: &Path, text: &str, merge: bool) -> Result<(), ConfigError> {
        let file = read_file(path, text)?;
        let invalid = |at: Option<Position>, message: String| ConfigError::Invalid {
            path: path.to_owned(),
            location: at,
            message,
        };
        if file.domain.is_empty() {
            return Err(invalid(
                file.domain_at,
                "config file cannot have empty domain".to_owned(),
            ));
        }
        if !merge && self.domains.contains_key(&file.domain) {
            return Err(invalid(
                file.domain_at,
                format!("duplicate domain '{}' in config file", file.domain),
            ));
        }
        let domain = self.domains.entry(file.domain.clone()).or_default();
        // Built aside, so that a failed merge leaves the domain as it was.
        let mut root = domain.root.clone();
        load_descriptors(
            path,
            &format!("{}.", file.domain),
            &file.descriptors,
            &mut root,
        )
        .map_err(|(at, message)| invalid(at, message))?;
        domain.root = root;
        Ok(())
    }

    /// The limit that applies to a descriptor of `domain` with `entries`
    /// (key, value), or none: an unknown domain, no match, or a match
    /// without a limit where the last entry lands.
    pub fn find(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
        self.domains.get(domain)?.find(domain, entries)
    }

    /// Every domain's limits, one a line (`full_key: unit=.. requests_per_unit=..,
    /// shadow_mode: .., quota_mode: ..`, then `, algorithm: ..` where a limit
    /// names one), sorted: what the debug port's `/rlconfig` prints.
    pub fn dump(&self) -> String {
        let mut lines = Vec::new();
        for domain in self.domains.values() {
            collect_limits(&domain.root, &mut lines);
        }
        lines.sort();
        lines.concat()
    }

    /// Every limit, with where it is written (for checks at load).
    pub fn limits(&self) -> Vec<Arc<Limit>> {
        let mut out = Vec::new();
        fn walk(node: &Node2, out: &mut Vec<Arc<Limit>>) {
            if let Some(limit) = &node.limit {
                out.push(limit.clone());
            }
            for child in node.children.values() {
                walk(child, out);
            }
        }
        for domain in self.domains.values() {
            walk(&domain.root, &mut out);
        }
        out
    }
}

fn collect_limits(node: &Node2, lines: &mut Vec<String>) {
    if let Some(limit) = &node.limit {
        // The reference's line; the algorithm only where a limit names one.
        let algorithm = limit
            .algorithm
            .map(|a| format!(", algorithm: {}", a.name()))
            .unwrap_or_default();
        let lease = limit
            .lease
            .map(|l| format!(", lease: {l}"))
            .unwrap_or_default();
        lines.push(format!(
            "{}: unit={} requests_per_unit={}, shadow_mode: {}, quota_mode: {}{algorithm}{lease}\n",
            limit.full_key,
            limit.unit.map_or("UNKNOWN", Unit::proto_name),
            limit.requests_per_unit,
            limit.shadow,
            limit.quota_mode,
        ));
    }
    for child in node.children.values() {
        collect_limits(child, lines);
    }
}

impl Domain {
    /// The limit of `entries` in this domain (named `domain`), as
    /// [`Config::find`].
    pub fn find(&self, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
        find(&self.root, domain, entries)
    }
}

/// envoyproxy/ratelimit's `GetLimit`, step by step.
fn find(root: &Node2, domain: &str, entries: &[(&str, &str)]) -> Option<Found> {
    let mut children = &root.children;
    let mut previous = root;
    let mut detailed_key = String::from(domain);
    let mut value_key = String::from(domain);
    let mut shared: BTreeMap<usize, String> = BTreeMap::new();
    let mut found: Option<(Arc<Limit>, Option<Arc<Struct>>)> = None;

    for (i, &(key, value)) in entries.iter().enumerate() {
        let exact = format!("{key}_{value}");
        detailed_key.push('.');
        detailed_key.push_str(&exact);

        let mut next = children.get(&exact);
        let mut wildcard: Option<&str> = None;
        if next.is_none() {
            for (pattern, parts) in &previous.wildcards {
                if wildcard_match(parts, &exact) {
                    next = children.get(pattern);
                    wildcard = Some(pattern);
                    break;
                }
            }
        }
        let by_value = next.is_some();
        if next.is_none() {
            next = children.get(key);
        }
        let key_prefix = format!("{key}_");
        if let (Some(_), Some(node)) = (wildcard, next)
            && node.share_threshold
            && !node.wildcard_pattern.is_empty()
        {
            let pattern = node.wildcard_pattern.strip_prefix(&key_prefix);
            shared.insert(i, pattern.unwrap_or(&node.wildcard_pattern).to_owned());
        }

        value_key.push('.');
        value_key.push_str(key);
        if let Some(node) = next {
            let value_used: &str = if let Some(pattern) = wildcard {
                if let Some(share) = shared.get(&i) {
                    share
                } else if node.value_to_metric {
                    value
                } else {
                    pattern.strip_prefix(&key_prefix).unwrap_or(pattern)
                }
            } else if by_value || node.value_to_metric {
                value
            } else {
                ""
            };
            if !value_used.is_empty() {
                value_key.push('_');
                value_key.push_str(value_used);
            }
        }

        if let Some(node) = next
            && let Some(limit) = &node.limit
            && i == entries.len() - 1
        {
            found = Some((limit.clone(), node.metadata.clone()));
        }

        match next {
            Some(node) if !node.children.is_empty() => children = &node.children,
            _ => {
                // The reference builds a detailed limit afresh here, without
                // its metadata.
                if let Some((limit, metadata)) = &mut found
                    && limit.detailed_metric
                {
                    *metadata = None;
                }
                break;
            }
        }
        previous = next.expect("matched: it has children");
    }

    let (limit, mut metadata) = found?;
    let share_patterns = (!shared.is_empty()).then(|| {
        (0..entries.len())
            .map(|i| shared.get(&i).cloned().unwrap_or_default())
            .collect::<Vec<_>>()
    });
    let stats_key = if limit.detailed_metric {
        match &share_patterns {
            Some(patterns) => {
                let mut key = String::from(domain);
                for (i, &(k, v)) in entries.iter().enumerate() {
                    key.push('.');
                    key.push_str(k);
                    let pattern = &patterns[i];
                    if !pattern.is_empty() {
                        key.push('_');
                        key.push_str(pattern);
                    } else if !v.is_empty() {
                        key.push('_');
                        key.push_str(v);
                    }
                }
                key
            }
            None => detailed_key,
        }
    } else if value_key != limit.full_key {
        // Named after the request's values: built afresh, without its
        // metadata, as the reference does.
        metadata = None;
        value_key
    } else {
        limit.full_key.clone()
    };
    Some(Found {
        limit,
        stats_key,
        share_patterns,
        metadata,
    })
}

/// Whether `value` matches a wildcard split on `*` (each `*` any run of
/// characters, the empty one included; the pieces in order).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    if parts.len() == 1 {
        return parts[0] == value;
    }
    let (first, last) = (&parts[0], &parts[parts.len() - 1]);
    if !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let fixed: usize = parts.iter().map(String::len).sum();
    if value.len() < fixed {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

// ---------------------------------------------------------------------
// Reading a file: the keys checked as the reference checks them, then the
// fields decoded as Go's yaml.v2 decodes them, each with its position.

/// The keys the reference knows, anywhere in a file.
const VALID_KEYS: [&str; 16] = [
    "domain",
    "key",
    "value",
    "descriptors",
    "rate_limit",
    "unit",
    "requests_per_unit",
    "unlimited",
    "shadow_mode",
    "quota_mode",
    "name",
    "replaces",
    "detailed_metric",
    "value_to_metric",
    "share_threshold",
    "metadata",
];

/// ratelab's own key, inside a `rate_limit` only.
const ALGORITHM_KEY: &str = "algorithm";

/// ratelab's own key, inside a `rate_limit` only: whether the limit is
/// leased when the server leases.
const LEASE_KEY: &str = "lease";

struct FileYaml {
    domain: String,
    domain_at: Option<Position>,
    descriptors: Vec<DescriptorYaml>,
}

struct DescriptorYaml {
    at: Position,
    key: String,
    value: String,
    rate_limit: Option<RateLimitYaml>,
    descriptors: Vec<DescriptorYaml>,
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
    value_to_metric: bool,
    share_threshold: bool,
    metadata: Option<Node>,
}

struct RateLimitYaml {
    at: Position,
    requests_per_unit: u32,
    unit: String,
    unit_at: Position,
    unlimited: bool,
    name: String,
    replaces: Vec<(String, Position)>,
    algorithm: Option<(String, Position)>,
    lease: Option<(bool, Position)>,
}

type Problem = (Option<Position>, String);

fn read_file(path: &Path, text: &str) -> Result<FileYaml, ConfigError> {
    let invalid = |(location, message): Problem| ConfigError::Invalid {
        path: path.to_owned(),
        location,
        message,
    };
    let root = yaml::parse(text).map_err(|e| {
        invalid((
            e.at,
            format!("error loading config file: yaml: {}", e.message),
        ))
    })?;
    let Some(root) = root else {
        return Ok(FileYaml {
            domain: String::new(),
            domain_at: None,
            descriptors: Vec::new(),
        });
    };
    match &root.kind {
        Kind::Map(_) => {}
        _ if root.is_null() => {
            return Ok(FileYaml {
                domain: String::new(),
                domain_at: Some(root.at),
                descriptors: Vec::new(),
            });
        }
        _ => {
            return Err(invalid((
                Some(root.at),
                format!(
                    "error loading config file: yaml: unmarshal errors: cannot unmarshal {} into a mapping",
                    root.type_name()
                ),
            )));
        }
    }
    validate_keys(&root, false).map_err(invalid)?;
    decode_file(&root).map_err(invalid)
}

/// The reference's `validateYamlKeys`: every key a string and a known one
/// (metadata's excepted), every list a list of mappings, every leaf a
/// string, integer, boolean or null.
fn validate_keys(node: &Node, in_rate_limit: bool) -> Result<(), Problem> {
    let Kind::Map(entries) = &node.kind else {
        return Ok(());
    };
    for (key, value) in entries {
        let name = match key.scalar() {
            Some(Scalar::Str(name)) => name,
            _ => {
                return Err((
                    Some(key.at),
                    format!(
                        "config error, key is not of type string: {}",
                        go_format(key)
                    ),
                ));
            }
        };
        let known = VALID_KEYS.contains(&name.as_str())
            || (in_rate_limit && (name == ALGORITHM_KEY || name == LEASE_KEY));
        if !known {
            return Err((Some(key.at), format!("config error, unknown key '{name}'")));
        }
        if name == "metadata" {
            continue;
        }
        match &value.kind {
            Kind::Seq(items) => {
                for item in items {
                    if !matches!(item.kind, Kind::Map(_)) {
                        return Err((
                            Some(item.at),
                            format!(
                                "config error, yaml file contains list of type other than map: {}",
                                go_format(item)
                            ),
                        ));
                    }
                    validate_keys(item, false)?;
                }
            }
            Kind::Map(_) => validate_keys(value, name == "rate_limit")?,
            Kind::Scalar { .. } => match value.scalar() {
                Some(Scalar::Str(_) | Scalar::Bool(_) | Scalar::Null) => {}
                Some(Scalar::Int(n)) if i64::try_from(n).is_ok() => {}
                _ => return Err((Some(value.at), "error checking config".to_owned())),
            },
        }
    }
    Ok(())
}

/// A node as Go's `%v` prints what yaml.v2 made of it.
fn go_format(node: &Node) -> String {
    match node.scalar() {
        Some(Scalar::Null) => "<nil>".to_owned(),
        Some(Scalar::Bool(b)) => b.to_string(),
        Some(Scalar::Int(n)) => n.to_string(),
        Some(Scalar::Float(f)) => f.to_string(),
        Some(Scalar::Str(s)) => s,
        None => match &node.kind {
            Kind::Seq(items) => format!(
                "[{}]",
                items.iter().map(go_format).collect::<Vec<_>>().join(" ")
            ),
            _ => "map[...]".to_owned(),
        },
    }
}

/// yaml.v2's type error for a value that does not fit its field.
fn mismatch(node: &Node, into: &str) -> Problem {
    let shown = match &node.kind {
        Kind::Scalar { text, .. } => format!(" `{text}`"),
        _ => String::new(),
    };
    (
        Some(node.at),
        format!(
            "error loading config file: yaml: unmarshal errors: line {}: cannot unmarshal {}{shown} into {into}",
            node.at.0,
            node.type_name()
        ),
    )
}

fn field<'a>(entries: &'a [(Node, Node)], name: &str) -> Option<&'a Node> {
    entries
        .iter()
        .rev()
        .find(|(k, _)| k.text() == Some(name))
        .map(|(_, v)| v)
}

/// A string field: any scalar's text (null: ""), as yaml.v2 fills one.
fn string_field(
    entries: &[(Node, Node)],
    name: &str,
) -> Result<(String, Option<Position>), Problem> {
    let Some(node) = field(entries, name) else {
        return Ok((String::new(), None));
    };
    match &node.kind {
        Kind::Scalar { text, .. } if !node.is_null() => Ok((text.clone(), Some(node.at))),
        Kind::Scalar { .. } => Ok((String::new(), Some(node.at))),
        _ => Err(mismatch(node, "string")),
    }
}

fn bool_field(entries: &[(Node, Node)], name: &str) -> Result<bool, Problem> {
    let Some(node) = field(entries, name) else {
        return Ok(false);
    };
    match node.scalar() {
        Some(Scalar::Bool(b)) => Ok(b),
        Some(Scalar::Null) => Ok(false),
        _ => Err(mismatch(node, "bool")),
    }
}

fn u32_field(entries: &[(Node, Node)], name: &str) -> Result<u32, Problem> {
    let Some(node) = field(entries, name) else {
        return Ok(0);
    };
    match node.scalar() {
        Some(Scalar::Int(n)) => u32::try_from(n).map_err(|_| mismatch(node, "uint32")),
        // yaml.v2 takes a float's whole part (the keys' check refuses
        // floats before this is reached).
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Some(Scalar::Float(f)) if f >= 0.0 && f <= f64::from(u32::MAX) => Ok(f as u32),
        Some(Scalar::Null) => Ok(0),
        _ => Err(mismatch(node, "uint32")),
    }
}

/// A list of mappings (null: none).
fn list_field<'a>(
    entries: &'a [(Node, Node)],
    name: &str,
    into: &str,
) -> Result<Vec<&'a [(Node, Node)]>, Problem> {
    let Some(node) = field(entries, name) else {
        return Ok(Vec::new());
    };
    match &node.kind {
        Kind::Seq(items) => items
            .iter()
            .map(|item| match &item.kind {
                Kind::Map(entries) => Ok(entries.as_slice()),
                _ if item.is_null() => Ok(&[][..]),
                _ => Err(mismatch(item, into)),
            })
            .collect(),
        _ if node.is_null() => Ok(Vec::new()),
        _ => Err(mismatch(node, &format!("[]{into}"))),
    }
}

fn decode_file(root: &Node) -> Result<FileYaml, Problem> {
    let Kind::Map(entries) = &root.kind else {
        unreachable!("checked by the caller")
    };
    let (domain, domain_at) = string_field(entries, "domain")?;
    let descriptors = list_field(entries, "descriptors", "config.YamlDescriptor")?
        .into_iter()
        .zip(descriptor_nodes(entries, "descriptors"))
        .map(|(entries, at)| decode_descriptor(entries, at))
        .collect::<Result<_, _>>()?;
    Ok(FileYaml {
        domain,
        domain_at: domain_at.or(Some(root.at)),
        descriptors,
    })
}

/// The positions of a list field's items.
fn descriptor_nodes(entries: &[(Node, Node)], name: &str) -> Vec<Position> {
    match field(entries, name).map(|n| &n.kind) {
        Some(Kind::Seq(items)) => items.iter().map(|i| i.at).collect(),
        _ => Vec::new(),
    }
}

fn decode_descriptor(entries: &[(Node, Node)], at: Position) -> Result<DescriptorYaml, Problem> {
    let (key, _) = string_field(entries, "key")?;
    let (value, _) = string_field(entries, "value")?;
    let rate_limit = match field(entries, "rate_limit") {
        None => None,
        Some(node) if node.is_null() => None,
        Some(node) => match &node.kind {
            Kind::Map(limit) => Some(decode_rate_limit(limit, node.at)?),
            _ => return Err(mismatch(node, "config.YamlRateLimit")),
        },
    };
    let descriptors = list_field(entries, "descriptors", "config.YamlDescriptor")?
        .into_iter()
        .zip(descriptor_nodes(entries, "descriptors"))
        .map(|(entries, at)| decode_descriptor(entries, at))
        .collect::<Result<_, _>>()?;
    let metadata = match field(entries, "metadata") {
        Some(node) if node.is_null() => None,
        Some(node) => match &node.kind {
            Kind::Map(_) => Some(node.clone()),
            _ => return Err(mismatch(node, "map[string]interface {}")),
        },
        None => None,
    };
    Ok(DescriptorYaml {
        at,
        key,
        value,
        rate_limit,
        descriptors,
        shadow_mode: bool_field(entries, "shadow_mode")?,
        quota_mode: bool_field(entries, "quota_mode")?,
        detailed_metric: bool_field(entries, "detailed_metric")?,
        value_to_metric: bool_field(entries, "value_to_metric")?,
        share_threshold: bool_field(entries, "share_threshold")?,
        metadata,
    })
}

fn decode_rate_limit(entries: &[(Node, Node)], at: Position) -> Result<RateLimitYaml, Problem> {
    let (unit, unit_at) = string_field(entries, "unit")?;
    let (name, _) = string_field(entries, "name")?;
    let replaces_at = descriptor_nodes(entries, "replaces");
    let replaces = list_field(entries, "replaces", "config.yamlReplaces")?
        .into_iter()
        .zip(replaces_at)
        .map(|(entries, at)| string_field(entries, "name").map(|(name, _)| (name, at)))
        .collect::<Result<_, _>>()?;
    let algorithm = match string_field(entries, ALGORITHM_KEY)? {
        (_, None) => None,
        (name, Some(at)) => Some((name, at)),
    };
    let lease = field(entries, LEASE_KEY)
        .map(|node| match node.scalar() {
            Some(Scalar::Bool(b)) => Ok((b, node.at)),
            _ => Err((Some(node.at), "lease must be true or false".to_owned())),
        })
        .transpose()?;
    Ok(RateLimitYaml {
        at,
        requests_per_unit: u32_field(entries, "requests_per_unit")?,
        unit,
        unit_at: unit_at.unwrap_or(at),
        unlimited: bool_field(entries, "unlimited")?,
        name,
        replaces,
        algorithm,
        lease,
    })
}

/// The reference's `loadDescriptors`: each descriptor under its
/// `key_value` (or `key`), checked in its order.
fn load_descriptors(
    path: &Path,
    parent_key: &str,
    descriptors: &[DescriptorYaml],
    node: &mut Node2,
) -> Result<(), Problem> {
    for d in descriptors {
        let at = Some(d.at);
        if d.key.is_empty() {
            return Err((at, "descriptor has empty key".to_owned()));
        }
        let final_key = if d.value.is_empty() {
            d.key.clone()
        } else {
            format!("{}_{}", d.key, d.value)
        };
        let full_key = format!("{parent_key}{final_key}");
        if node.children.contains_key(&final_key) {
            return Err((
                at,
                format!("duplicate descriptor composite key '{full_key}'"),
            ));
        }
        let limit = match &d.rate_limit {
            None => None,
            Some(r) => Some(Arc::new(build_limit(path, d, r, &full_key)?)),
        };
        if d.share_threshold && !final_key.contains('*') {
            return Err((
                at,
                format!(
                    "share_threshold can only be used with wildcard values (containing '*'), but found key '{final_key}'"
                ),
            ));
        }
        let wildcard_pattern = if d.share_threshold {
            final_key.clone()
        } else {
            String::new()
        };
        if final_key.contains('*') {
            let parts = final_key.split('*').map(str::to_owned).collect();
            node.wildcards.push((final_key.clone(), parts));
        }
        let metadata = match &d.metadata {
            Some(m) => {
                Some(Arc::new(to_struct(m).map_err(|e| {
                    (Some(m.at), format!("error parsing metadata: {e}"))
                })?))
            }
            None => None,
        };
        let mut child = Node2 {
            limit,
            value_to_metric: d.value_to_metric,
            share_threshold: d.share_threshold,
            wildcard_pattern,
            metadata,
            ..Node2::default()
        };
        load_descriptors(path, &format!("{full_key}."), &d.descriptors, &mut child)?;
        node.children.insert(final_key, child);
    }
    Ok(())
}

fn build_limit(
    path: &Path,
    d: &DescriptorYaml,
    r: &RateLimitYaml,
    full_key: &str,
) -> Result<Limit, Problem> {
    let unit = Unit::from_name(&r.unit);
    if r.unlimited {
        if unit.is_some() {
            return Err((
                Some(r.unit_at),
                "should not specify rate limit unit when unlimited".to_owned(),
            ));
        }
    } else if unit.is_none() {
        return Err((
            Some(r.unit_at),
            format!("invalid rate limit unit '{}'", r.unit),
        ));
    }
    for (name, at) in &r.replaces {
        if name.is_empty() {
            return Err((
                Some(*at),
                "should not have an empty replaces entry".to_owned(),
            ));
        }
        if *name == r.name {
            return Err((
                Some(*at),
                "replaces should not contain name of same descriptor".to_owned(),
            ));
        }
    }
    let algorithm = match &r.algorithm {
        None => None,
        Some((name, at)) => {
            if r.unlimited {
                return Err((
                    Some(*at),
                    "an unlimited rate_limit has no algorithm".to_owned(),
                ));
            }
            let algorithm = name.parse::<Algorithm>().map_err(|e| (Some(*at), e))?;
            if let (Algorithm::Ratelab(_), Some(unit)) = (algorithm, unit)
                && r.requests_per_unit > 0
            {
                quota(r.requests_per_unit, unit).map_err(|e| {
                    (
                        Some(r.at),
                        format!("{full_key}: {algorithm} cannot count {e}"),
                    )
                })?;
            }
            Some(algorithm)
        }
    };
    if let Some((true, at)) = r.lease {
        if r.unlimited {
            return Err((Some(at), "an unlimited rate_limit has no lease".to_owned()));
        }
        if algorithm == Some(Algorithm::EnvoyFixedWindow) {
            return Err((
                Some(at),
                format!(
                    "{full_key}: lease: true needs one of ratelab's algorithms (envoy-fixed-window counts with INCRBY, which gives nothing back)"
                ),
            ));
        }
    }
    Ok(Limit {
        name: r.name.clone(),
        requests_per_unit: r.requests_per_unit,
        unit: if r.unlimited { None } else { unit },
        unlimited: r.unlimited,
        shadow: d.shadow_mode,
        quota_mode: d.quota_mode,
        replaces: r.replaces.iter().map(|(n, _)| n.clone()).collect(),
        detailed_metric: d.detailed_metric,
        algorithm,
        lease: r.lease.map(|(lease, _)| lease),
        full_key: full_key.to_owned(),
        origin: Some((path.to_owned(), r.at)),
    })
}

/// `metadata` as a protobuf `Struct`, as Go's `structpb.NewStruct` makes
/// it: strings, numbers, booleans, nulls, lists and nested mappings.
fn to_struct(node: &Node) -> Result<Struct, String> {
    let Kind::Map(entries) = &node.kind else {
        return Err("metadata is not a mapping".to_owned());
    };
    let mut fields = HashMap::new();
    for (key, value) in entries {
        let name = match key.scalar() {
            Some(Scalar::Str(s)) => s,
            Some(_) => go_format(key),
            None => return Err("a metadata key is not a scalar".to_owned()),
        };
        fields.insert(name, to_value(value)?);
    }
    Ok(Struct { fields })
}

fn to_value(node: &Node) -> Result<ProtoValue, String> {
    let kind = match &node.kind {
        Kind::Map(_) => ProtoKind::StructValue(to_struct(node)?),
        Kind::Seq(items) => ProtoKind::ListValue(ListValue {
            values: items.iter().map(to_value).collect::<Result<_, _>>()?,
        }),
        Kind::Scalar { .. } => match node.scalar().expect("a scalar") {
            Scalar::Null => ProtoKind::NullValue(NullValue::NullValue as i32),
            Scalar::Bool(b) => ProtoKind::BoolValue(b),
            Scalar::Int(n) => ProtoKind::NumberValue(n as f64),
            Scalar::Float(f) => ProtoKind::NumberValue(f),
            Scalar::Str(s) => ProtoKind::StringValue(s),
        },
    };
    Ok(ProtoValue { kind: Some(kind) })
}

/// One file's domain, alone (for a configuration built by hand with
/// [`Config::from_domains`]).
pub fn parse(path: &Path, text: &str) -> Result<(String, Domain), ConfigError> {
    let mut config = Config::default();
    config.add(path, text, false)?;
    let (name, domain) = config
        .domains
        .into_iter()
        .next()
        .expect("a file that loads has its domain");
    Ok((name, domain))
}

/// The configuration files of `paths` (files, or directories whose `.yaml`
/// and `.yml` files are read, not their subdirectories), sorted within
/// each directory.
pub fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ConfigError> {
    let mut files = Vec::new();
    for path in paths {
        let io = |source| ConfigError::Io {
            path: path.clone(),
            source,
        };
        if std::fs::metadata(path).map_err(io)?.is_dir() {
            let mut inside = Vec::new();
            for entry in std::fs::read_dir(path).map_err(io)? {
                let entry = entry.map_err(io)?.path();
                let yaml = matches!(
                    entry.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml")
                );
                if yaml && entry.is_file() {
                    inside.push(entry);
                }
            }
            inside.sort();
            files.extend(inside);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

/// Where envoyproxy/ratelimit reads its files: below `RUNTIME_ROOT` /
/// `RUNTIME_SUBDIRECTORY`, every file in `RUNTIME_APPDIRECTORY` and its
/// subdirectories, whatever its extension (dot files too unless
/// `RUNTIME_IGNOREDOTFILES`). Watching the root (`RUNTIME_WATCH_ROOT`, the
/// default), any file whose path under the subdirectory starts with
/// `RUNTIME_APPDIRECTORY` and a dot counts too (`config.yaml` beside the
/// `config` directory), as the reference's key filter lets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeDirectory {
    /// `RUNTIME_ROOT`.
    pub root: PathBuf,
    /// `RUNTIME_SUBDIRECTORY`.
    pub subdirectory: PathBuf,
    /// `RUNTIME_APPDIRECTORY` (`config`).
    pub app_directory: PathBuf,
    /// `RUNTIME_IGNOREDOTFILES`.
    pub ignore_dot_files: bool,
    /// `RUNTIME_WATCH_ROOT`.
    pub watch_root: bool,
}

impl RuntimeDirectory {
    /// The directory whose files are the configuration.
    pub fn directory(&self) -> PathBuf {
        self.root.join(&self.subdirectory).join(&self.app_directory)
    }

    /// Its files now, sorted. No subdirectory (`RUNTIME_SUBDIRECTORY`
    /// unset) or a missing directory is no files: the reference starts
    /// without limits then.
    pub fn files(&self) -> Result<Vec<PathBuf>, ConfigError> {
        let mut files = Vec::new();
        if self.root.as_os_str().is_empty() || self.subdirectory.as_os_str().is_empty() {
            return Ok(files);
        }
        if self.watch_root {
            let base = self.root.join(&self.subdirectory);
            let mut all = Vec::new();
            walk(&base, self.ignore_dot_files, &mut all)?;
            let prefix = format!("{}.", self.app_directory.to_string_lossy());
            files.extend(all.into_iter().filter(|file| {
                file.strip_prefix(&base).is_ok_and(|relative| {
                    relative
                        .to_string_lossy()
                        .replace('/', ".")
                        .starts_with(&prefix)
                })
            }));
        } else {
            walk(&self.directory(), self.ignore_dot_files, &mut files)?;
        }
        files.sort();
        Ok(files)
    }
}

fn walk(dir: &Path, ignore_dot_files: bool, files: &mut Vec<PathBuf>) -> Result<(), ConfigError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(ConfigError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    for entry in entries {
        let entry = entry.map_err(|source| ConfigError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let path = entry.path();
        let dot = entry.file_name().to_string_lossy().starts_with('.');
        if ignore_dot_files && dot {
            continue;
        }
        // Like Go's filepath.Walk: a symbolic link is not followed into a
        // directory, but a link to a file is read.
        let file_type = entry.file_type().map_err(|source| ConfigError::Io {
            path: path.clone(),
            source,
        })?;
        if file_type.is_dir() {
            walk(&path, ignore_dot_files, files)?;
        } else if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
