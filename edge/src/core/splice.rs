//! Where an SSE reader stands against the shared live feed.
//!
//! The feed is a run of contiguous frames `[start, end)` of the stream. A
//! reader has sent everything before `pos`. For each frame it either skips
//! it (all of it was sent), sends it as it is (it starts exactly at `pos`),
//! or first reads `[pos, end)` itself (the frame straddles `pos`, or the
//! reader is behind it), so every byte goes out once and in order: no gap,
//! no duplicate.

/// What a reader does with one frame of the feed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Splice {
    /// Everything in the frame was sent already.
    Skip,
    /// The frame starts where the reader stands: send it.
    Send,
    /// Read `[from, to)` from the origin and send that instead.
    Fill { from: u64, to: u64 },
}

pub fn splice(pos: u64, start: u64, end: u64) -> Splice {
    if end <= pos && start < end {
        Splice::Skip
    } else if start == pos {
        Splice::Send
    } else if end > pos {
        Splice::Fill { from: pos, to: end }
    } else {
        // An empty frame (a close marker) behind the reader.
        Splice::Skip
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case() {
        assert_eq!(splice(10, 0, 10), Splice::Skip);
        assert_eq!(splice(10, 10, 20), Splice::Send);
        assert_eq!(splice(10, 5, 20), Splice::Fill { from: 10, to: 20 });
        assert_eq!(splice(10, 15, 20), Splice::Fill { from: 10, to: 20 });
        // Close markers are empty frames.
        assert_eq!(splice(10, 10, 10), Splice::Send);
        assert_eq!(splice(10, 5, 5), Splice::Skip);
        assert_eq!(splice(10, 12, 12), Splice::Fill { from: 10, to: 12 });
    }

    /// Whatever the frames, a reader that follows the decisions sends every
    /// byte once, in order.
    #[test]
    fn no_gap_no_duplicate() {
        let bounds = [0u64, 3, 7, 8, 15, 20];
        for start_pos in 0..=20 {
            let mut pos = start_pos;
            let mut sent = Vec::new();
            for w in bounds.windows(2) {
                match splice(pos, w[0], w[1]) {
                    Splice::Skip => {}
                    Splice::Send => {
                        sent.extend(w[0]..w[1]);
                        pos = w[1];
                    }
                    Splice::Fill { from, to } => {
                        sent.extend(from..to);
                        pos = to;
                    }
                }
            }
            assert_eq!(sent, (start_pos..20).collect::<Vec<_>>());
        }
    }
}
