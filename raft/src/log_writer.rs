//! The one thread that mutates the SegmentLog: appends, group fsync, truncation.
//!
//! Why a thread: openraft wants `append` to return as soon as the entries are readable and to
//! hear about durability later through `LogFlushed`; an fsync must never block a runtime worker.
//! Why one: the storage contract asks for serialised write I/O, and a single consumer of an
//! ordered queue gives that for free.
//!
//! Group commit: every append that queued up while an fsync ran is written, then covered by ONE
//! `sync()`, then all their callbacks fire in order. Note that openraft 0.9 awaits each append's
//! callback before it issues the next append (`RaftCore::append_to_log`), so on a leader a
//! group is exactly the entries of one openraft `append` call, and concurrent `propose` calls
//! each pay a full fsync in turn. Batching many commands into one entry is the engine's job
//! (DESIGN, write path step 3). A separate fsync thread was tried: under 0.9 it overlapped
//! nothing (still 640 fsyncs for 640 concurrent proposals) and only added a thread hop.
//!
//! Invariants:
//! - a callback fires only after a `sync()` that started after its records were written;
//! - callbacks fire in append order;
//! - a truncation first syncs and acknowledges every earlier append, so no callback ever claims
//!   durability for records a later truncation removed.

use std::io;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use openraft::storage::LogFlushed;
use tokio::sync::oneshot;

use crate::append_gate::Pass;
use crate::backend::{SegmentLog, StorageError};
use crate::types::TypeConfig;

/// Appends taken into one group before its fsync, so a steady stream of small appends cannot
/// postpone durability indefinitely.
const MAX_GROUP: usize = 256;

pub type Record = (u64, u64, Vec<u8>);

enum Job {
    Append {
        records: Vec<Record>,
        written: oneshot::Sender<Result<(), StorageError>>,
        flushed: LogFlushed<TypeConfig>,
        /// Released once the records are written (or failed), here rather than by the
        /// caller's future, which may be dropped after sending the job (review s23 L1).
        pass: Pass,
    },
    Truncate {
        from: u64,
        done: oneshot::Sender<Result<(), StorageError>>,
    },
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("the log writer thread has stopped")]
    Stopped,
    #[error(transparent)]
    Storage(#[from] StorageError),
}

pub struct LogWriter {
    tx: Sender<Job>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl LogWriter {
    pub fn spawn(log: Arc<SegmentLog>) -> io::Result<LogWriter> {
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("raft-log-writer".into())
            .spawn(move || run(&log, &rx))?;
        Ok(LogWriter {
            tx,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn send(&self, job: Job) -> Result<(), WriterError> {
        self.tx.send(job).map_err(|_| WriterError::Stopped)
    }

    /// Writes `records`; resolves once they are readable. `flushed` fires after the fsync;
    /// `pass` is held until the records are written, whether or not this future still waits.
    pub(crate) async fn append(
        &self,
        records: Vec<Record>,
        flushed: LogFlushed<TypeConfig>,
        pass: Pass,
    ) -> Result<(), WriterError> {
        let (written, rx) = oneshot::channel();
        self.send(Job::Append {
            records,
            written,
            flushed,
            pass,
        })?;
        rx.await.map_err(|_| WriterError::Stopped)??;
        Ok(())
    }

    /// Removes every record from index `from` on; durable on return.
    pub async fn truncate(&self, from: u64) -> Result<(), WriterError> {
        let (done, rx) = oneshot::channel();
        self.send(Job::Truncate { from, done })?;
        rx.await.map_err(|_| WriterError::Stopped)??;
        Ok(())
    }

    /// Syncs what is pending, acknowledges it and ends the thread; later calls fail with
    /// `Stopped`. Blocks until the thread has exited, so call it from a blocking context.
    pub fn stop_and_join(&self) {
        let _ = self.send(Job::Stop);
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(handle) = handle {
            if handle.join().is_err() {
                tracing::error!("the raft log writer thread panicked");
            }
        }
    }
}

/// Appends written since the last fsync: their callbacks, and their payload bytes for the
/// fsync-size histogram.
#[derive(Default)]
struct Pending {
    callbacks: Vec<LogFlushed<TypeConfig>>,
    bytes: usize,
}

fn run(log: &SegmentLog, rx: &Receiver<Job>) {
    let mut pending = Pending::default();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        let mut taken = 0;
        while let Some(job) = next.take() {
            match job {
                Job::Append {
                    records,
                    written,
                    flushed,
                    pass,
                } => {
                    let refs: Vec<(u64, u64, &[u8])> = records
                        .iter()
                        .map(|(i, t, p)| (*i, *t, p.as_slice()))
                        .collect();
                    let result = log.append_batch(&refs);
                    drop(pass);
                    match result {
                        Ok(()) => {
                            pending.callbacks.push(flushed);
                            pending.bytes += refs.iter().map(|r| r.2.len()).sum::<usize>();
                            let _ = written.send(Ok(()));
                        }
                        Err(e) => {
                            flushed.log_io_completed(Err(io::Error::other(e.to_string())));
                            let _ = written.send(Err(e));
                        }
                    }
                }
                Job::Truncate { from, done } => {
                    sync_pending(log, &mut pending);
                    let _ = done.send(log.truncate_from(from));
                }
                Job::Stop => {
                    sync_pending(log, &mut pending);
                    return;
                }
            }
            taken += 1;
            if taken < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        sync_pending(log, &mut pending);
    }
    sync_pending(log, &mut pending);
}

/// One fsync for everything written since the last one, then every waiting callback.
fn sync_pending(log: &SegmentLog, pending: &mut Pending) {
    if pending.callbacks.is_empty() {
        return;
    }
    let started = Instant::now();
    let result = log.sync();
    metrics::histogram!("queen_log_fsync_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("queen_log_fsync_bytes").record(pending.bytes as f64);
    pending.bytes = 0;
    if let Err(e) = &result {
        tracing::error!(error = %e, "fsync of the raft log failed");
    }
    for cb in pending.callbacks.drain(..) {
        cb.log_io_completed(match &result {
            Ok(()) => Ok(()),
            Err(e) => Err(io::Error::other(e.to_string())),
        });
    }
}
