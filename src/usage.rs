//! `responses-relay usage`: a store's usage tallies (runs, tokens and MCP calls per tenant, UTC
//! day and model; see [`crate::store::usage`]) as an operator reads them: an aligned table with a
//! total line, or one JSON array.

use serde::Serialize;

use crate::store::usage::{Tally, UsageRow};

/// The column heads of the table, in order.
const HEADS: [&str; 8] = [
    "tenant",
    "day",
    "model",
    "runs",
    "input tokens",
    "output tokens",
    "total tokens",
    "mcp calls",
];

/// The rows as a table: text columns left-aligned, counts right-aligned, two spaces apart, then a
/// `total` line summing every row.
pub fn text(rows: &[UsageRow]) -> String {
    let mut total = Tally::default();
    let mut lines: Vec<[String; 8]> = vec![HEADS.map(str::to_string)];
    let cells = |tenant: &str, day: &str, model: &str, t: &Tally| {
        [
            tenant.to_string(),
            day.to_string(),
            model.to_string(),
            t.runs.to_string(),
            t.input_tokens.to_string(),
            t.output_tokens.to_string(),
            t.input_tokens.saturating_add(t.output_tokens).to_string(),
            t.mcp_calls.to_string(),
        ]
    };
    for r in rows {
        total.add(&r.tally);
        lines.push(cells(&r.tenant, &r.day, &r.model, &r.tally));
    }
    lines.push(cells("total", "", "", &total));
    let mut widths = [0usize; 8];
    for line in &lines {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for line in &lines {
        let mut row = String::new();
        for (i, (cell, w)) in line.iter().zip(widths).enumerate() {
            if i > 0 {
                row.push_str("  ");
            }
            if i < 3 {
                row.push_str(&format!("{cell:<w$}"));
            } else {
                row.push_str(&format!("{cell:>w$}"));
            }
        }
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

/// A row as JSON, its fields in the table's order.
#[derive(Serialize)]
struct JsonRow<'a> {
    tenant: &'a str,
    day: &'a str,
    model: &'a str,
    runs: u64,
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
    mcp_calls: u64,
}

/// The rows as one JSON array (and a newline): each row's tenant, day, model and counts.
pub fn json(rows: &[UsageRow]) -> String {
    let rows: Vec<JsonRow<'_>> = rows
        .iter()
        .map(|r| JsonRow {
            tenant: &r.tenant,
            day: &r.day,
            model: &r.model,
            runs: r.tally.runs,
            input_tokens: r.tally.input_tokens,
            output_tokens: r.tally.output_tokens,
            total_tokens: r.total_tokens(),
            mcp_calls: r.tally.mcp_calls,
        })
        .collect();
    let mut out = serde_json::to_string(&rows).expect("serializes");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(tenant: &str, model: &str, runs: u64, input: u64, output: u64, mcp: u64) -> UsageRow {
        UsageRow {
            tenant: tenant.into(),
            day: "2024-03-10".into(),
            model: model.into(),
            tally: Tally {
                runs,
                input_tokens: input,
                output_tokens: output,
                mcp_calls: mcp,
            },
        }
    }

    #[test]
    fn the_table_aligns_its_columns_and_ends_with_the_total() {
        let rows = [
            row("team-a", "gpt-4o", 12, 1200, 345, 3),
            row("b", "m", 1, 5, 7, 0),
        ];
        assert_eq!(
            text(&rows),
            "\
tenant  day         model   runs  input tokens  output tokens  total tokens  mcp calls
team-a  2024-03-10  gpt-4o    12          1200            345          1545          3
b       2024-03-10  m          1             5              7            12          0
total                         13          1205            352          1557          3
"
        );
    }

    #[test]
    fn json_is_one_array_of_rows_with_their_total_tokens() {
        let out = json(&[row("a", "m", 2, 10, 4, 1)]);
        assert!(out.starts_with(r#"[{"tenant":"a","day":"2024-03-10","model":"m","runs":2,"#));
        assert!(out.ends_with("]\n"));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v,
            json!([{"tenant": "a", "day": "2024-03-10", "model": "m", "runs": 2,
                "input_tokens": 10, "output_tokens": 4, "total_tokens": 14, "mcp_calls": 1}])
        );
        assert_eq!(json(&[]), "[]\n");
    }
}
