//! Tenant declarations under way on this node. Each holds a place under `max_tenants` from
//! before it is proposed until its group is open here, so N simultaneous first writes of N
//! new names cannot all pass the cap's check and all commit (review s27 tenants M1). One
//! declaration of a name runs at a time, in a task of its own, and every request for that
//! name meanwhile waits on it, each at most until the declaration's deadline (review s28 M-4:
//! one task per request, each waiting on the `default` queue without a bound, piled up behind
//! a stalled engine and committed duplicate declarations). The task itself is not cut at the
//! deadline: it holds its place until the `default` engine answers (committed, refused, or
//! the engine gone), since until then the proposal may still commit (review s29 M-A: cut at
//! 35 s it gave the place back, and a long stall let more names than the cap commit).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use queenmq_protocol::{check_tenant_name, QueenError};
use tokio::sync::watch;

use super::hosted::HOSTED_DIR;

#[derive(Default)]
pub struct Declaring {
    /// Each name with the number of declarations of it under way.
    names: Mutex<BTreeMap<String, usize>>,
    /// The declaration running for each name, with its outcome once it ended. One entry per
    /// name, removed when its task ends: bounded by the names holding a place (the cap) plus
    /// those whose refused reservation ends their task at once.
    flights: Mutex<BTreeMap<String, Running>>,
}

/// A running declaration as its waiters see it.
struct Running {
    outcome: watch::Receiver<Option<Outcome>>,
    /// Past it, waiters are answered without waiting (the task may still run).
    deadline: tokio::time::Instant,
}

type Outcome = Result<(), QueenError>;

/// The one running declaration of a name: its outcome is sent to every waiter and its entry
/// removed when it ends, whether it finished, timed out, or its task was dropped.
struct Flight {
    of: Arc<Declaring>,
    tenant: String,
    tx: watch::Sender<Option<Outcome>>,
    outcome: Option<Outcome>,
}

impl Drop for Flight {
    fn drop(&mut self) {
        // Removed before the outcome is sent: a waiter that saw it and asks again starts a
        // fresh declaration. The entry is this flight's: no other runs for the name while it
        // stands.
        self.of.flights().remove(&self.tenant);
        // A task dropped before it ended (the runtime stopping) leaves no waiter hanging.
        let outcome = self.outcome.take().unwrap_or_else(|| {
            Err(QueenError::unavailable(
                "the tenant's declaration stopped before it ended; retry",
            ))
        });
        self.tx.send_replace(Some(outcome));
    }
}

/// A place held for one declaration; given back when dropped.
pub struct Reservation {
    of: Arc<Declaring>,
    tenant: String,
}

impl Declaring {
    /// Holds a place for `tenant` unless the names already taken (`taken`: open groups and
    /// hosted records; and the other declarations under way) fill `max`. A name already
    /// among them takes no new place.
    pub fn reserve(
        self: &Arc<Self>,
        tenant: &str,
        taken: &BTreeSet<String>,
        max: usize,
    ) -> Option<Reservation> {
        let mut names = self.lock();
        let mut all: BTreeSet<&str> = taken.iter().map(String::as_str).collect();
        all.extend(names.keys().map(String::as_str));
        if !all.contains(tenant) && all.len() >= max {
            return None;
        }
        *names.entry(tenant.to_owned()).or_default() += 1;
        Some(Reservation {
            of: self.clone(),
            tenant: tenant.to_owned(),
        })
    }

    /// Runs `declare` for `tenant` in a task of its own unless one runs for that name already;
    /// either way waits for the one that runs and answers its outcome, or an `unavailable` at
    /// its deadline (`bound` after it began). The task outlives a waiter that goes away and the
    /// deadline alike: the place it holds under the cap must outlive a proposal that may still
    /// commit (review s27 tenants L1, review s29 M-A), so it ends only when `declare` does (the
    /// registry's ends once the `default` engine answered or is gone). A stalled engine then
    /// holds one task per name, and every request for that name past the deadline is answered
    /// at once, proposing nothing more.
    pub async fn declare_once<F, Fut>(
        self: &Arc<Self>,
        tenant: &str,
        bound: Duration,
        declare: F,
    ) -> Outcome
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Outcome> + Send + 'static,
    {
        let (mut rx, deadline, starts) = {
            let mut flights = self.flights();
            match flights.get(tenant) {
                Some(f) => (f.outcome.clone(), f.deadline, None),
                None => {
                    let (tx, rx) = watch::channel(None);
                    let deadline = tokio::time::Instant::now() + bound;
                    flights.insert(
                        tenant.to_owned(),
                        Running {
                            outcome: rx.clone(),
                            deadline,
                        },
                    );
                    (rx, deadline, Some(tx))
                }
            }
        };
        // Outside the map's lock (review s29 L-3): were `declare` or the spawn to panic, the
        // flight's drop locks the map to remove its entry.
        if let Some(tx) = starts {
            let mut flight = Flight {
                of: self.clone(),
                tenant: tenant.to_owned(),
                tx,
                outcome: None,
            };
            let run = declare();
            tokio::spawn(async move {
                flight.outcome = Some(run.await);
                drop(flight);
            });
        }
        let late = || {
            QueenError::unavailable(format!(
                "the tenant's declaration did not end within {} s (is the default group's \
                 leader stalled?); its proposal keeps its place under max_tenants until the \
                 default group answers; retry",
                bound.as_secs()
            ))
        };
        let seen = match tokio::time::timeout_at(deadline, rx.wait_for(Option::is_some)).await {
            Err(_) => return Err(late()),
            Ok(Err(_)) => {
                return Err(QueenError::unavailable(
                    "the tenant's declaration stopped; retry",
                ))
            }
            Ok(Ok(seen)) => seen,
        };
        match &*seen {
            Some(outcome) => outcome.clone(),
            None => Err(QueenError::unavailable(
                "the tenant's declaration stopped; retry",
            )),
        }
    }

    /// How many declarations run now (one per name at most).
    pub fn in_flight(&self) -> usize {
        self.flights().len()
    }

    fn flights(&self) -> MutexGuard<'_, BTreeMap<String, Running>> {
        self.flights.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many names are reserved for which `counted` is false (not yet open groups).
    pub fn reserved_besides(&self, counted: impl Fn(&str) -> bool) -> usize {
        self.lock().keys().filter(|n| !counted(n)).count()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, usize>> {
        self.names.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut names = self.of.lock();
        if let Some(n) = names.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                names.remove(&self.tenant);
            }
        }
    }
}

/// The tenants the hosted records name, read only (a record being written, `*.tmp`, is not
/// one yet, and is left alone: its writer renames it).
pub fn hosted_names(data_dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let entries = match std::fs::read_dir(data_dir.join(HOSTED_DIR)) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(e),
    };
    let mut names = BTreeSet::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if check_tenant_name(&name).is_ok() {
            names.insert(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn simultaneous_declarations_cannot_pass_the_cap_together() {
        let d = Arc::new(Declaring::default());
        let taken = set(&["default"]);
        // Cap 3: `default` and two declarations under way fill it; a third new name is
        // refused while they hold their places, whatever the open groups say.
        let a = d.reserve("a", &taken, 3).unwrap();
        let b = d.reserve("b", &taken, 3).unwrap();
        assert!(d.reserve("c", &taken, 3).is_none());
        // A name already reserved or taken takes no new place.
        let a2 = d.reserve("a", &taken, 3).unwrap();
        assert!(d.reserve("default", &taken, 3).is_some());
        assert_eq!(d.reserved_besides(|n| n == "b"), 1);
        drop(a);
        assert!(
            d.reserve("c", &taken, 3).is_none(),
            "a's second declaration holds it"
        );
        drop(a2);
        drop(b);
        assert!(d.reserve("c", &taken, 3).is_some());
        // Hosted records count: a tenant declared earlier holds its place for good.
        assert!(d.reserve("d", &set(&["default", "x", "y"]), 3).is_none());
    }

    /// Review s29 M-A: a declaration past its bound keeps its place under the cap while its
    /// proposal is unanswered (it may still commit), and gives it back once the engine
    /// answers. Before, the bound dropped the place with the task, and a second name passed
    /// the cap while the first could still commit.
    #[tokio::test(start_paused = true)]
    async fn a_declaration_past_its_bound_holds_its_place_until_the_engine_answers() {
        let d = Arc::new(Declaring::default());
        let bound = Duration::from_secs(35);
        // Cap 2: `default` and one more.
        let taken = set(&["default"]);
        let (engine, answered) = tokio::sync::oneshot::channel::<Outcome>();
        let outcome = {
            let (of, taken) = (d.clone(), taken.clone());
            d.declare_once("c", bound, move || async move {
                // As `Registry::reserve_and_declare`: the place is the task's.
                let _place = of
                    .reserve("c", &taken, 2)
                    .ok_or_else(|| QueenError::unavailable("full"))?;
                answered
                    .await
                    .unwrap_or_else(|_| Err(QueenError::unavailable("engine gone")))
            })
            .await
        };
        assert_eq!(
            outcome.unwrap_err().code,
            queenmq_protocol::ErrorCode::Unavailable
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            d.reserve("d", &taken, 2).is_none(),
            "c's proposal may still commit: its place stays taken"
        );
        assert_eq!(d.in_flight(), 1);
        engine.send(Ok(())).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(d.in_flight(), 0);
        assert!(
            d.reserve("d", &taken, 2).is_some(),
            "answered: the place is back (a committed c counts by its record from now on)"
        );
    }

    #[test]
    fn hosted_names_skip_a_record_being_written() {
        let dir = tempfile::tempdir().unwrap();
        assert!(hosted_names(dir.path()).unwrap().is_empty());
        let hosted = dir.path().join(HOSTED_DIR);
        std::fs::create_dir(&hosted).unwrap();
        std::fs::write(hosted.join("acme"), b"r").unwrap();
        std::fs::write(hosted.join("beta.tmp"), b"r").unwrap();
        assert_eq!(hosted_names(dir.path()).unwrap(), set(&["acme"]));
        assert!(hosted.join("beta.tmp").exists());
    }

    /// Review s28 M-4: many requests for one undeclared name run one declaration, and all
    /// get its outcome; a declaration that never ends (a stalled `default` engine) ends at
    /// its bound, answering every waiter, and frees the name for the next request.
    #[tokio::test(start_paused = true)]
    async fn one_declaration_per_name_runs_bounded_and_every_waiter_gets_its_outcome() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let d = Arc::new(Declaring::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (release, released) = watch::channel(false);
        let bound = Duration::from_secs(35);
        let mut waiters = Vec::new();
        for _ in 0..50 {
            let (d, runs, mut released) = (d.clone(), runs.clone(), released.clone());
            waiters.push(tokio::spawn(async move {
                d.declare_once("acme", bound, move || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    let _ = released.wait_for(|r| *r).await;
                    Ok(())
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "one declaration for 50 requests"
        );
        assert_eq!(d.in_flight(), 1);
        release.send_replace(true);
        for w in waiters {
            assert_eq!(w.await.unwrap(), Ok(()));
        }
        assert_eq!(
            d.in_flight(),
            0,
            "the name is free once its declaration ended"
        );

        // Stalled: the waiters, early and late, hear at the bound; the declaration stays
        // until its engine answers, and a request meanwhile is answered at once, running
        // nothing (review s29 M-A).
        let (answer, answered) = watch::channel(false);
        let early = tokio::spawn({
            let (d, mut answered) = (d.clone(), answered.clone());
            async move {
                d.declare_once("beta", bound, move || async move {
                    let _ = answered.wait_for(|a| *a).await;
                    Ok(())
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_secs(20)).await;
        let late = tokio::spawn({
            let d = d.clone();
            async move { d.declare_once("beta", bound, || async { Ok(()) }).await }
        });
        let started = tokio::time::Instant::now();
        for w in [early, late] {
            let e = w.await.unwrap().unwrap_err();
            assert_eq!(e.code, queenmq_protocol::ErrorCode::Unavailable, "{e:?}");
        }
        assert!(started.elapsed() <= Duration::from_secs(16));
        assert_eq!(d.in_flight(), 1, "the proposal may still commit");
        let ran = Arc::new(AtomicUsize::new(0));
        let at = tokio::time::Instant::now();
        let again = d
            .declare_once("beta", bound, {
                let ran = ran.clone();
                move || async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            })
            .await;
        assert!(again.is_err());
        assert_eq!(at.elapsed(), Duration::ZERO, "answered at once");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing proposed again");
        answer.send_replace(true);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(d.in_flight(), 0);
        assert_eq!(
            d.declare_once("beta", bound, || async { Ok(()) }).await,
            Ok(())
        );
        // A waiter that goes away leaves the declaration running to its end.
        let (release, mut released) = watch::channel(false);
        let done = Arc::new(AtomicUsize::new(0));
        let gone = {
            let (d, done) = (d.clone(), done.clone());
            tokio::spawn(async move {
                d.declare_once("gamma", bound, move || async move {
                    let _ = released.wait_for(|r| *r).await;
                    done.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        gone.abort();
        release.send_replace(true);
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert_eq!(d.in_flight(), 0);
    }
}
