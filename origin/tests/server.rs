//! An origin served in this process on a loopback port (or its store
//! driven directly): the protocol, access, forks, rollbacks, sealing and object
//! storage, subscriptions, and the committed fuzz corpora replayed.
//!
//! One test binary for several files (each a module below), so the
//! origin and its dependencies are linked once for all of them.

mod common;

#[path = "access.rs"]
mod access;

#[path = "forks.rs"]
mod forks;

#[path = "objects.rs"]
mod objects;

#[path = "protocol.rs"]
mod protocol;

#[path = "restore.rs"]
mod restore;

#[path = "sealing.rs"]
mod sealing;

#[path = "subscriptions.rs"]
mod subscriptions;
