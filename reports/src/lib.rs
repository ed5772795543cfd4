//! The rehearsal report (SPEC §6): the [`model`] of `report.json`, and what
//! a run folder holds besides it: `report.html` (one self-contained page
//! with plots, see [`html`]), `summary.md` (for CI logs, see
//! [`markdown`]) and `junit.xml` (the verdicts as JUnit XML for CI's test
//! reporters, see [`junit`]). [`compare()`] sets two runs side by side; [`merge()`]
//! joins the reports of a sharded load's shards into one, percentiles from
//! their HDR histograms ([`hdr`]), verdicts on the load judged again
//! ([`verdicts`]).

pub mod compare;
pub mod figures;
pub mod gate;
pub mod hdr;
pub mod html;
pub mod junit;
pub mod markdown;
pub mod merge;
pub mod model;
pub mod svg;
pub mod verdicts;
/// The integration tests' XML well-formedness check, for the unit tests too.
#[cfg(test)]
#[path = "../tests/common/xml.rs"]
mod xml_check;

use std::fs;
use std::path::{Path, PathBuf};

pub use compare::{Comparison, compare};
pub use merge::{MergeError, merge};
pub use model::{
    Fault, InvariantResult, LevelFigures, LoadFigures, MailFigures, Merged, Phase, QueueFigures,
    Relaxed, Report, SCHEMA, SaleFigures, Sample, ShardInfo, TransactionFigures, Verdict,
};

/// The report's file name in a run folder.
pub const REPORT_JSON: &str = "report.json";
/// The HTML page's file name in a run folder.
pub const REPORT_HTML: &str = "report.html";
/// The Markdown summary's file name in a run folder.
pub const SUMMARY_MD: &str = "summary.md";
/// The JUnit XML's file name in a run folder.
pub use junit::JUNIT_XML;

/// Why a report could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a report (invalid JSON, or JSON of another shape).
    #[error("{} is not a valid report ({line}:{column}): {source}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// A file or folder could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The report could not be serialised (a non-string map key in the profile).
    #[error("cannot serialise the report: {0}")]
    Serialise(serde_json::Error),
    /// Shard reports that cannot be merged.
    #[error("cannot merge: {0}")]
    Merge(#[from] MergeError),
    /// A `--fail-on` gate that names no figure, or one only one run has.
    #[error("cannot judge the gates: {0}")]
    Gate(#[from] gate::GateError),
}

impl ReportError {
    /// Whether the input was at fault (missing file, invalid JSON) rather
    /// than the writing.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            Self::Read { .. } | Self::Json { .. } | Self::Merge(_) | Self::Gate(_)
        )
    }
}

/// The files a run folder got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// `report.json` (`None` when only re-rendered from it).
    pub json: Option<PathBuf>,
    /// `report.html`.
    pub html: PathBuf,
    /// `summary.md`.
    pub markdown: PathBuf,
    /// `junit.xml`.
    pub junit: PathBuf,
}

/// Writes `contents` to `path`.
fn write(path: PathBuf, contents: &str) -> Result<PathBuf, ReportError> {
    match fs::write(&path, contents) {
        Ok(()) => Ok(path),
        Err(source) => Err(ReportError::Write { path, source }),
    }
}

/// Creates `dir` and its parents.
fn create_dir(dir: &Path) -> Result<(), ReportError> {
    fs::create_dir_all(dir).map_err(|source| ReportError::Write {
        path: dir.to_owned(),
        source,
    })
}

/// Writes `report.html`, `summary.md` and `junit.xml` for `report` into
/// `dir`; `json` is the report's file, if written.
fn render_into(dir: &Path, report: &Report, json: Option<PathBuf>) -> Result<Written, ReportError> {
    let html = write(dir.join(REPORT_HTML), &html::render_report(report))?;
    let markdown = write(dir.join(SUMMARY_MD), &markdown::render_summary(report))?;
    let junit = write(dir.join(JUNIT_XML), &junit::render_report(report))?;
    Ok(Written {
        json,
        html,
        markdown,
        junit,
    })
}

/// Writes a run folder: `report.json` (pretty), `report.html`,
/// `summary.md` and `junit.xml`, creating `dir` if needed.
pub fn write_run(dir: &Path, report: &Report) -> Result<Written, ReportError> {
    create_dir(dir)?;
    let mut json = serde_json::to_string_pretty(report).map_err(ReportError::Serialise)?;
    json.push('\n');
    let json = write(dir.join(REPORT_JSON), &json)?;
    render_into(dir, report, Some(json))
}

/// Where the report of `path` is: `path/report.json` for a folder, else `path`.
pub fn report_path(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(REPORT_JSON)
    } else {
        path.to_owned()
    }
}

/// Parses a report from JSON text; `path` only names it in errors. Unknown
/// fields are ignored and missing optional ones default.
pub fn parse_report(text: &str, path: &Path) -> Result<Report, ReportError> {
    serde_json::from_str(text).map_err(|source| ReportError::Json {
        path: path.to_owned(),
        line: source.line(),
        column: source.column(),
        source,
    })
}

/// Reads the report of a run folder or of a `report.json` file.
pub fn load_report(path: &Path) -> Result<Report, ReportError> {
    let path = report_path(path);
    let text = fs::read_to_string(&path).map_err(|source| ReportError::Read {
        path: path.clone(),
        source,
    })?;
    parse_report(&text, &path)
}

/// Re-renders `report.html`, `summary.md` and `junit.xml` beside an
/// existing report:
/// `dir` is a run folder or a report's JSON file (the pages go beside it).
pub fn render_dir(dir: &Path) -> Result<Written, ReportError> {
    let report = load_report(dir)?;
    let json = report_path(dir);
    let out = match json.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    render_into(&out, &report, None)
}
