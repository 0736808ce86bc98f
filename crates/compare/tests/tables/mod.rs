//! Every Markdown table the report writes is well formed: a header, a
//! separator row with as many cells, and every row with as many cells again.
//! Checked on the committed `reports/README.md` here, and on the report the
//! end-to-end test generates.

use std::path::Path;

/// The cells of a table line: split on the pipes that are not escaped,
/// without the outer two.
fn cells(line: &str) -> usize {
    let mut count = 0usize;
    let mut escaped = false;
    for c in line.trim().chars() {
        match c {
            '\\' if !escaped => escaped = true,
            '|' if !escaped => count += 1,
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    count.saturating_sub(1)
}

fn is_separator(line: &str) -> bool {
    let inner = line.trim().trim_matches('|');
    !inner.is_empty()
        && inner.split('|').all(|cell| {
            let cell = cell.trim().trim_start_matches(':').trim_end_matches(':');
            !cell.is_empty() && cell.chars().all(|c| c == '-')
        })
}

/// Checks every table of `markdown`; returns how many there were.
pub(crate) fn check_tables(markdown: &str, origin: &str) -> usize {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut tables = 0;
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].trim_start().starts_with('|') {
            i += 1;
            continue;
        }
        let start = i;
        while i < lines.len() && lines[i].trim_start().starts_with('|') {
            i += 1;
        }
        let table = &lines[start..i];
        let at = |k: usize| format!("{origin}, line {}", start + k + 1);
        assert!(
            table.len() >= 2,
            "{}: a table without a separator row",
            at(0)
        );
        let width = cells(table[0]);
        assert!(width >= 1, "{}: an empty header", at(0));
        assert!(
            is_separator(table[1]),
            "{}: the second row is not a separator: {}",
            at(1),
            table[1]
        );
        for (k, row) in table.iter().enumerate() {
            assert_eq!(
                cells(row),
                width,
                "{}: {} cells where the header has {width}: {row}",
                at(k),
                cells(row)
            );
        }
        tables += 1;
    }
    tables
}

#[test]
fn the_checker_counts_cells_and_escapes() {
    assert_eq!(cells("| a | b |"), 2);
    assert_eq!(cells("| a \\| b | c |"), 2);
    assert!(is_separator("|---|:---:|"));
    assert!(!is_separator("| a | b |"));
    assert_eq!(
        check_tables("x\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", "t"),
        1
    );
}

#[test]
#[should_panic(expected = "3 cells where the header has 2")]
fn a_row_with_a_cell_too_many_fails() {
    check_tables("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n", "t");
}

#[test]
fn every_committed_table_has_the_headers_cells() {
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../reports/README.md");
    let Ok(readme) = std::fs::read_to_string(&committed) else {
        eprintln!("no committed report at {}", committed.display());
        return;
    };
    assert!(check_tables(&readme, "reports/README.md") > 0);
}
