//! Which asked topic names collide with an existing queue (Kafka's `.`/`_` rule): one pass
//! over the queue names, touching only those of an asked length, so a Kafka request pays one
//! cheap read for all its new topics however many queues the tenant has.

use std::collections::{HashMap, HashSet};

use queenmq_protocol::topic_collision::{collision_key, may_collide, MAX_COLLISION_NAMES};
use queenmq_protocol::QueenError;

use crate::state::State;

pub fn collisions(st: &State, names: &[String]) -> Result<Vec<Option<String>>, QueenError> {
    if names.len() > MAX_COLLISION_NAMES {
        return Err(QueenError::bad_request(format!(
            "{} names in one collision check (at most {MAX_COLLISION_NAMES})",
            names.len()
        )));
    }
    let mut asked: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, n) in names.iter().enumerate().filter(|(_, n)| may_collide(n)) {
        asked.entry(collision_key(n)).or_default().push(i);
    }
    let mut out = vec![None; names.len()];
    if asked.is_empty() {
        return Ok(out);
    }
    let lengths: HashSet<usize> = asked.keys().map(String::len).collect();
    for existing in st.queue_by_name.keys() {
        if !lengths.contains(&existing.len()) || !may_collide(existing) {
            continue;
        }
        let Some(at) = asked.get(&collision_key(existing)) else {
            continue;
        };
        for &i in at {
            let found: &mut Option<String> = &mut out[i];
            // The smallest, so the answer does not depend on the map's order.
            let better = found.as_deref().is_none_or(|f| existing.as_str() < f);
            if names[i] != *existing && better {
                *found = Some(existing.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::plan::fixture::Fixture;

    fn ask(f: &mut Fixture, names: &[&str]) -> Vec<Option<String>> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        super::collisions(&f.st, &names).expect("answers")
    }

    #[test]
    fn each_name_gets_the_smallest_queue_it_collides_with() {
        let mut f = Fixture::new();
        for q in ["a.b", "a_b_c", "a.b.c", "plain", "A.x"] {
            f.push(q, "p", 1);
        }
        let got = ask(
            &mut f,
            &["a_b", "a.b", "a.b_c", "a_x", "plain", "a-b", "a_b"],
        );
        let want: Vec<Option<String>> = [
            Some("a.b"),
            // Itself is no collision.
            None,
            Some("a.b.c"),
            // Case-sensitive, as Kafka.
            None,
            None,
            None,
            Some("a.b"),
        ]
        .iter()
        .map(|o| o.map(str::to_owned))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn too_many_names_are_refused() {
        let f = Fixture::new();
        let names = vec!["a.b".to_string(); super::MAX_COLLISION_NAMES + 1];
        assert!(super::collisions(&f.st, &names).is_err());
        assert_eq!(
            super::collisions(&f.st, &names[1..]).map(|v| v.len()).ok(),
            Some(super::MAX_COLLISION_NAMES)
        );
    }
}
