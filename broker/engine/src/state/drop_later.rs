//! Frees large removed state off the engine's thread (review s29 ckpt M4).
//!
//! Why: a group holds one `Arc` per cursor, so dropping a group of a million cursors is a
//! million scattered decrements and frees (reckoned 100+ ms), and `delete_group` runs inside
//! `apply` under the state lock; a queue delete pays it once per group. What was removed is
//! unreachable from the state, so when it is freed changes nothing the engine can observe.
//!
//! A bounded channel to one thread: a backlog cannot grow memory without bound, and the
//! engine never waits for it (a full channel, or no thread, frees inline as before).

use std::any::Any;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

/// Removed items waiting to be freed; past this the engine frees inline.
const BACKLOG: usize = 64;

type Item = Box<dyn Any + Send>;

static DROPPER: OnceLock<Option<SyncSender<Item>>> = OnceLock::new();

fn dropper() -> Option<&'static SyncSender<Item>> {
    DROPPER
        .get_or_init(|| {
            let (tx, rx) = sync_channel::<Item>(BACKLOG);
            let spawned = std::thread::Builder::new()
                .name("queen-drop-later".into())
                .spawn(move || {
                    // Ends when every sender is gone, which is the process's end.
                    for item in rx {
                        drop(item);
                    }
                });
            spawned.ok().map(|_| tx)
        })
        .as_ref()
}

#[cfg(test)]
thread_local! {
    /// When set, items are kept here instead of sent, so a test can see what was handed over.
    static CAUGHT: std::cell::RefCell<Option<Vec<Item>>> = const { std::cell::RefCell::new(None) };
}

/// Starts keeping this thread's handed-over items (test only).
#[cfg(test)]
pub fn catch() {
    CAUGHT.with(|c| *c.borrow_mut() = Some(Vec::new()));
}

/// What this thread handed over since [`catch`]; stops keeping them (test only).
#[cfg(test)]
pub fn caught() -> Vec<Item> {
    CAUGHT.with(|c| c.borrow_mut().take().unwrap_or_default())
}

/// Frees `item` on the dropper thread, or here when it is behind or could not start.
pub fn drop_later<T: Send + 'static>(item: T) {
    let item: Item = Box::new(item);
    #[cfg(test)]
    let item = match CAUGHT.with(|c| match c.borrow_mut().as_mut() {
        Some(held) => {
            held.push(item);
            None
        }
        None => Some(item),
    }) {
        Some(item) => item,
        None => return,
    };
    match dropper() {
        Some(tx) => match tx.try_send(item) {
            Ok(()) => {}
            Err(TrySendError::Full(item) | TrySendError::Disconnected(item)) => drop(item),
        },
        None => drop(item),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn an_item_handed_over_is_freed_on_the_dropper_thread() {
        let held = Arc::new(7u64);
        let weak = Arc::downgrade(&held);
        let freed_on = Arc::new(std::sync::Mutex::new(None));
        struct Probe(
            #[allow(dead_code)] Arc<u64>,
            Arc<std::sync::Mutex<Option<String>>>,
        );
        impl Drop for Probe {
            fn drop(&mut self) {
                let name = std::thread::current().name().map(str::to_string);
                if let Ok(mut at) = self.1.lock() {
                    *at = name;
                }
            }
        }
        drop_later(Probe(held, freed_on.clone()));
        let until = Instant::now() + Duration::from_secs(10);
        while weak.upgrade().is_some() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(weak.upgrade().is_none(), "freed");
        let at = freed_on.lock().map(|g| g.clone()).unwrap_or_default();
        assert_eq!(at.as_deref(), Some("queen-drop-later"));
    }
}
