//! Parked long-poll pops, re-planned when their queue may have something (a push, a released
//! lease) or on the engine tick (lease expiry, delays, window holds), answered empty by their
//! deadline, dropped when the client is gone so nothing is leased to a dead request.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use queenmq_protocol::{Command, Outcome, PopSource};

use super::Job;

pub struct Waiter {
    pub job: Job,
    pub deadline: Instant,
}

#[derive(Default)]
pub struct Waiters {
    list: Vec<Waiter>,
}

fn queue_of(job: &Job) -> Option<&str> {
    match &job.cmd {
        Command::Pop(p) => match &p.source {
            PopSource::Queue(q) | PopSource::Partition(q, _) => Some(q),
            PopSource::Labels { .. } => None,
        },
        _ => None,
    }
}

impl Waiters {
    pub fn park(&mut self, job: Job, deadline: Instant) {
        self.list.push(Waiter { job, deadline });
    }

    /// Waiters to re-plan now: those of woken queues, label pops on any wake, all on a tick.
    pub fn take_due(&mut self, woken: &HashSet<String>, ticked: bool) -> Vec<Waiter> {
        if self.list.is_empty() || (woken.is_empty() && !ticked) {
            return Vec::new();
        }
        let mut due = Vec::new();
        let mut keep = Vec::with_capacity(self.list.len());
        for w in self.list.drain(..) {
            if w.job.reply.is_closed() {
                continue;
            }
            let hit = ticked
                || match queue_of(&w.job) {
                    Some(q) => woken.contains(q),
                    None => true,
                };
            if hit {
                due.push(w);
            } else {
                keep.push(w);
            }
        }
        self.list = keep;
        due
    }

    /// Answers waiters whose deadline is within `margin` empty.
    pub fn expire(&mut self, margin: Duration) {
        let now = Instant::now();
        let mut keep = Vec::with_capacity(self.list.len());
        for w in self.list.drain(..) {
            if w.job.reply.is_closed() {
                continue;
            }
            if now + margin >= w.deadline {
                let _ = w.job.reply.send(Ok(Outcome::Popped(Default::default())));
            } else {
                keep.push(w);
            }
        }
        self.list = keep;
    }

    pub fn answer_all_empty(&mut self) {
        for w in self.list.drain(..) {
            let _ = w.job.reply.send(Ok(Outcome::Popped(Default::default())));
        }
    }
}
