//! Why an engine ended other than by a stop. The supervisor rebuilds the group from
//! checkpoint and log either way; a deposition is a normal event of a cluster, not a crash,
//! so it is rebuilt at once, without the crash-loop backoff (review s16 B2).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    /// This node lost the lead (or contact with a majority) with a cycle in flight.
    pub deposed: bool,
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure {
            why,
            deposed: false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}
