//! redb's storage on a `SegmentFile`, so the state store can run on `MemBackend` and be opened
//! from its crash images like the segment log.

use std::fmt;
use std::io;
use std::sync::Arc;

use super::SegmentFile;

pub struct RedbOnFile(Arc<dyn SegmentFile>);

impl RedbOnFile {
    pub fn new(file: Arc<dyn SegmentFile>) -> RedbOnFile {
        RedbOnFile(file)
    }
}

impl fmt::Debug for RedbOnFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RedbOnFile")
    }
}

impl redb::StorageBackend for RedbOnFile {
    fn len(&self) -> io::Result<u64> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.0.read_at(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.0.write_at(offset, data)
    }
}
