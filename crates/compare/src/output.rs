//! Writing the report's files: text, JSON, and CSV from any
//! `#[derive(Serialize)]` row (its field names are the header).

use std::path::Path;

use serde::Serialize;

use crate::CompareError;

fn create_parent(path: &Path) -> Result<(), CompareError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| CompareError::Write {
            path: parent.to_owned(),
            source,
        })?;
    }
    Ok(())
}

/// Writes `contents` to `path`, creating its folder.
pub fn write_file(path: &Path, contents: &str) -> Result<(), CompareError> {
    create_parent(path)?;
    std::fs::write(path, contents).map_err(|source| CompareError::Write {
        path: path.to_owned(),
        source,
    })
}

/// Writes `rows` to `path` as CSV, with a header from the row's fields.
/// `None` is an empty field.
pub fn write_csv<R: Serialize>(
    path: &Path,
    rows: impl IntoIterator<Item = R>,
) -> Result<(), CompareError> {
    let fail = |e: csv::Error| CompareError::Write {
        path: path.to_owned(),
        source: std::io::Error::other(e),
    };
    create_parent(path)?;
    let mut writer = csv::Writer::from_path(path).map_err(fail)?;
    for row in rows {
        writer.serialize(row).map_err(fail)?;
    }
    writer.flush().map_err(|source| CompareError::Write {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row<'a> {
        name: &'a str,
        #[serde(rename = "at_0.95s")]
        at: usize,
        maybe: Option<f64>,
    }

    #[test]
    fn csv_has_a_header_quotes_and_empty_nones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub").join("t.csv");
        let rows = [
            Row {
                name: "a, \"b\"",
                at: 1,
                maybe: None,
            },
            Row {
                name: "c",
                at: 2,
                maybe: Some(2.5),
            },
        ];
        write_csv(&path, rows).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "name,at_0.95s,maybe\n\"a, \"\"b\"\"\",1,\nc,2,2.5\n"
        );
    }
}
