//! The ids part of a version-2 snapshot stream: the sender's id files, each behind a 64-byte
//! head (docs/storage-format.md "The id files in the stream"), and the receiver's streaming
//! check of it, which holds one head and a running CRC whatever the files' sizes.

use crate::format::{le_u32, le_u64};
use crate::ids::parse_id_file_name;

/// An entry's head: name, file length, reserved, CRC32C of the bytes before it.
pub const ENTRY_HEAD: usize = 64;
/// Every id file name is this long (`g<20>-s<20>.qidx`, `g<20>-m<20>.qidx`).
pub const NAME_LEN: usize = 48;
/// A 7-day window is 10 080 one-minute buckets: this leaves room for unmerged files and
/// bounds what a receiver counts and a sender holds open.
pub const MAX_IDS_FILES: u32 = 1 << 16;
/// An id file is whole blocks, each ending in the CRC32C of its other bytes.
pub const ID_BLOCK: usize = 4096;
const BLOCK_CRC_AT: usize = ID_BLOCK - 4;
const HEAD_COVERED: usize = 60;

pub fn encode_entry_head(name: &str, file_len: u64) -> Result<[u8; ENTRY_HEAD], String> {
    if name.len() != NAME_LEN || parse_id_file_name(name).is_none() {
        return Err(format!("{name:?} is not an id file name"));
    }
    let mut b = [0u8; ENTRY_HEAD];
    b[..NAME_LEN].copy_from_slice(name.as_bytes());
    b[48..56].copy_from_slice(&file_len.to_le_bytes());
    let crc = crc32c::crc32c(&b[..HEAD_COVERED]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    Ok(b)
}

/// The entry's name and file length, checked against what is left of the part after the
/// head (`room`) before anything the length frames is read or written.
pub fn decode_entry_head(b: &[u8; ENTRY_HEAD], room: u64) -> Result<(String, u64), String> {
    let stored = le_u32(&b[60..]);
    let actual = crc32c::crc32c(&b[..HEAD_COVERED]);
    if stored != actual {
        return Err(format!(
            "id file entry head crc32c {actual:#010x} does not match the stored {stored:#010x}"
        ));
    }
    if b[56..60] != [0, 0, 0, 0] {
        return Err("id file entry head reserved bytes are not zero".into());
    }
    let name = std::str::from_utf8(&b[..NAME_LEN])
        .ok()
        .filter(|n| parse_id_file_name(n).is_some())
        .ok_or_else(|| "id file entry names no id file".to_string())?
        .to_owned();
    let len = le_u64(&b[48..]);
    if len < ID_BLOCK as u64 || !len.is_multiple_of(ID_BLOCK as u64) || len > room {
        return Err(format!(
            "id file {name} of {len} bytes: not whole blocks of {ID_BLOCK}, or more than the \
             {room} bytes left of the ids part"
        ));
    }
    Ok((name, len))
}

/// The receiver's verdict on the ids part so far.
#[derive(Clone, Debug)]
pub(crate) struct IdsCheck {
    /// Bytes of `ids_len` not yet seen.
    left: u64,
    files_left: u32,
    prev: Option<[u8; NAME_LEN]>,
    head: [u8; ENTRY_HEAD],
    have: usize,
    /// The file being read: its length and the bytes of it still to come (None: a head).
    file: Option<(u64, u64)>,
    block_at: usize,
    crc: u32,
    stored: [u8; 4],
}

impl IdsCheck {
    pub fn new(ids_len: u64, files: u32) -> IdsCheck {
        IdsCheck {
            left: ids_len,
            files_left: files,
            prev: None,
            head: [0; ENTRY_HEAD],
            have: 0,
            file: None,
            block_at: 0,
            crc: 0,
            stored: [0; 4],
        }
    }

    /// Every file came whole and nothing of the part is left.
    pub fn is_done(&self) -> bool {
        self.files_left == 0 && self.left == 0 && self.file.is_none()
    }

    /// Consumes a prefix of `data` (at least one byte) and returns its length.
    pub fn step(&mut self, data: &[u8]) -> Result<usize, String> {
        if self.files_left == 0 {
            return Err(format!(
                "{} bytes of the ids part follow its last id file",
                self.left
            ));
        }
        match self.file {
            None => self.step_head(data),
            Some((len, file_left)) => self.step_file(data, len, file_left),
        }
    }

    fn step_head(&mut self, data: &[u8]) -> Result<usize, String> {
        if self.have == 0 && self.left < ENTRY_HEAD as u64 {
            return Err(format!(
                "the ids part leaves {} bytes for {} more id files",
                self.left, self.files_left
            ));
        }
        let n = data.len().min(ENTRY_HEAD - self.have);
        self.head[self.have..self.have + n].copy_from_slice(&data[..n]);
        self.have += n;
        self.left -= n as u64;
        if self.have == ENTRY_HEAD {
            let (name, len) = decode_entry_head(&self.head, self.left)?;
            let mut raw = [0u8; NAME_LEN];
            raw.copy_from_slice(name.as_bytes());
            if self.prev.is_some_and(|p| p >= raw) {
                return Err(format!(
                    "id file {name} does not come after the previous one (names ascend)"
                ));
            }
            self.prev = Some(raw);
            self.have = 0;
            self.file = Some((len, len));
            self.block_at = 0;
            self.crc = 0;
        }
        Ok(n)
    }

    fn step_file(&mut self, data: &[u8], len: u64, file_left: u64) -> Result<usize, String> {
        let within = usize::try_from(file_left).unwrap_or(usize::MAX);
        let n = if self.block_at < BLOCK_CRC_AT {
            let n = data.len().min(BLOCK_CRC_AT - self.block_at).min(within);
            self.crc = crc32c::crc32c_append(self.crc, &data[..n]);
            n
        } else {
            let n = data.len().min(ID_BLOCK - self.block_at).min(within);
            let at = self.block_at - BLOCK_CRC_AT;
            self.stored[at..at + n].copy_from_slice(&data[..n]);
            n
        };
        self.block_at += n;
        self.left -= n as u64;
        let file_left = file_left - n as u64;
        if self.block_at == ID_BLOCK {
            // Not a refusal: the leader's own file may be damaged (a bad sector, or a power
            // loss that tore it after its header), and it would be sent the same way on every
            // retry, so refusing would stop every catch-up from this leader until the file
            // expires (review s31 H1). The file is installed as sent: the node then treats it
            // as the leader does, a bucket no filter vouches for (fail closed), never an
            // answer "new" for ids the leader had. The framing (entry heads) stays refused.
            if u32::from_le_bytes(self.stored) != self.crc {
                let block = (len - file_left) / ID_BLOCK as u64 - 1;
                let name = self.prev.map(|p| String::from_utf8_lossy(&p).into_owned());
                tracing::warn!(
                    file = name.unwrap_or_default(),
                    block,
                    "a snapshot's id file has a damaged block; it is installed as sent"
                );
            }
            self.block_at = 0;
            self.crc = 0;
        }
        if file_left == 0 {
            self.file = None;
            self.files_left -= 1;
            if self.files_left == 0 && self.left != 0 {
                return Err(format!(
                    "the ids part leaves {} bytes after its last id file",
                    self.left
                ));
            }
        } else {
            self.file = Some((len, file_left));
        }
        Ok(n)
    }
}
