//! SASL PLAIN (RFC 4616): `authzid NUL authcid NUL password`, nothing more.

/// Longest PLAIN message accepted (255 bytes per field in the RFC, with room to spare).
pub const MAX_MESSAGE: usize = 1024;

/// The user name and password of a PLAIN message. An authzid, if given, must be the user:
/// acting as someone else is not offered.
pub fn parse(msg: &[u8]) -> Result<(String, &[u8]), &'static str> {
    if msg.len() > MAX_MESSAGE {
        return Err("PLAIN message too long");
    }
    let mut parts = msg.split(|b| *b == 0);
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("PLAIN message must be authzid NUL user NUL password");
    };
    if user.is_empty() || password.is_empty() {
        return Err("PLAIN user name and password must not be empty");
    }
    if !authzid.is_empty() && authzid != user {
        return Err("PLAIN authzid differs from the user name");
    }
    let user = std::str::from_utf8(user).map_err(|_| "PLAIN user name is not UTF-8")?;
    Ok((user.to_string(), password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages() {
        assert_eq!(parse(b"\0alice\0pw"), Ok(("alice".to_string(), &b"pw"[..])));
        assert_eq!(
            parse(b"alice\0alice\0pw"),
            Ok(("alice".to_string(), &b"pw"[..]))
        );
        for bad in [
            &b""[..],
            b"\0\0pw",
            b"\0alice\0",
            b"\0alice",
            b"bob\0alice\0pw",
            b"\0alice\0p\0w",
            b"\0\xff\0pw",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        assert!(parse(&vec![b'a'; MAX_MESSAGE + 1]).is_err());
    }
}
