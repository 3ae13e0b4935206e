//! A producer's state between runs of `ds append --producer`: the epoch, the
//! next sequence number, and how far an input got, so that a rerun after a
//! crash (even `kill -9`) resumes exactly once.
//!
//! The rule: the state is written durably (temporary file, fsync, rename,
//! fsync of the folder) once before the first append of a run and again
//! after each acknowledged append, before the next one is sent. A crash
//! between an acknowledgement and its write leaves the state one append
//! behind; the rerun sends that append again with the same (epoch, seq),
//! and the server answers it as a duplicate (`204`) without appending it
//! twice. The state's inputs are named ([`Input`]) so a rerun resumes only
//! the input it was interrupted in.
//!
//! A state that does not exist yet has never sent anything: if the server
//! already knows the producer (its first append answers as a duplicate, or
//! as a stale epoch), someone else's count is in the way, and the run moves
//! to an epoch above the server's.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::Failure;

/// The state of one producer on one stream of one server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerState {
    pub url: String,
    pub stream: String,
    pub producer: String,
    pub epoch: u64,
    /// The sequence number the next append is sent with.
    pub next_seq: u64,
    /// An input under way: the next append to send is its unit `next_unit`
    /// (a line with `--lines`, else the whole body as unit 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
}

/// An input an interrupted run was appending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub input: String,
    pub next_unit: u64,
}

/// Where a run's appends come from, named so a rerun recognises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A file, by its absolute path.
    File(PathBuf),
    /// Standard input (a rerun is assumed to feed the same lines).
    Stdin,
    /// The body given on the command line, by its digest.
    Argument(Vec<u8>),
}

impl Input {
    /// The name kept in the state.
    pub fn name(&self) -> String {
        match self {
            Input::File(p) => format!("file:{}", p.display()),
            Input::Stdin => "stdin".into(),
            Input::Argument(body) => {
                format!("argument:{}", &hex::encode(Sha256::digest(body))[..16])
            }
        }
    }
}

/// Why a run cannot start from a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfinished {
    pub input: String,
    pub next_unit: u64,
}

impl ProducerState {
    /// A producer never seen by this state.
    pub fn new(url: &str, stream: &str, producer: &str) -> Self {
        ProducerState {
            url: url.into(),
            stream: stream.into(),
            producer: producer.into(),
            epoch: 0,
            next_seq: 0,
            pending: None,
        }
    }

    /// Starts appending `input`: the unit to start from (where an
    /// interrupted run of the same input stopped, else 0). Another input
    /// left unfinished is refused: its last append may or may not have
    /// applied, and only sending it again tells.
    pub fn begin(&mut self, input: &str) -> Result<u64, Unfinished> {
        match &self.pending {
            Some(p) if p.input == input => Ok(p.next_unit),
            Some(p) => Err(Unfinished {
                input: p.input.clone(),
                next_unit: p.next_unit,
            }),
            None => {
                self.pending = Some(Pending {
                    input: input.into(),
                    next_unit: 0,
                });
                Ok(0)
            }
        }
    }

    /// Unit `unit` was acknowledged (applied now or before).
    pub fn acknowledged(&mut self, unit: u64) {
        self.next_seq += 1;
        if let Some(p) = &mut self.pending {
            p.next_unit = unit + 1;
        }
    }

    /// A unit the run skipped without sending (a blank line of a JSON input).
    pub fn skipped(&mut self, unit: u64) {
        if let Some(p) = &mut self.pending {
            p.next_unit = unit + 1;
        }
    }

    /// The input is done.
    pub fn finish(&mut self) {
        self.pending = None;
    }

    /// Starts a new epoch above `at_least` (the server's, when it told), from
    /// sequence number 0; an unfinished input is given up.
    pub fn new_epoch(&mut self, at_least: u64) {
        self.epoch = self.epoch.max(at_least) + 1;
        self.next_seq = 0;
    }
}

/// The default state file of a producer: under `$XDG_STATE_HOME/ds/producers/`
/// (else `$HOME/.local/state/ds/producers/`), named by a digest of the
/// server's URL, the stream and the producer id.
pub fn default_path(
    xdg_state_home: Option<&str>,
    home: Option<&str>,
    url: &str,
    stream: &str,
    producer: &str,
) -> Result<PathBuf, Failure> {
    let root = match (
        xdg_state_home.filter(|s| !s.is_empty()),
        home.filter(|s| !s.is_empty()),
    ) {
        (Some(x), _) => PathBuf::from(x),
        (None, Some(h)) => Path::new(h).join(".local/state"),
        (None, None) => return Err(Failure::Usage(
            "neither XDG_STATE_HOME nor HOME is set: name the producer's state file with --state"
                .into(),
        )),
    };
    let digest = Sha256::digest(format!("{url}\n{stream}\n{producer}").as_bytes());
    Ok(root
        .join("ds/producers")
        .join(format!("{}.json", &hex::encode(digest)[..16])))
}

/// Reads a state file; none when it does not exist.
pub fn load(path: &Path) -> Result<Option<ProducerState>, Failure> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Failure::Local(format!(
                "the producer state {} is not valid: {e}",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::Local(format!(
            "cannot read the producer state {}: {e}",
            path.display()
        ))),
    }
}

/// Writes a state file durably: a temporary file beside it, synced, renamed
/// over it, and the folder synced, so a crash leaves the old state or the
/// new one, never a torn one.
pub fn save(path: &Path, state: &ProducerState) -> Result<(), Failure> {
    let fail = |what: &str, e: std::io::Error| {
        Failure::Local(format!(
            "cannot {what} the producer state {}: {e}",
            path.display()
        ))
    };
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(folder).map_err(|e| fail("make the folder of", e))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let bytes = serde_json::to_vec_pretty(state).expect("a state serializes");
    let mut file = std::fs::File::create(&tmp).map_err(|e| fail("write", e))?;
    file.write_all(&bytes).map_err(|e| fail("write", e))?;
    file.sync_all().map_err(|e| fail("sync", e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| fail("rename", e))?;
    std::fs::File::open(folder)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail("sync the folder of", e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_resumes_its_own_input_where_it_stopped() {
        let mut s = ProducerState::new("http://h", "/v1/stream/a", "p");
        assert_eq!(s.begin("file:/x"), Ok(0));
        s.acknowledged(0);
        s.acknowledged(1);
        assert_eq!((s.next_seq, s.pending.as_ref().unwrap().next_unit), (2, 2));
        // Killed here: the rerun of the same input starts at unit 2 with seq 2.
        let mut rerun = s.clone();
        assert_eq!(rerun.begin("file:/x"), Ok(2));
        assert_eq!(rerun.next_seq, 2);
        // Another input is refused while this one is unfinished.
        assert_eq!(
            rerun.begin("stdin"),
            Err(Unfinished {
                input: "file:/x".into(),
                next_unit: 2
            })
        );
        rerun.finish();
        assert_eq!(rerun.begin("stdin"), Ok(0));
        assert_eq!(rerun.next_seq, 2, "the sequence goes on across inputs");
    }

    #[test]
    fn skipped_units_advance_the_position_not_the_sequence() {
        let mut s = ProducerState::new("u", "/s", "p");
        s.begin("stdin").unwrap();
        s.skipped(0);
        s.acknowledged(1);
        assert_eq!((s.next_seq, s.pending.unwrap().next_unit), (1, 2));
    }

    #[test]
    fn a_new_epoch_starts_at_zero_above_the_servers() {
        let mut s = ProducerState::new("u", "/s", "p");
        s.next_seq = 7;
        s.new_epoch(0);
        assert_eq!((s.epoch, s.next_seq), (1, 0));
        s.new_epoch(5);
        assert_eq!((s.epoch, s.next_seq), (6, 0));
    }

    #[test]
    fn inputs_are_named_stably() {
        assert_eq!(Input::Stdin.name(), "stdin");
        assert_eq!(Input::File("/a/b".into()).name(), "file:/a/b");
        let a = Input::Argument(b"x".to_vec()).name();
        assert_eq!(a, Input::Argument(b"x".to_vec()).name());
        assert_ne!(a, Input::Argument(b"y".to_vec()).name());
    }

    #[test]
    fn default_paths_follow_xdg_and_differ_per_producer() {
        let a = default_path(Some("/st"), Some("/home/u"), "http://h", "/s", "p").unwrap();
        assert!(a.starts_with("/st/ds/producers"), "{a:?}");
        let b = default_path(None, Some("/home/u"), "http://h", "/s", "p").unwrap();
        assert!(b.starts_with("/home/u/.local/state/ds/producers"), "{b:?}");
        assert_eq!(a.file_name(), b.file_name());
        let c = default_path(Some("/st"), None, "http://h", "/s", "q").unwrap();
        assert_ne!(a.file_name(), c.file_name());
        assert!(default_path(None, None, "u", "/s", "p").is_err());
    }

    #[test]
    fn a_saved_state_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/p.json");
        assert_eq!(load(&path).unwrap(), None);
        let mut s = ProducerState::new("u", "/s", "p");
        s.begin("stdin").unwrap();
        s.acknowledged(0);
        save(&path, &s).unwrap();
        assert_eq!(load(&path).unwrap(), Some(s));
        std::fs::write(&path, b"{").unwrap();
        assert!(load(&path).is_err());
    }
}
