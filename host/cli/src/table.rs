//! Aligned tables for the terminal (comfy-table): plain, borderless
//! columns that line up whatever the width of their cells, and that stay
//! plain text when piped.

use comfy_table::presets::NOTHING;
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table};

/// A table with these column headers.
pub fn table(headers: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().map(|h| Cell::new(h.to_uppercase())));
    for (i, h) in headers.iter().enumerate() {
        if matches!(*h, "took" | "offset" | "ms")
            && let Some(c) = t.column_mut(i)
        {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    t
}

/// How long a guest call or an ask took, from its audit row (`""` when it
/// was not timed), as both the trace and the audit show it.
pub fn took_us(us: Option<i64>) -> String {
    us.map_or(String::new(), |us| format!("{:.3} ms", us as f64 / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let mut t = table(&["name", "took"]);
        t.add_row(vec!["a", "1 ms"]);
        t.add_row(vec!["a longer name", "1234 ms"]);
        let text = t.to_string();
        let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
        assert_eq!(lines.len(), 3);
        // The second column starts at the same place on every line.
        let col = lines[0].find("TOOK").unwrap();
        assert!(lines.iter().all(|l| l.len() >= col));
        assert_eq!(&lines[2][lines[2].len() - 7..], "1234 ms");
        assert_eq!(&lines[1][lines[1].len() - 4..], "1 ms");
        assert_eq!(lines[1].len(), lines[2].len());
    }
}
