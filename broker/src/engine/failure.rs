//! Why an engine ended other than by a stop. The supervisor rebuilds the group from
//! checkpoint and log either way; a deposition is a normal event of a cluster, not a crash,
//! so it is rebuilt at once, without the crash-loop backoff (review s16 B2).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// This node lost the lead (or contact with a majority) with a cycle in flight.
    pub deposed: bool,
    /// The node is stopping while this engine waited for an entry past its write limit: its
    /// state may be ahead of the log, so it ends without its final checkpoint. No failure:
    /// nothing is rebuilt or counted, the restart replays the log (review s20 lead B2).
    pub stopping: bool,
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure {
            why,
            deposed: false,
            stopping: false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}
