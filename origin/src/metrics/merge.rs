//! One Prometheus text from several: a region origin runs a store per
//! partition it serves, each with its own metrics, and `/metrics` shows
//! the origin's sums (a series' values added, each `# TYPE` line once),
//! in the order the series first appear. Counters, gauges and histogram
//! buckets all add up so: requests, bytes, streams, open tails.

use std::collections::HashMap;
use std::fmt::Write as _;

/// The sum of `texts`, series by series.
pub fn merge(texts: &[String]) -> String {
    if let [one] = texts {
        return one.clone();
    }
    // Each line in first-seen order: a comment, or a series and its sum.
    let mut lines: Vec<(String, Option<f64>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for text in texts {
        for line in text.lines() {
            let (key, value) = match line.rsplit_once(' ') {
                Some((series, v)) if !line.starts_with('#') => match v.parse::<f64>() {
                    Ok(v) => (series, Some(v)),
                    Err(_) => (line, None),
                },
                _ => (line, None),
            };
            match index.get(key) {
                Some(&i) => {
                    if let (Some(sum), Some(v)) = (&mut lines[i].1, value) {
                        *sum += v;
                    }
                }
                None => {
                    index.insert(key.to_owned(), lines.len());
                    lines.push((key.to_owned(), value));
                }
            }
        }
    }
    let mut out = String::new();
    for (key, value) in lines {
        match value {
            Some(v) if v.fract() == 0.0 && v.abs() < 9.0e15 => {
                let _ = writeln!(out, "{key} {}", v as i64);
            }
            Some(v) => {
                let _ = writeln!(out, "{key} {v}");
            }
            None => {
                let _ = writeln!(out, "{key}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_add_up_and_types_appear_once() {
        let a = "# TYPE ds_streams gauge\nds_streams 3\n# TYPE r counter\nr{route=\"a\"} 1\n"
            .to_owned();
        let b = "# TYPE ds_streams gauge\nds_streams 4\n# TYPE r counter\nr{route=\"b\"} 2\nr{route=\"a\"} 5\n".to_owned();
        assert_eq!(
            merge(&[a, b]),
            "# TYPE ds_streams gauge\nds_streams 7\n# TYPE r counter\nr{route=\"a\"} 6\nr{route=\"b\"} 2\n"
        );
    }

    #[test]
    fn one_text_is_itself_and_none_is_empty() {
        assert_eq!(merge(&["x 1\n".to_owned()]), "x 1\n");
        assert_eq!(merge(&[]), "");
    }

    #[test]
    fn fractions_stay_fractions() {
        assert_eq!(merge(&["x 0.5\n".into(), "x 0.25\n".into()]), "x 0.75\n");
    }
}
