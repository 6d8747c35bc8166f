//! Declarations of ephemeral queues: the one replicated part of the class (effects 63, 64).
//! The planner keeps the rows; the broker's RAM store keeps the contents.

use queenmq_protocol::ephemeral::{check_ephemeral_name, MAX_EPHEMERAL_CONFIGURED};
use queenmq_protocol::{EphemeralConfigOutcome, EphemeralConfigReq, ErrorCode, QueenError};

use super::Planner;
use crate::entry::Effect;

impl Planner<'_> {
    pub fn plan_ephemeral_config(
        &mut self,
        req: &EphemeralConfigReq,
    ) -> Result<EphemeralConfigOutcome, QueenError> {
        match req {
            EphemeralConfigReq::Set { queue, options } => {
                check_ephemeral_name(queue)?;
                options.check()?;
                let known = self.st.ephemeral.get(queue.as_str());
                if known.is_none() && self.st.ephemeral.len() >= MAX_EPHEMERAL_CONFIGURED {
                    return Err(QueenError::new(
                        ErrorCode::Forbidden,
                        format!(
                            "a tenant declares at most {MAX_EPHEMERAL_CONFIGURED} ephemeral queues"
                        ),
                    ));
                }
                // The same bounds again change nothing: no entry.
                if known != Some(options) {
                    self.emit(Effect::EphemeralConfigSet {
                        queue,
                        options: *options,
                    });
                }
                Ok(EphemeralConfigOutcome::Set)
            }
            EphemeralConfigReq::Delete { queue } => {
                check_ephemeral_name(queue)?;
                let held = self.st.ephemeral.contains_key(queue.as_str());
                if held {
                    self.emit(Effect::EphemeralConfigDelete { queue });
                }
                Ok(EphemeralConfigOutcome::Deleted(held))
            }
            EphemeralConfigReq::List => Ok(EphemeralConfigOutcome::List(
                self.st
                    .ephemeral
                    .iter()
                    .map(|(name, o)| (name.clone(), *o))
                    .collect(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use queenmq_protocol::EphemeralOptions;
    use queenmq_protocol::{EphemeralConfigOutcome as Out, EphemeralConfigReq as Req};

    use crate::plan::fixture::Fixture;

    fn set(fx: &mut Fixture, queue: &str, options: EphemeralOptions) -> Out {
        let req = Req::Set {
            queue: queue.into(),
            options,
        };
        fx.planner().plan_ephemeral_config(&req).expect("set")
    }

    #[test]
    fn declarations_replay_and_delete_answers_whether_one_was_held() {
        let mut fx = Fixture::new();
        let o = EphemeralOptions {
            drop_oldest: true,
            ..Default::default()
        };
        assert_eq!(set(&mut fx, "a", o), Out::Set);
        assert_eq!(set(&mut fx, "b", EphemeralOptions::default()), Out::Set);
        fx.assert_replays();
        let del = |fx: &mut Fixture, q: &str| {
            fx.planner()
                .plan_ephemeral_config(&Req::Delete { queue: q.into() })
                .expect("delete")
        };
        assert_eq!(del(&mut fx, "b"), Out::Deleted(true));
        assert_eq!(del(&mut fx, "b"), Out::Deleted(false));
        fx.assert_replays();
        let listed = fx
            .planner()
            .plan_ephemeral_config(&Req::List)
            .expect("list");
        assert_eq!(listed, Out::List(vec![("a".into(), o)]));
    }

    #[test]
    fn bad_names_and_bounds_emit_nothing() {
        let mut fx = Fixture::new();
        let bad = [
            Req::Set {
                queue: "x".repeat(513),
                options: EphemeralOptions::default(),
            },
            Req::Set {
                queue: "q".into(),
                options: EphemeralOptions {
                    lease_seconds: 0,
                    ..Default::default()
                },
            },
            Req::Delete {
                queue: "a\u{7}".into(),
            },
        ];
        for req in bad {
            assert!(fx.planner().plan_ephemeral_config(&req).is_err(), "{req:?}");
        }
        assert!(fx.cycle.entry.is_empty());
        assert!(fx.st.ephemeral.is_empty());
    }
}
