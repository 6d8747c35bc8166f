//! Kafka's topic-name collision rule, shared by the Kafka door (within one request) and the
//! engine (against every queue, [`crate::ReadReq::TopicCollisions`]): Kafka refuses a new
//! topic whose name equals an existing one once `.` and `_` are one character, because its
//! metrics names replace `.` with `_`.

/// Names one [`crate::ReadReq::TopicCollisions`] may ask about (CreateTopics' own cap).
pub const MAX_COLLISION_NAMES: usize = 1_000;

/// Whether a name can collide at all: only one with a `.` or a `_`.
pub fn may_collide(name: &str) -> bool {
    name.bytes().any(|b| matches!(b, b'.' | b'_'))
}

/// The name with every `.` as `_`: two names collide when these are equal and they are not.
pub fn collision_key(name: &str) -> String {
    name.replace('.', "_")
}

/// Whether two distinct names are one after `.` -> `_`.
pub fn collide(a: &str, b: &str) -> bool {
    a != b
        && a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .all(|(x, y)| x == y || (matches!(x, b'.' | b'_') && matches!(y, b'.' | b'_')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_collide_only_where_dots_and_underscores_stand_for_each_other() {
        assert!(collide("a.b", "a_b"));
        assert!(collide("a_b.c", "a.b_c"));
        assert!(collide("a._b", "a__b"));
        assert!(!collide("a.b", "a.b"));
        assert!(!collide("a.b", "a-b"));
        assert!(!collide("a.b", "a_bc"));
        assert!(!collide("ab", "a_"));
        // Kafka's names are case-sensitive, so is the rule.
        assert!(!collide("A.b", "a_b"));
        assert!(!collide("a.B", "a_b"));
    }

    #[test]
    fn the_key_agrees_with_the_rule() {
        for (a, b) in [
            ("a.b", "a_b"),
            ("x._y", "x__y"),
            ("A.b", "a_b"),
            ("a.b", "a-b"),
        ] {
            let same_key = collision_key(a) == collision_key(b);
            assert_eq!(same_key && a != b, collide(a, b), "{a} {b}");
        }
        assert!(may_collide("a.b") && may_collide("a_b") && !may_collide("a-b"));
    }
}
