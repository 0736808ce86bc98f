//! envoyproxy/ratelimit's configuration, read as it is: YAML files, one
//! domain each, with nested descriptors; plus `algorithm` in a
//! `rate_limit`, ratelab's one field.
//!
//! A field this server does not know is an error naming the file, line and
//! column (never ignored), and so is a duplicate domain or descriptor.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ratelab::{AlgorithmKind, Quota};
use serde::Deserialize;

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

/// The unit of a `rate_limit`, as envoyproxy/ratelimit names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
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
    /// The unit's length.
    pub fn duration(self) -> Duration {
        let secs = match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        };
        Duration::from_secs(secs)
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
}

// The files' shape: unknown fields are errors, with their line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileYaml {
    domain: String,
    #[serde(default)]
    descriptors: Vec<DescriptorYaml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptorYaml {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RateLimitYaml>,
    #[serde(default)]
    descriptors: Vec<DescriptorYaml>,
    #[serde(default)]
    shadow_mode: bool,
    #[serde(default)]
    detailed_metric: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateLimitYaml {
    #[serde(default)]
    unit: Option<Unit>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<ReplacesYaml>,
    /// ratelab's field: the algorithm counting this limit.
    #[serde(default)]
    algorithm: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplacesYaml {
    name: String,
}

/// One limit of the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// The limit's name: its `name`, or the descriptor's path
    /// (`domain.key_value.key`).
    pub name: String,
    /// `requests_per_unit`.
    pub requests_per_unit: u32,
    /// `unit`.
    pub unit: Unit,
    /// The algorithm counting it (GCRA unless `algorithm` says otherwise).
    pub algorithm: AlgorithmKind,
    /// `shadow_mode`: counted and reported, never refused.
    pub shadow: bool,
    /// The names of the limits this one replaces when both apply.
    pub replaces: Vec<String>,
    /// `detailed_metric`: metrics name the request's values.
    pub detailed_metric: bool,
}

impl Limit {
    /// `requests_per_unit` per `unit`, all of it available at once (as a
    /// fixed window's is); an error for what ratelab cannot count (a limit
    /// read from a file was checked already).
    pub fn quota(&self) -> Result<Quota, String> {
        quota(self.requests_per_unit, self.unit)
    }
}

/// `requests_per_unit` per `unit`, or why ratelab cannot count it (zero,
/// or finer than a microsecond apart).
pub fn quota(requests_per_unit: u32, unit: Unit) -> Result<Quota, String> {
    Quota::new(requests_per_unit, unit.duration())
        .map_err(|e| format!("{requests_per_unit} per {unit}: {e}"))
}

/// What a descriptor node holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// No `rate_limit`: only its children limit.
    None,
    /// `unlimited: true`.
    Unlimited {
        /// `shadow_mode`.
        shadow: bool,
    },
    /// A limit.
    Limited(Limit),
}

/// One descriptor node: a rule and its children by `key` and `value`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Node {
    rule: Option<Rule>,
    /// By `key_value` (exact), `key` (any value).
    exact: HashMap<(String, String), Node>,
    any: HashMap<String, Node>,
    /// Values ending in `*`: (key, prefix).
    prefix: Vec<(String, String, Node)>,
}

/// One domain: its descriptors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Domain {
    root: Node,
}

/// A descriptor's match: the rule and the path of the configured node.
#[derive(Debug, Clone, Copy)]
pub struct Match<'a> {
    /// What the node says.
    pub rule: &'a Rule,
}

impl Domain {
    /// The rule of the descriptor `entries` (key, value), as
    /// envoyproxy/ratelimit finds it: each entry in turn, the exact value
    /// first, then a `*` prefix, then the key alone; a rule only where
    /// the last entry lands.
    pub fn find<'a>(&'a self, entries: &[(&str, &str)]) -> Option<Match<'a>> {
        let mut node = &self.root;
        for &(key, value) in entries {
            node = node
                .exact
                .get(&(key.to_owned(), value.to_owned()))
                .or_else(|| {
                    node.prefix
                        .iter()
                        .filter(|(k, p, _)| k == key && value.starts_with(p.as_str()))
                        .max_by_key(|(_, p, _)| p.len())
                        .map(|(_, _, n)| n)
                })
                .or_else(|| node.any.get(key))?;
        }
        node.rule.as_ref().map(|rule| Match { rule })
    }
}

/// The whole configuration: every domain.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    domains: HashMap<String, Domain>,
}

impl Config {
    /// The domain named `name`.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// A configuration of `domains` (name and descriptors), as
    /// [`parse`] gives them.
    pub fn from_domains(domains: impl IntoIterator<Item = (String, Domain)>) -> Config {
        Config {
            domains: domains.into_iter().collect(),
        }
    }

    /// The number of domains.
    pub fn len(&self) -> usize {
        self.domains.len()
    }

    /// Whether there is no domain.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// Reads `paths`: files, or directories whose `.yaml` and `.yml` files
    /// are read (not their subdirectories).
    pub fn load(paths: &[PathBuf]) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        let mut seen: HashMap<String, PathBuf> = HashMap::new();
        for file in files(paths)? {
            let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Io {
                path: file.clone(),
                source,
            })?;
            let (name, domain) = parse(&file, &text)?;
            if let Some(first) = seen.get(&name) {
                return Err(ConfigError::Invalid {
                    path: file,
                    location: None,
                    message: format!("domain {name:?} is also in {}", first.display()),
                });
            }
            seen.insert(name.clone(), file);
            config.domains.insert(name, domain);
        }
        Ok(config)
    }
}

/// The configuration files of `paths`, sorted within each directory.
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

/// One file's domain.
pub fn parse(path: &Path, text: &str) -> Result<(String, Domain), ConfigError> {
    let invalid = |location, message: String| ConfigError::Invalid {
        path: path.to_owned(),
        location,
        message,
    };
    let file: FileYaml = serde_norway::from_str(text).map_err(|e| {
        let location = e.location().map(|l| (l.line(), l.column()));
        // The message ends with its own "at line .. column ..": the
        // location is in front already.
        let message = e.to_string();
        let message = match message.rfind(" at line ") {
            Some(at) if location.is_some() => message[..at].to_owned(),
            _ => message,
        };
        invalid(location, message)
    })?;
    if file.domain.is_empty() {
        return Err(invalid(None, "the domain is empty".to_owned()));
    }
    let mut root = Node::default();
    let mut names = HashSet::new();
    build(&file.domain, &file.descriptors, &mut root, &mut names)
        .map_err(|message| invalid(None, message))?;
    Ok((file.domain, Domain { root }))
}

fn build(
    path: &str,
    descriptors: &[DescriptorYaml],
    node: &mut Node,
    names: &mut HashSet<String>,
) -> Result<(), String> {
    for d in descriptors {
        if d.key.is_empty() {
            return Err(format!("{path}: a descriptor has an empty key"));
        }
        let value = d.value.as_deref().unwrap_or("");
        let here = if value.is_empty() {
            format!("{path}.{}", d.key)
        } else {
            format!("{path}.{}_{value}", d.key)
        };
        let rule = match &d.rate_limit {
            None => Rule::None,
            Some(r) if r.unlimited => {
                if r.requests_per_unit.is_some() || r.unit.is_some() || r.algorithm.is_some() {
                    return Err(format!(
                        "{here}: an unlimited rate_limit has no unit, requests_per_unit or algorithm"
                    ));
                }
                Rule::Unlimited {
                    shadow: d.shadow_mode,
                }
            }
            Some(r) => {
                let unit = r
                    .unit
                    .ok_or_else(|| format!("{here}: rate_limit has no unit"))?;
                let requests_per_unit = match r.requests_per_unit {
                    Some(n) if n > 0 => n,
                    Some(_) => {
                        return Err(format!(
                            "{here}: requests_per_unit is 0 (refuse everything with 1 per year, or drop the limit)"
                        ));
                    }
                    None => return Err(format!("{here}: rate_limit has no requests_per_unit")),
                };
                quota(requests_per_unit, unit).map_err(|e| format!("{here}: {e}"))?;
                let algorithm = match &r.algorithm {
                    Some(name) => name
                        .parse::<AlgorithmKind>()
                        .map_err(|e| format!("{here}: {e}"))?,
                    None => AlgorithmKind::Gcra,
                };
                let name = r.name.clone().unwrap_or_else(|| here.clone());
                if r.name.is_some() && !names.insert(name.clone()) {
                    return Err(format!("{here}: two limits are named {name:?}"));
                }
                Rule::Limited(Limit {
                    name,
                    requests_per_unit,
                    unit,
                    algorithm,
                    shadow: d.shadow_mode,
                    replaces: r.replaces.iter().map(|r| r.name.clone()).collect(),
                    detailed_metric: d.detailed_metric,
                })
            }
        };
        let mut child = Node {
            rule: Some(rule),
            ..Node::default()
        };
        build(&here, &d.descriptors, &mut child, names)?;
        let duplicate = if value.is_empty() {
            node.any.insert(d.key.clone(), child).is_some()
        } else if let Some(prefix) = value.strip_suffix('*') {
            let dup = node
                .prefix
                .iter()
                .any(|(k, p, _)| k == &d.key && p == prefix);
            node.prefix.push((d.key.clone(), prefix.to_owned(), child));
            dup
        } else {
            node.exact
                .insert((d.key.clone(), value.to_owned()), child)
                .is_some()
        };
        if duplicate {
            return Err(format!("{here}: the descriptor is defined twice"));
        }
    }
    Ok(())
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = "\
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: minute
      requests_per_unit: 50
      algorithm: fixed-window
    shadow_mode: true
  - key: remote_address
    descriptors:
      - key: path
        value: /api*
        rate_limit: {unit: hour, requests_per_unit: 10}
  - key: user
    rate_limit: {unlimited: true}
";

    fn limit(domain: &Domain, entries: &[(&str, &str)]) -> Option<Limit> {
        match domain.find(entries)?.rule {
            Rule::Limited(limit) => Some(limit.clone()),
            _ => None,
        }
    }

    #[test]
    fn nested_descriptors_match_as_the_reference_does() {
        let (name, domain) = parse(Path::new("a.yaml"), YAML).unwrap();
        assert_eq!(name, "mongo_cps");
        let users = limit(&domain, &[("database", "users")]).unwrap();
        assert_eq!((users.requests_per_unit, users.unit), (500, Unit::Second));
        assert_eq!(users.algorithm, AlgorithmKind::Gcra);
        assert_eq!(users.name, "mongo_cps.database_users");
        let default = limit(&domain, &[("database", "default")]).unwrap();
        assert!(default.shadow);
        assert_eq!(default.algorithm, AlgorithmKind::FixedWindow);
        assert!(limit(&domain, &[("database", "other")]).is_none());
        // Only where the last entry lands.
        assert!(domain.find(&[("remote_address", "1.2.3.4")]).is_some());
        assert!(limit(&domain, &[("remote_address", "1.2.3.4")]).is_none());
        let api = limit(
            &domain,
            &[("remote_address", "1.2.3.4"), ("path", "/api/x")],
        )
        .unwrap();
        assert_eq!(api.requests_per_unit, 10);
        assert!(limit(&domain, &[("remote_address", "1.2.3.4"), ("path", "/web")]).is_none());
        assert!(matches!(
            domain.find(&[("user", "u")]).unwrap().rule,
            Rule::Unlimited { .. }
        ));
    }

    #[test]
    fn unknown_fields_are_errors_with_their_line() {
        let bad = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      per_connection: true\n";
        let error = parse(Path::new("conf/d.yaml"), bad)
            .unwrap_err()
            .to_string();
        assert!(error.starts_with("conf/d.yaml:7:"), "{error}");
        assert!(error.contains("per_connection"), "{error}");
        let bad = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n";
        let error = parse(Path::new("d.yaml"), bad).unwrap_err().to_string();
        assert!(error.starts_with("d.yaml:5:"), "{error}");
        let bad = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra2}\n";
        let error = parse(Path::new("d.yaml"), bad).unwrap_err().to_string();
        assert!(
            error.contains("gcra2") && error.contains("fixed-window"),
            "{error}"
        );
        let bad = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n";
        let error = parse(Path::new("d.yaml"), bad).unwrap_err().to_string();
        assert!(error.contains("requests_per_unit"), "{error}");
        let bad = "domain: d\ndescriptors:\n  - key: a\n  - key: a\n";
        let error = parse(Path::new("d.yaml"), bad).unwrap_err().to_string();
        assert!(error.contains("twice"), "{error}");
        let bad = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 4000000000}\n";
        let error = parse(Path::new("d.yaml"), bad).unwrap_err().to_string();
        assert!(
            error.starts_with("d.yaml: d.a: 4000000000 per second"),
            "{error}"
        );
    }
}
