//! Applying a committed entry to the state: the one path of a follower, a replay at start and
//! the leader.

use crate::codec::DecodeError;
use crate::entry::decode_entry;
use crate::state::{Loc, State};

/// Applies one committed entry. The leader already applied the effects while planning (its
/// `last_cycle` is at the entry's cycle), so for it only the log position moves.
pub fn apply_entry(
    st: &mut State,
    index: u64,
    term: u64,
    payload: &[u8],
) -> Result<(), DecodeError> {
    let (header, effects) = decode_entry(payload)?;
    if header.cycle > st.last_cycle {
        for (e, pos) in &effects {
            st.apply(e, header.now_us, Loc { index, pos: *pos });
        }
        st.last_cycle = header.cycle;
        st.last_now_us = st.last_now_us.max(header.now_us);
    }
    st.applied = Some((index, term));
    Ok(())
}
