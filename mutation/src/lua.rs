//! Mutants of a Lua script, generated from its text (cargo-mutants does not
//! read Lua). Each mutant changes one place on one line with one of a few
//! operators that model the slips a ledger script can make:
//!
//! - `==` ↔ `~=`: a comparison flipped;
//! - `<` → `<=`, `<=` → `<`, `>` → `>=`, `>=` → `>`: an off-by-one bound;
//! - ` and ` ↔ ` or `: a condition loosened or tightened;
//! - `not x` → `x`: a negation dropped;
//! - `if c then` → `if false then`: a guard (or a branch) that never fires;
//! - an increment swapped: `HINCRBY …, 1)` ↔ `…, -1)`, `+ 1` ↔ `- 1`;
//! - a `redis.call(…)` statement (a write) dropped.
//!
//! Comments and the inside of string literals are never mutated. Pure: the
//! runner ([`crate::lua_run`]) writes each mutant, runs the tests, restores.

use std::fmt;

/// One mutant: line `line` (1-based) of the script becomes `mutated`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LuaMutant {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column of the change on that line.
    pub column: usize,
    /// Which operator made it.
    pub operator: &'static str,
    /// The line as written.
    pub original: String,
    /// The line as mutated.
    pub mutated: String,
}

impl fmt::Display for LuaMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{} {}: `{}` → `{}`",
            self.line,
            self.column,
            self.operator,
            self.original.trim(),
            self.mutated.trim()
        )
    }
}

/// Every mutant of `source`, in line then column order.
pub fn mutants(source: &str) -> Vec<LuaMutant> {
    let mut out = Vec::new();
    for (i, line) in source.lines().enumerate() {
        let code_end = code_end(line);
        let code = &line[..code_end];
        if code.trim().is_empty() {
            continue;
        }
        let mut at = |column: usize, operator: &'static str, mutated: String| {
            out.push(LuaMutant {
                line: i + 1,
                column: column + 1,
                operator,
                original: line.to_owned(),
                mutated,
            });
        };
        for (pos, from, to, operator) in operators(code) {
            let mutated = format!("{}{}{}", &line[..pos], to, &line[pos + from.len()..]);
            at(pos, operator, mutated);
        }
        let trimmed = code.trim_start();
        let indent = code.len() - trimmed.len();
        if let Some(cond) = trimmed
            .strip_prefix("if ")
            .and_then(|rest| rest.trim_end().strip_suffix(" then"))
        {
            // a guard that never fires (a whole-line `if … then`, not a one-liner)
            if !cond.trim().is_empty() && cond.trim() != "false" {
                at(
                    indent,
                    "guard never fires",
                    format!("{}if false then", &line[..indent]),
                );
            }
        }
        if trimmed.starts_with("redis.call(") && trimmed.trim_end().ends_with(')') {
            at(
                indent,
                "write dropped",
                format!("{}-- dropped: {}", &line[..indent], trimmed),
            );
        }
    }
    out.sort_by_key(|m| (m.line, m.column));
    out
}

/// A Lua mutant known not to change behaviour, with the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Equivalent {
    /// The script's file name (`admit.lua`).
    pub script: String,
    /// The mutated line, trimmed.
    pub mutated: String,
    /// Why no test can tell it from the original.
    pub reason: String,
}

/// The equivalent mutants of a list (`mutation/lua-equivalent.txt`): one a
/// line, `script :: mutated line :: reason`; `#` starts a comment. Matched
/// on the text, not the line number, so an entry survives edits above it.
pub fn parse_equivalents(text: &str) -> Result<Vec<Equivalent>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(" :: ").map(str::trim).collect();
        match fields.as_slice() {
            [script, mutated, reason]
                if !script.is_empty() && !mutated.is_empty() && !reason.is_empty() =>
            {
                out.push(Equivalent {
                    script: (*script).to_owned(),
                    mutated: (*mutated).to_owned(),
                    reason: (*reason).to_owned(),
                });
            }
            _ => {
                return Err(format!(
                    "line {}: not `script :: mutated line :: reason`: {line}",
                    i + 1
                ));
            }
        }
    }
    Ok(out)
}

impl Equivalent {
    /// Whether `m`, a mutant of `script`, is this one.
    pub fn matches(&self, script: &str, m: &LuaMutant) -> bool {
        self.script == script && self.mutated == m.mutated.trim()
    }
}

/// `source` with `m` applied (its line replaced; line endings kept).
pub fn apply(source: &str, m: &LuaMutant) -> String {
    let mut out = String::with_capacity(source.len() + 16);
    for (i, line) in source.split_inclusive('\n').enumerate() {
        if i + 1 == m.line {
            let body = line.trim_end_matches(['\n', '\r']);
            assert_eq!(body, m.original, "mutant of another text");
            out.push_str(&m.mutated);
            out.push_str(&line[body.len()..]);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Where a line's code ends: at a `--` comment outside a string, else the end.
fn code_end(line: &str) -> usize {
    let bytes = line.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(_) if b == b'\\' => i += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => return i,
            None => {}
        }
        i += 1;
    }
    bytes.len()
}

/// Whether byte `i` of `code` is inside a string literal.
fn in_string(code: &str, i: usize) -> bool {
    let bytes = code.as_bytes();
    let mut quote: Option<u8> = None;
    let mut j = 0;
    while j < i {
        let b = bytes[j];
        match quote {
            Some(_) if b == b'\\' => j += 1,
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None => {}
        }
        j += 1;
    }
    quote.is_some()
}

/// The token-level operators' matches in `code`: (byte position, matched
/// text, replacement, operator name).
fn operators(code: &str) -> Vec<(usize, &'static str, &'static str, &'static str)> {
    // longer tokens first, so `>=` is not also seen as `>`
    const TABLE: &[(&str, &str, &str)] = &[
        ("==", "~=", "comparison flipped"),
        ("~=", "==", "comparison flipped"),
        (">=", ">", "bound moved"),
        ("<=", "<", "bound moved"),
        (">", ">=", "bound moved"),
        ("<", "<=", "bound moved"),
        (" and ", " or ", "condition loosened"),
        (" or ", " and ", "condition tightened"),
        ("not ", "", "negation dropped"),
        (", 1)", ", -1)", "increment swapped"),
        (", -1)", ", 1)", "increment swapped"),
        ("+ 1", "- 1", "increment swapped"),
        ("- 1", "+ 1", "increment swapped"),
    ];
    let bytes = code.as_bytes();
    let mut taken = vec![false; code.len()];
    let mut found = Vec::new();
    for &(from, to, operator) in TABLE {
        let mut start = 0;
        while let Some(off) = code[start..].find(from) {
            let pos = start + off;
            start = pos + 1;
            if taken[pos..pos + from.len()].iter().any(|t| *t) || in_string(code, pos) {
                continue;
            }
            // a whole word for `not` (not the end of `cannot`), and `- 1`
            // not the tail of `-1` handled above
            if from == "not "
                && pos > 0
                && (bytes[pos - 1].is_ascii_alphanumeric() || bytes[pos - 1] == b'_')
            {
                continue;
            }
            // `<`/`>` next to `=` belong to `<=`/`>=`/`==` handled above
            if (from == ">" || from == "<") && bytes.get(pos + 1) == Some(&b'=') {
                continue;
            }
            taken[pos..pos + from.len()]
                .iter_mut()
                .for_each(|t| *t = true);
            found.push((pos, from, to, operator));
        }
    }
    found.sort_by_key(|f| f.0);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutated_lines(src: &str) -> Vec<String> {
        mutants(src).into_iter().map(|m| m.mutated).collect()
    }

    #[test]
    fn flips_comparisons_and_moves_bounds_once_each() {
        assert_eq!(
            mutated_lines("if count >= cap then"),
            vec!["if false then", "if count > cap then"]
        );
        assert_eq!(
            mutated_lines("if a ~= '1' or b == 0 then"),
            vec![
                "if false then",
                "if a == '1' or b == 0 then",
                "if a ~= '1' and b == 0 then",
                "if a ~= '1' or b ~= 0 then",
            ]
        );
        assert_eq!(mutated_lines("x = y < z"), vec!["x = y <= z"]);
    }

    #[test]
    fn leaves_comments_and_strings_alone() {
        assert!(mutants("-- if a == b then").is_empty());
        assert!(mutants("local s = 'a == b and not c'").is_empty());
        assert_eq!(
            mutated_lines("return x == 'a--b' -- x == y"),
            vec!["return x ~= 'a--b' -- x == y"]
        );
    }

    #[test]
    fn drops_negations_writes_and_swaps_increments() {
        assert_eq!(
            mutated_lines("if not cap then"),
            vec!["if false then", "if cap then"]
        );
        assert_eq!(
            mutated_lines("  redis.call('HINCRBY', COUNTS, level, -1)"),
            vec![
                "  -- dropped: redis.call('HINCRBY', COUNTS, level, -1)",
                "  redis.call('HINCRBY', COUNTS, level, 1)",
            ]
        );
        assert_eq!(mutated_lines("n = #f + 1"), vec!["n = #f - 1"]);
        // an assignment from a call is not a dropped write
        assert!(mutated_lines("local v = redis.call('GET', K)").is_empty());
        // `cannot` is no negation
        assert!(mutants("local cannot = 1").is_empty());
    }

    #[test]
    fn equivalents_match_on_script_and_mutated_text_and_need_a_reason() {
        let list = parse_equivalents(
            "# comment\n\nadmit.lua :: if count >= peak then :: same value written\n",
        )
        .unwrap();
        assert_eq!(list.len(), 1);
        let ms = mutants("if count > peak then");
        let bound = ms.iter().find(|m| m.operator == "bound moved").unwrap();
        assert!(list[0].matches("admit.lua", bound));
        assert!(!list[0].matches("extend.lua", bound));
        let guard = ms
            .iter()
            .find(|m| m.operator == "guard never fires")
            .unwrap();
        assert!(!list[0].matches("admit.lua", guard));
        assert!(parse_equivalents("admit.lua :: if x then").is_err());
        assert!(parse_equivalents("admit.lua :: if x then :: ").is_err());
    }

    #[test]
    fn apply_replaces_exactly_the_mutated_line() {
        let src = "local a = 1\nif a == 1 then\r\n  return a\nend\n";
        let ms = mutants(src);
        let flip = ms
            .iter()
            .find(|m| m.operator == "comparison flipped")
            .unwrap();
        assert_eq!(flip.line, 2);
        assert_eq!(flip.column, 6);
        assert_eq!(
            apply(src, flip),
            "local a = 1\nif a ~= 1 then\r\n  return a\nend\n"
        );
    }
}
