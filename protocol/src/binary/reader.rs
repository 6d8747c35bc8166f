//! Little-endian fields off a byte slice with nom's `complete` parsers: a short input is an
//! error naming the field, never a panic, and a length is checked before its bytes are taken.

use nom::bytes::complete::take;
use nom::number::complete::{le_i64, le_u16, le_u32, le_u64, le_u8};
use nom::IResult;

use super::BinaryError;

type Res<'a, T> = IResult<&'a [u8], T, nom::error::Error<&'a [u8]>>;

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(input: &'a [u8]) -> Self {
        Reader { rest: input }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    fn run<T>(
        &mut self,
        what: &str,
        p: impl FnOnce(&'a [u8]) -> Res<'a, T>,
    ) -> Result<T, BinaryError> {
        match p(self.rest) {
            Ok((rest, v)) => {
                self.rest = rest;
                Ok(v)
            }
            Err(_) => Err(BinaryError::malformed(format!(
                "{what} runs past the end of the body"
            ))),
        }
    }

    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, BinaryError> {
        self.run(what, le_u8)
    }
    pub(crate) fn u16(&mut self, what: &str) -> Result<u16, BinaryError> {
        self.run(what, le_u16)
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, BinaryError> {
        self.run(what, le_u32)
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, BinaryError> {
        self.run(what, le_u64)
    }
    pub(crate) fn i64(&mut self, what: &str) -> Result<i64, BinaryError> {
        self.run(what, le_i64)
    }

    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], BinaryError> {
        self.run(what, |i| take(n)(i))
    }

    /// `u16 len` + that many bytes.
    pub(crate) fn bytes16(&mut self, what: &str) -> Result<&'a [u8], BinaryError> {
        let n = self.u16(what)?;
        self.take(usize::from(n), what)
    }

    /// `u32 len` + that many bytes.
    pub(crate) fn bytes32(&mut self, what: &str) -> Result<&'a [u8], BinaryError> {
        let n = self.u32(what)?;
        let n =
            usize::try_from(n).map_err(|_| BinaryError::malformed(format!("{what} too long")))?;
        self.take(n, what)
    }

    /// `u16 len` + UTF-8.
    pub(crate) fn text16(&mut self, what: &str) -> Result<&'a str, BinaryError> {
        let b = self.bytes16(what)?;
        std::str::from_utf8(b).map_err(|_| BinaryError::malformed(format!("{what} is not UTF-8")))
    }
}

/// A count read off the wire, refused past `max` before anything is sized from it.
pub(crate) fn bounded(count: u32, max: usize, what: &str) -> Result<usize, BinaryError> {
    match usize::try_from(count) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(BinaryError::TooLarge(format!(
            "{count} {what}; the limit is {max}"
        ))),
    }
}
