//! Model-facing function names for MCP tools: unique across the request, valid for upstreams
//! (`^[a-zA-Z0-9_-]{1,64}$`), readable (`label__tool`), and never parsed back: the caller keeps
//! the map from model name to (server label, original tool name).

use std::collections::HashSet;

/// Longest function name upstreams accept.
const MAX_NAME: usize = 64;
/// Hex digits of the disambiguating hash suffix.
const HASH_DIGITS: usize = 8;

/// For every `(server label, tool names)` returns `(model name, label, original tool name)`, in
/// order. Names avoid each other and `reserved` (the request's own function names).
///
/// A name is `label__tool` when that is already valid and free; otherwise characters outside
/// `[A-Za-z0-9_-]` become `_`, the name is cut to fit, and `_` plus a stable 8-digit hash of the
/// original (label, tool) pair is appended, so lossy or colliding names never coincide.
pub fn model_names(
    servers: &[(String, Vec<String>)],
    reserved: &HashSet<String>,
) -> Vec<(String, String, String)> {
    let mut taken: HashSet<String> = reserved.clone();
    let mut out = Vec::new();
    // First pass: names that are exact and valid keep their readable form, so a tool's name does
    // not depend on whether a lossy neighbour came first.
    let mut chosen: Vec<Vec<Option<String>>> = Vec::with_capacity(servers.len());
    for (label, tools) in servers {
        let mut row = Vec::with_capacity(tools.len());
        for tool in tools {
            let plain = format!("{label}__{tool}");
            if valid(&plain) && taken.insert(plain.clone()) {
                row.push(Some(plain));
            } else {
                row.push(None);
            }
        }
        chosen.push(row);
    }
    for ((label, tools), row) in servers.iter().zip(chosen) {
        for (tool, name) in tools.iter().zip(row) {
            let name = match name {
                Some(n) => n,
                None => hashed(label, tool, &mut taken),
            };
            out.push((name, label.clone(), tool.clone()));
        }
    }
    out
}

fn valid(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn hashed(label: &str, tool: &str, taken: &mut HashSet<String>) -> String {
    let base = sanitize(&format!("{label}__{tool}"));
    let keep = MAX_NAME - 1 - HASH_DIGITS;
    let stem = &base[..base.len().min(keep)];
    for salt in 0u32.. {
        let h = fnv1a(&[
            label.as_bytes(),
            b"\0",
            tool.as_bytes(),
            b"\0",
            &salt.to_le_bytes(),
        ]);
        let name = format!("{stem}_{:0width$x}", h & 0xffff_ffff, width = HASH_DIGITS);
        if taken.insert(name.clone()) {
            return name;
        }
    }
    unreachable!("u32 salts exhausted")
}

/// FNV-1a 64: stable across builds and platforms.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_names_get_a_hash_whatever_the_order() {
        let s = vec![(
            "srv".to_string(),
            vec!["a.b".to_string(), "a_b".to_string()],
        )];
        let n = model_names(&s, &HashSet::new());
        assert_eq!(n[1].0, "srv__a_b");
        assert!(n[0].0.starts_with("srv__a_b_") && n[0].0.len() == "srv__a_b_".len() + 8);
    }
}
