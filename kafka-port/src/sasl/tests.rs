use super::*;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ring::{digest, hmac, pbkdf2};

fn users() -> Users {
    let file: users::UsersFile = toml::from_str(
        "[[user]]\nname='alice'\npassword='secret'\ntenant='acme'\nrole='read-write'\n",
    )
    .expect("toml");
    Users::build(file, fill_random).expect("users")
}

fn chosen(mech: &str) -> Login {
    let mech = Mechanism::parse(mech).expect("known");
    Login {
        step: Step::Chosen { mech, raw: false },
        mech: Some(mech),
        tried: None,
    }
}

#[test]
fn plain_logs_in_and_refuses_a_wrong_password() {
    let u = users();
    match chosen("PLAIN").token(&u, b"\0alice\0secret") {
        Token::Success(out, user) => assert!(out.is_empty() && user.tenant == "acme"),
        _ => panic!("should log in"),
    }
    for bad in [
        &b"\0alice\0wrong"[..],
        b"\0bob\0secret",
        b"\0\0secret",
        b"\0alice\0secret\0",
    ] {
        let mut login = chosen("PLAIN");
        assert!(matches!(login.token(&u, bad), Token::Failed(_)), "{bad:?}");
        // Nothing more is accepted on a failed login.
        assert!(matches!(
            login.token(&u, b"\0alice\0secret"),
            Token::Failed(_)
        ));
    }
}

/// The client side of SCRAM, written from RFC 5802 with ring, to drive the server. `echo`
/// goes in front of the server-first nonce in the final message (librdkafka sends its own
/// nonce there once more; RFC clients send nothing).
fn scram_client(u: &Users, mech: &str, password: &str) -> Token {
    scram_client_echoing(u, mech, password, "")
}

fn scram_client_echoing(u: &Users, mech: &str, password: &str, echo: &str) -> Token {
    let (dalg, halg, palg, len) = match mech {
        "SCRAM-SHA-256" => (
            &digest::SHA256,
            hmac::HMAC_SHA256,
            pbkdf2::PBKDF2_HMAC_SHA256,
            32,
        ),
        _ => (
            &digest::SHA512,
            hmac::HMAC_SHA512,
            pbkdf2::PBKDF2_HMAC_SHA512,
            64,
        ),
    };
    let mut login = chosen(mech);
    let bare = "n=alice,r=clientnonce123";
    let Token::Continue(sf) = login.token(u, format!("n,,{bare}").as_bytes()) else {
        panic!("server-first expected");
    };
    let sf = String::from_utf8(sf).expect("utf8");
    let mut nonce = "";
    let mut salt = Vec::new();
    let mut iters = 0u32;
    for part in sf.split(',') {
        match part.split_at(2) {
            ("r=", v) => nonce = v,
            ("s=", v) => salt = B64.decode(v).expect("salt"),
            ("i=", v) => iters = v.parse().expect("iterations"),
            _ => {}
        }
    }
    assert!(nonce.starts_with("clientnonce123") && nonce.len() > 14);
    let mut salted = vec![0u8; len];
    let n = std::num::NonZeroU32::new(iters).expect("iterations");
    pbkdf2::derive(palg, n, &salt, password.as_bytes(), &mut salted);
    let key = hmac::Key::new(halg, &salted);
    let client_key = hmac::sign(&key, b"Client Key");
    let stored = digest::digest(dalg, client_key.as_ref());
    let without_proof = format!("c=biws,r={echo}{nonce}");
    let auth = format!("{bare},{sf},{without_proof}");
    let sig = hmac::sign(&hmac::Key::new(halg, stored.as_ref()), auth.as_bytes());
    let proof: Vec<u8> = client_key
        .as_ref()
        .iter()
        .zip(sig.as_ref())
        .map(|(a, b)| a ^ b)
        .collect();
    let last = format!("{without_proof},p={}", B64.encode(proof));
    let out = login.token(u, last.as_bytes());
    if matches!(out, Token::Success(..)) {
        assert!(login.done());
        // A token after the login is refused.
        assert!(matches!(login.token(u, b"x"), Token::Failed(_)));
    }
    out
}

#[test]
fn scram_both_hashes_log_in_and_a_wrong_password_fails() {
    let u = users();
    for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        match scram_client(&u, mech, "secret") {
            Token::Success(out, user) => {
                assert!(out.starts_with(b"v=") && user.name == "alice", "{mech}")
            }
            _ => panic!("{mech} should log in"),
        }
        match scram_client(&u, mech, "wrong") {
            Token::Failed(why) => assert!(why.contains("invalid credentials"), "{why}"),
            _ => panic!("{mech} wrong password must fail"),
        }
    }
}

#[test]
fn librdkafka_s_doubled_client_nonce_logs_in_and_other_prefixes_fail() {
    let u = users();
    for mech in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
        let doubled = scram_client_echoing(&u, mech, "secret", "clientnonce123");
        assert!(matches!(doubled, Token::Success(..)), "{mech}");
        for other in [
            "x",
            "clientnonce12",
            "clientnonce1234",
            "clientnonce123clientnonce123",
        ] {
            match scram_client_echoing(&u, mech, "secret", other) {
                Token::Failed(why) => assert!(why.contains("nonce"), "{why}"),
                _ => panic!("{mech} with prefix {other:?} must fail"),
            }
        }
    }
}

#[test]
fn hostile_scram_and_out_of_turn_tokens_fail() {
    let u = users();
    for bad in [
        &b"n,,n=bob,r=abc"[..],
        b"p=tls-server-end-point,,n=alice,r=abc",
        b"n,,n=alice,r=abc,x=1",
        b"garbage",
    ] {
        assert!(
            matches!(chosen("SCRAM-SHA-256").token(&u, bad), Token::Failed(_)),
            "{bad:?}"
        );
    }
    let huge = vec![b'a'; 1 << 20];
    assert!(matches!(
        chosen("SCRAM-SHA-512").token(&u, &huge),
        Token::Failed(_)
    ));
    assert!(matches!(chosen("PLAIN").token(&u, &huge), Token::Failed(_)));
    assert!(matches!(
        Login::default().token(&u, b"\0alice\0secret"),
        Token::Failed(_)
    ));
}

/// Which names exist must not show in the answers: an unknown user, a known one without the
/// mechanism's credential and a wrong PLAIN password are all told the same.
#[test]
fn refusals_do_not_tell_which_users_exist() {
    let key = B64.encode([7u8; 32]);
    let file: users::UsersFile = toml::from_str(&format!(
        "[[user]]\nname='only256'\n[user.scram_sha_256]\nsalt='c2FsdA=='\niterations=4096\n\
         stored_key='{key}'\nserver_key='{key}'\n"
    ))
    .expect("toml");
    let u = Users::build(file, fill_random).expect("users");
    let why = |mech: &str, token: &[u8]| match chosen(mech).token(&u, token) {
        Token::Failed(why) => why,
        _ => panic!("{token:?} was not refused"),
    };
    let unknown = why("SCRAM-SHA-512", b"n,,n=nobody,r=abc");
    assert_eq!(unknown, FAILED);
    assert_eq!(why("SCRAM-SHA-512", b"n,,n=only256,r=abc"), unknown);
    assert_eq!(why("PLAIN", b"\0nobody\0pw"), unknown);
    assert_eq!(why("PLAIN", b"\0only256\0pw"), unknown);
}

/// An unknown PLAIN name pays what most users' checks cost, and a failure keeps the name
/// tried (for the log) and the mechanism (for the counter), never the password.
#[test]
fn unknown_names_cost_the_common_check_and_failures_say_who_was_tried() {
    let key = B64.encode([7u8; 64]);
    let stored = |iterations: u32| {
        format!(
            "[user.scram_sha_512]\nsalt='c2FsdA=='\niterations={iterations}\n\
             stored_key='{key}'\nserver_key='{key}'\n"
        )
    };
    let file: users::UsersFile = toml::from_str(&format!(
        "[[user]]\nname='a'\n{}[[user]]\nname='b'\n{}[[user]]\nname='c'\npassword='pw'\n",
        stored(8192),
        stored(8192),
    ))
    .expect("toml");
    let u = Users::build(file, fill_random).expect("users");
    let (hash, cred) = u.unknown().expect("a cost");
    assert_eq!((*hash, cred.iterations), (Hash::Sha512, 8192));
    assert!(!cred.matches(*hash, b"pw"));
    let mut login = chosen("PLAIN");
    assert!(login.costly());
    assert!(matches!(login.token(&u, b"\0nobody\0pw"), Token::Failed(_)));
    assert_eq!(
        (login.tried(), login.mechanism()),
        (Some("nobody"), "PLAIN")
    );
    assert!(!login.costly());
}
