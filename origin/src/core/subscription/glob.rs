//! A subscription's `pattern` (protocol §6.2): stream-root-relative paths
//! matched segment by segment, `*` standing for exactly one segment and
//! `**` for any number of them, none included.
//!
//! A wildcard is a whole segment: `ev*` is refused rather than read as a
//! literal, so that no pattern means something other than it looks. The
//! literal segments before the first wildcard are the pattern's prefix:
//! every stream it can match lies under it, which is what access to create
//! the subscription is checked against.

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN: usize = 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    One,
    Any,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    segments: Vec<Segment>,
}

impl Glob {
    pub fn parse(pattern: &str) -> Result<Glob, &'static str> {
        if pattern.is_empty() || pattern.len() > MAX_PATTERN {
            return Err("a pattern has 1 to 1024 bytes");
        }
        let mut segments = Vec::new();
        for seg in pattern.split('/') {
            segments.push(match seg {
                "" => return Err("a pattern has no empty segments (nor a leading or trailing /)"),
                "*" => Segment::One,
                "**" => Segment::Any,
                s if s.contains('*') => return Err("a wildcard is a whole segment: * or **"),
                "." | ".." => return Err("a pattern has no . or .. segments"),
                s if s.chars().any(char::is_control) => {
                    return Err("a pattern has no control characters")
                }
                s => Segment::Literal(s.to_owned()),
            });
        }
        if matches!(segments.first(), Some(Segment::Literal(s)) if s == shared::paths::CONTROL_SEGMENT)
        {
            return Err("paths under __ds are the server's own");
        }
        Ok(Glob { segments })
    }

    /// Whether the stream-root-relative `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        matches_from(&self.segments, &parts)
    }

    /// The literal segments before the first wildcard, joined (empty when
    /// the pattern begins with one), and whether the pattern is all literal.
    pub fn prefix(&self) -> (String, bool) {
        let literal: Vec<&str> = self
            .segments
            .iter()
            .map_while(|s| match s {
                Segment::Literal(l) => Some(l.as_str()),
                _ => None,
            })
            .collect();
        (literal.join("/"), literal.len() == self.segments.len())
    }
}

/// Segment matching by dynamic programming over (pattern, path) suffixes:
/// `ok[j]` says whether the pattern's remaining segments match the path
/// from segment `j`; `**` costs no backtracking, so any pattern runs in
/// pattern length times path length.
fn matches_from(pattern: &[Segment], path: &[&str]) -> bool {
    let n = path.len();
    // The empty pattern matches only the empty rest.
    let mut ok: Vec<bool> = (0..=n).map(|j| j == n).collect();
    for seg in pattern.iter().rev() {
        let mut next = vec![false; n + 1];
        for j in (0..=n).rev() {
            next[j] = match seg {
                // Zero segments (the rest matches here) or one more.
                Segment::Any => ok[j] || (j < n && next[j + 1]),
                Segment::One => j < n && ok[j + 1],
                Segment::Literal(l) => j < n && l == path[j] && ok[j + 1],
            };
        }
        ok = next;
    }
    ok[0]
}

#[cfg(test)]
mod tests {
    use super::Glob;

    fn m(p: &str, path: &str) -> bool {
        Glob::parse(p).unwrap().matches(path)
    }

    #[test]
    fn one_star_is_one_segment() {
        assert!(m("events/*", "events/a"));
        assert!(!m("events/*", "events"));
        assert!(!m("events/*", "events/a/b"));
        assert!(!m("events/*", "other/a"));
    }

    #[test]
    fn two_stars_are_any_number_of_segments() {
        assert!(m("events/**", "events"));
        assert!(m("events/**", "events/a/b/c"));
        assert!(m("**/log", "log"));
        assert!(m("**/log", "a/b/log"));
        assert!(!m("**/log", "a/b/log/x"));
        assert!(m("a/**/z/*", "a/z/q"));
        assert!(m("a/**/z/*", "a/b/c/z/q"));
        assert!(m("**", "anything/at/all"));
        // Many `**` cost no backtracking.
        let many = vec!["**"; 300].join("/") + "/x";
        let path = vec!["a"; 300].join("/") + "/y";
        assert!(!m(&many, &path));
    }

    #[test]
    fn refused_patterns() {
        for p in ["", "/a", "a/", "a//b", "ev*", "a/../b", "__ds/x", "a/\u{1}"] {
            assert!(Glob::parse(p).is_err(), "{p:?}");
        }
    }

    #[test]
    fn prefix_covers_every_match() {
        assert_eq!(
            Glob::parse("events/*").unwrap().prefix(),
            ("events".into(), false)
        );
        assert_eq!(Glob::parse("a/b").unwrap().prefix(), ("a/b".into(), true));
        assert_eq!(
            Glob::parse("**/x").unwrap().prefix(),
            (String::new(), false)
        );
    }
}
