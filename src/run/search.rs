//! Server-side tool search over deferred MCP tools (`defer_loading`): ranks tools by how well
//! their names and descriptions match a query. Pure; small top-k; deterministic order.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

/// A deferred tool the model can find.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub model_name: String,
    pub label: String,
    pub tool: String,
    pub description: String,
    pub parameters: std::sync::Arc<Value>,
}

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "to", "of", "for", "and", "or", "in", "on", "with", "by", "me", "my", "is",
    "it", "that", "this", "tool", "tools",
];

/// Lower-case word tokens: split on non-alphanumerics and camelCase boundaries.
pub fn tokens(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for ch in s.chars() {
        if ch.is_alphanumeric() {
            if ch.is_uppercase() && prev_lower && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = ch.is_lowercase() || ch.is_numeric();
            cur.extend(ch.to_lowercase());
        } else {
            prev_lower = false;
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out.retain(|t| !STOPWORDS.contains(&t.as_str()));
    out
}

/// The indexes of the best `k` candidates for `query`, best first; only those that match.
pub fn rank(query: &str, candidates: &[Candidate], k: usize) -> Vec<usize> {
    let mut q: Vec<String> = tokens(query);
    q.sort();
    q.dedup();
    if q.is_empty() {
        return Vec::new();
    }
    let docs: Vec<(HashSet<String>, HashSet<String>)> = candidates
        .iter()
        .map(|c| {
            let name: HashSet<String> = tokens(&c.tool)
                .into_iter()
                .chain(tokens(&c.label))
                .collect();
            (name, tokens(&c.description).into_iter().collect())
        })
        .collect();
    let n = candidates.len() as f64;
    let mut df: HashMap<&str, f64> = HashMap::new();
    for term in &q {
        let count = docs
            .iter()
            .filter(|(name, desc)| name.contains(term) || desc.contains(term))
            .count();
        df.insert(term, count as f64);
    }
    let mut scored: Vec<(f64, usize)> = docs
        .iter()
        .enumerate()
        .map(|(i, (name, desc))| {
            let score: f64 = q
                .iter()
                .map(|term| {
                    let idf = ((n + 1.0) / (df[term.as_str()] + 0.5)).ln().max(0.05);
                    if name.contains(term) {
                        3.0 * idf
                    } else if desc.contains(term) {
                        idf
                    } else if term.len() >= 4
                        && name.iter().chain(desc.iter()).any(|t| {
                            t.starts_with(term.as_str())
                                || term.starts_with(t.as_str()) && t.len() >= 4
                        })
                    {
                        0.5 * idf
                    } else {
                        0.0
                    }
                })
                .sum();
            (score, i)
        })
        .filter(|(s, _)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| candidates[a.1].model_name.cmp(&candidates[b.1].model_name))
    });
    scored.into_iter().take(k).map(|(_, i)| i).collect()
}

/// The query of a tool-search call: its `query` argument, or every string argument joined.
pub fn query_of(arguments: &Value) -> String {
    match arguments.get("query").and_then(Value::as_str) {
        Some(q) => q.to_string(),
        None => match arguments {
            Value::Object(o) => o
                .values()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "),
            Value::String(s) => s.clone(),
            _ => String::new(),
        },
    }
}
