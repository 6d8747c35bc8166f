//! The id of the key that sealed this data directory's payloads, kept in `data_dir/KEY_ID`.
//!
//! Without it a restart with another key (a typo, another environment's Secret) starts cleanly
//! and seals new messages under the new key behind the old ones, leaving partitions that no
//! single key reads. So the first seal records the key id durably (written, fsynced, directory
//! fsynced) before its entry can reach the log, and a start whose key differs, or that has no
//! key while the record exists, is refused naming both ids. There is no rotation yet
//! (docs/configuration.md "encryption_key").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use anyhow::{anyhow, Context};

pub const FILE: &str = "KEY_ID";

/// The recorded id (8 hex digits), if the file exists.
pub fn read(dir: &Path) -> anyhow::Result<Option<String>> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let id = text.trim();
            if id.len() != 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(anyhow!(
                    "{} does not hold a key id (8 hex digits); refusing to start",
                    path.display()
                ));
            }
            Ok(Some(id.to_ascii_lowercase()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Refuses a start whose key does not match the recorded one.
pub fn check(dir: &Path, configured: Option<&str>) -> anyhow::Result<bool> {
    let recorded = read(dir)?;
    match (recorded.as_deref(), configured) {
        (None, _) => Ok(false),
        (Some(r), Some(c)) if r == c => Ok(true),
        (Some(r), Some(c)) => Err(anyhow!(
            "encryption_key has key id {c}, but the payloads in {} were sealed under key id {r} \
             ({FILE}); refusing to start: configure the key with id {r} (there is no rotation yet)",
            dir.display()
        )),
        (Some(r), None) => Err(anyhow!(
            "no encryption_key is set, but the payloads in {} were sealed under key id {r} \
             ({FILE}); refusing to start: configure the key with id {r}",
            dir.display()
        )),
    }
}

/// Writes the record once, before the first seal of this process (when none exists yet).
pub struct Recorder {
    path: PathBuf,
    id: String,
    done: AtomicBool,
    lock: Mutex<()>,
}

impl Recorder {
    pub fn new(dir: &Path, id: String, already: bool) -> Self {
        Recorder {
            path: dir.join(FILE),
            id,
            done: AtomicBool::new(already),
            lock: Mutex::new(()),
        }
    }

    pub fn ensure(&self) -> Result<(), String> {
        if self.done.load(Ordering::Acquire) {
            return Ok(());
        }
        let _held = self
            .lock
            .lock()
            .map_err(|_| "the key record lock is poisoned")?;
        if self.done.load(Ordering::Acquire) {
            return Ok(());
        }
        self.write()
            .map_err(|e| format!("cannot record the key id in {}: {e}", self.path.display()))?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }

    fn write(&self) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(format!("{}\n", self.id).as_bytes())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, &self.path)?;
        queenmq_storage::sync_parent(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_seal_records_the_id_and_another_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!check(dir.path(), Some("0a0b0c0d")).unwrap());
        assert!(
            !check(dir.path(), None).unwrap(),
            "nothing sealed yet: any key starts"
        );
        let r = Recorder::new(dir.path(), "0a0b0c0d".into(), false);
        r.ensure().unwrap();
        r.ensure().unwrap();
        assert_eq!(read(dir.path()).unwrap().as_deref(), Some("0a0b0c0d"));
        assert!(check(dir.path(), Some("0a0b0c0d")).unwrap());
        let e = check(dir.path(), Some("ffffffff")).unwrap_err().to_string();
        assert!(e.contains("ffffffff") && e.contains("0a0b0c0d"), "{e}");
        let e = check(dir.path(), None).unwrap_err().to_string();
        assert!(
            e.contains("no encryption_key") && e.contains("0a0b0c0d"),
            "{e}"
        );
        std::fs::write(dir.path().join(FILE), "junk").unwrap();
        assert!(check(dir.path(), Some("0a0b0c0d")).is_err());
    }
}
