//! The request header (v1 and v2), read with the checked reader.

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::wire::{Malformed, Reader};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHeader {
    /// `None` for a key this crate's Kafka version does not know.
    pub api: Option<ApiKey>,
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
}

/// The header and, when the API is known, a reader positioned at the request body (set to
/// the flexible encoding when the request version uses it).
pub fn decode(frame: Bytes) -> Result<(RequestHeader, Option<Reader>), Malformed> {
    let mut r = Reader::new(frame, false);
    let api_key = r.i16()?;
    let api_version = r.i16()?;
    let correlation_id = r.i32()?;
    let api = ApiKey::try_from(api_key).ok();
    let Some(known) = api else {
        // The rest of an unknown API's header cannot be read: its layout is not known.
        let header = RequestHeader {
            api,
            api_key,
            api_version,
            correlation_id,
            client_id: None,
        };
        return Ok((header, None));
    };
    let client_id = r.classic_nullable_string()?;
    let flexible = known.request_header_version(api_version) >= 2;
    r.set_flexible(flexible);
    r.skip_tags()?;
    let header = RequestHeader {
        api,
        api_key,
        api_version,
        correlation_id,
        client_id,
    };
    Ok((header, Some(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_and_v2_headers_read_and_unknown_keys_stop_early() {
        // Metadata v1: header v1 (client id, no tags).
        let v1 = Bytes::from_static(b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x02idREST");
        let (h, body) = decode(v1).expect("decodes");
        assert_eq!(
            (h.api, h.api_version, h.correlation_id),
            (Some(ApiKey::Metadata), 1, 7)
        );
        assert_eq!(h.client_id.as_deref(), Some("id"));
        assert_eq!(body.map(|b| b.remaining()), Some(4));
        // Metadata v12: header v2 (client id, then an empty tag section).
        let v2 = Bytes::from_static(b"\x00\x03\x00\x0c\x00\x00\x00\x08\xff\xff\x00X");
        let (h, body) = decode(v2).expect("decodes");
        assert_eq!((h.client_id, body.map(|b| b.remaining())), (None, Some(1)));
        let unknown = Bytes::from_static(b"\x7f\x00\x00\x00\x00\x00\x00\x09junk");
        let (h, body) = decode(unknown).expect("decodes");
        assert_eq!((h.api, h.correlation_id, body.is_none()), (None, 9, true));
        assert!(decode(Bytes::from_static(b"\x00\x03\x00")).is_err());
    }
}
