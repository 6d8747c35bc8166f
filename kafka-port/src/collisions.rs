//! The collision check of one request (Kafka's `.`/`_` rule, see
//! `queenmq_protocol::topic_collision`): every name the request may create is sent to the
//! engine in one read, at the first name that needs an answer, and names the request itself
//! creates count too, so `a.b` and `a_b` in one request do not both become queues.

use std::collections::{HashMap, HashSet};

use queenmq_protocol::topic_collision::{collision_key, may_collide, MAX_COLLISION_NAMES};
use queenmq_protocol::{Command, ErrorCode, Outcome, QueenError, ReadAnswer, ReadReq};

use crate::{topics, Door};

pub struct Check {
    /// The names the one read asks about (deduplicated, only those that may collide).
    asked: Vec<String>,
    /// The read's answer once made: asked name -> the queue it collides with.
    found: Option<HashMap<String, Option<String>>>,
    /// Names created by this request so far, by collision key.
    made: HashMap<String, String>,
}

impl Check {
    /// A check for a request that may create these names (at most
    /// [`MAX_COLLISION_NAMES`] of them may collide; a caller bounds its list).
    pub fn new<'a>(candidates: impl IntoIterator<Item = &'a str>) -> Self {
        let mut seen = HashSet::new();
        let asked = candidates
            .into_iter()
            .filter(|n| may_collide(n) && seen.insert(*n))
            .map(str::to_owned)
            .collect();
        Check {
            asked,
            found: None,
            made: HashMap::new(),
        }
    }

    /// The name `name` would collide with: a queue, or a name this request created. `name`
    /// must be one of the candidates.
    pub async fn existing(
        &mut self,
        door: &Door,
        name: &str,
    ) -> Result<Option<String>, QueenError> {
        if !may_collide(name) {
            return Ok(None);
        }
        if let Some(made) = self.made.get(&collision_key(name)).filter(|m| *m != name) {
            return Ok(Some(made.clone()));
        }
        if self.found.is_none() {
            self.found = Some(self.read(door).await?);
        }
        match self.found.as_ref().and_then(|f| f.get(name)) {
            Some(hit) => Ok(hit.clone()),
            None => Err(QueenError::new(
                ErrorCode::Internal,
                format!("topic {name:?} was not among the names checked for collisions"),
            )),
        }
    }

    /// Records a name this request created.
    pub fn created(&mut self, name: &str) {
        if may_collide(name) {
            self.made
                .entry(collision_key(name))
                .or_insert_with(|| name.to_owned());
        }
    }

    async fn read(&self, door: &Door) -> Result<HashMap<String, Option<String>>, QueenError> {
        if self.asked.len() > MAX_COLLISION_NAMES {
            return Err(QueenError::bad_request(format!(
                "{} new topic names in one request (at most {MAX_COLLISION_NAMES})",
                self.asked.len()
            )));
        }
        let req = ReadReq::TopicCollisions {
            names: self.asked.clone(),
        };
        match door
            .bus
            .call(door.describe_ctx(), Command::Read(req))
            .await?
        {
            Outcome::Read(ReadAnswer::TopicCollisions(hits)) if hits.len() == self.asked.len() => {
                Ok(self.asked.iter().cloned().zip(hits).collect())
            }
            other => Err(topics::unexpected(&other)),
        }
    }
}
