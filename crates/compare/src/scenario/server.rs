//! ratelab-server beside envoyproxy/ratelimit, from the committed
//! measurements: `bench/server-vs-reference.json` (`just bench-server`,
//! whose Markdown beside it states the terms) and the differential test's
//! last run as the repository's README records it. Nothing here is
//! measured by this run: the reference is neither contained nor built here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::ScenarioName;
use crate::charts::Canvas;
use crate::markdown::{num, table};
use crate::output::write_csv;
use crate::report::Part;
use crate::{CompareError, Context};

/// Where the measurements are, beside the bench summary.
pub const JSON: &str = "server-vs-reference.json";
/// Their terms, written with them.
pub const MARKDOWN: &str = "server-vs-reference.md";
/// The service the others are compared with.
pub const REFERENCE: &str = "envoyproxy/ratelimit";

/// One row of the committed measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The service.
    pub service: String,
    /// Its backend.
    pub backend: String,
    /// One hot key or many.
    pub keys: String,
    /// Answers per second, the median of the rounds.
    pub answers_per_second: f64,
    /// Against the reference's in the same round, the median.
    pub ratio_to_reference: f64,
    /// The service's CPU per answer, µs.
    pub cpu_us_per_answer: f64,
    /// Latency, µs.
    pub p50_us: f64,
    /// Latency, µs.
    pub p99_us: f64,
    /// Failed calls.
    pub errors: u64,
}

/// The section's data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerReference {
    /// The measurements' terms: the first paragraph of their Markdown.
    pub terms: String,
    /// Where they come from, relative to the report.
    pub source: String,
    /// The rows.
    pub rows: Vec<Row>,
    /// The differential test's last run, as the README records it.
    pub differential: Option<String>,
}

impl ServerReference {
    /// The reference's row and ratelab-server's on the same Redis, for
    /// `keys`.
    pub fn pair(&self, keys: &str) -> Option<(&Row, &Row)> {
        let reference = self
            .rows
            .iter()
            .find(|r| r.keys == keys && r.service == REFERENCE)?;
        let ours = self.rows.iter().find(|r| {
            r.keys == keys && r.service == "ratelab-server" && r.backend.contains("the same")
        })?;
        Some((reference, ours))
    }
}

/// The first paragraph after the title of `markdown`.
fn terms(markdown: &str) -> String {
    markdown
        .split("\n\n")
        .map(str::trim)
        .find(|p| !p.is_empty() && !p.starts_with('#'))
        .unwrap_or("")
        .replace('\n', " ")
}

/// The sentence of `readme` that records the differential test's last run.
fn differential(readme: &str) -> Option<String> {
    let text = readme.replace('\n', " ");
    let start = text.find("Its last run: ")?;
    let rest = &text[start + "Its last run: ".len()..];
    // The record ends with the paragraph.
    let end = rest
        .find("  ")
        .or_else(|| rest.find("###"))
        .unwrap_or(rest.len());
    Some(rest[..end].trim().to_owned())
}

/// Reads the measurements from `dir` and the README from `workspace`.
pub fn read(dir: &Path, workspace: &Path) -> Result<ServerReference, String> {
    let json = dir.join(JSON);
    let rows: Vec<Row> =
        serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| format!("{JSON}: {e}"))?)
            .map_err(|e| format!("{JSON}: {e}"))?;
    let markdown = std::fs::read_to_string(dir.join(MARKDOWN)).unwrap_or_default();
    let readme = std::fs::read_to_string(workspace.join("README.md")).unwrap_or_default();
    Ok(ServerReference {
        terms: terms(&markdown),
        source: format!("bench/{JSON}"),
        rows,
        differential: differential(&readme),
    })
}

/// The workspace the report is generated in.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads the committed measurements beside the bench summary.
pub fn run(ctx: &Context<'_>) -> Option<ServerReference> {
    let dir = ctx
        .config
        .bench_summary
        .as_ref()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_else(|| workspace().join("reports/bench"));
    match read(&dir, &workspace()) {
        Ok(found) => Some(found),
        Err(why) => {
            ctx.skip(
                ScenarioName::ServerReference,
                "ratelab-server beside envoyproxy/ratelimit",
                &format!("no committed measurements ({why})"),
                "run `just bench-server`",
            );
            None
        }
    }
}

impl Part for ServerReference {
    fn scenario(&self) -> ScenarioName {
        ScenarioName::ServerReference
    }

    fn draw(&self, _: &mut Canvas) -> Result<(), CompareError> {
        Ok(())
    }

    fn write_data(&self, dir: &Path) -> Result<(), CompareError> {
        write_csv(&dir.join("server-vs-reference.csv"), &self.rows)
    }

    fn section(&self, _: &[String]) -> String {
        let mut out = format!(
            "## {}\n\n**Not measured by this run**: from [`{}`]({}), written by `just bench-server` (the reference is neither contained nor built here). Its terms, as written with it: {}\n\n",
            ScenarioName::ServerReference.title(),
            self.source,
            self.source,
            self.terms
        );
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                vec![
                    r.service.clone(),
                    r.backend.clone(),
                    r.keys.clone(),
                    num(r.answers_per_second, 0),
                    num(r.ratio_to_reference, 2),
                    num(r.cpu_us_per_answer, 1),
                    num(r.p50_us, 0),
                    num(r.p99_us, 0),
                    r.errors.to_string(),
                ]
            })
            .collect();
        out += &table(
            &[
                "Service",
                "Backend",
                "Keys",
                "Answers per second",
                "/ the reference",
                "Server CPU µs per answer",
                "p50 µs",
                "p99 µs",
                "Errors",
            ],
            &rows,
        );
        let pairs: Vec<String> = ["one hot key", "10,000 keys"]
            .into_iter()
            .filter_map(|keys| {
                let (reference, ours) = self.pair(keys)?;
                Some(format!(
                    "on {keys}, ratelab-server on the same Redis answered {}× the reference's answers per second, at {} µs of CPU per answer against {} ({}× less)",
                    num(ours.ratio_to_reference, 2),
                    num(ours.cpu_us_per_answer, 1),
                    num(reference.cpu_us_per_answer, 1),
                    num(reference.cpu_us_per_answer / ours.cpu_us_per_answer.max(f64::MIN_POSITIVE), 1),
                ))
            })
            .collect();
        if !pairs.is_empty() {
            let _ = writeln!(out, "\n**What it shows:** {}.", pairs.join("; "));
        }
        match &self.differential {
            Some(record) => {
                let _ = writeln!(
                    out,
                    "\n**Answers, compared.** The differential test (`crates/server/tests/differential/`) drives both services with the same YAML, environment and requests and compares every answer and statistic; not run here (it needs the reference). Its last run, as the repository's README records it: {record}"
                );
            }
            None => out += "\nThe differential test's last run is not recorded in the README.\n",
        }
        out += "\n";
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_measurements_read_with_their_terms_and_the_differential_record() {
        let root = workspace();
        let found = read(&root.join("reports/bench"), &root).unwrap();
        assert!(found.pair("one hot key").is_some(), "{found:?}");
        assert!(found.terms.contains("rounds"), "{}", found.terms);
        let record = found.differential.unwrap();
        assert!(
            record.contains("answers") && record.ends_with('.'),
            "{record}"
        );
    }

    #[test]
    fn the_differential_record_is_its_paragraph() {
        let readme = "statsd. Its last run: 9 cases,\n3 answers: none differed.\n\n### Next";
        assert_eq!(
            differential(readme).as_deref(),
            Some("9 cases, 3 answers: none differed.")
        );
    }
}
