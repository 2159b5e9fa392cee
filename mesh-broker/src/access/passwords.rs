//! Mosquitto's password file, read by the embedded broker and written by `mesh secure`: one
//! `user:hash` line per account, the hash in Mosquitto's `$7$` form (PBKDF2-HMAC-SHA512:
//! `$7$<iterations>$<base64 salt>$<base64 hash>`) or its older `$6$` form (SHA-512 of the
//! password and the salt: `$6$<base64 salt>$<base64 hash>`). One file then secures either
//! broker.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SecureRandom;
use ring::{digest, pbkdf2};
use std::collections::HashMap;
use std::num::NonZeroU32;

/// PBKDF2 iterations of the hashes [`hash_password`] writes. Generated passwords are random
/// (over 190 bits): the iterations guard hand-chosen ones, at about half a millisecond of one
/// core per CONNECT.
pub const HASH_ITERATIONS: u32 = 1_000;

/// The most iterations a hash may ask for: a hostile file cannot make each CONNECT cost
/// seconds.
const MAX_ITERATIONS: u32 = 1_000_000;

/// The bytes of salt [`hash_password`] uses (Mosquitto's length).
const SALT_LEN: usize = 12;

/// The length of a PBKDF2-HMAC-SHA512 / SHA-512 output.
const HASH_LEN: usize = 64;

/// A password hash as the file holds it.
#[derive(Clone)]
enum Hash {
    /// `$7$`: PBKDF2-HMAC-SHA512.
    Pbkdf2 {
        iterations: NonZeroU32,
        salt: Vec<u8>,
        hash: Vec<u8>,
    },
    /// `$6$`: SHA-512 over the password then the salt.
    Sha512 { salt: Vec<u8>, hash: Vec<u8> },
}

impl Hash {
    fn parse(text: &str) -> Result<Hash, String> {
        let decode = |what: &str, b64: &str| {
            STANDARD
                .decode(b64)
                .map_err(|_| format!("its {what} is not base64"))
        };
        let fields: Vec<&str> = text.split('$').collect();
        match fields.as_slice() {
            ["", "7", iterations, salt, hash] => {
                let iterations: u32 = iterations
                    .parse()
                    .map_err(|_| "its iteration count is not a number".to_owned())?;
                let iterations = NonZeroU32::new(iterations)
                    .filter(|n| n.get() <= MAX_ITERATIONS)
                    .ok_or_else(|| format!("its iteration count is not 1 to {MAX_ITERATIONS}"))?;
                let salt = decode("salt", salt)?;
                let hash = decode("hash", hash)?;
                if hash.len() != HASH_LEN {
                    return Err(format!("its hash is not {HASH_LEN} bytes"));
                }
                Ok(Hash::Pbkdf2 {
                    iterations,
                    salt,
                    hash,
                })
            }
            ["", "6", salt, hash] => {
                let hash = decode("hash", hash)?;
                if hash.len() != HASH_LEN {
                    return Err(format!("its hash is not {HASH_LEN} bytes"));
                }
                Ok(Hash::Sha512 {
                    salt: decode("salt", salt)?,
                    hash,
                })
            }
            _ => Err("its hash is not in Mosquitto's $7$ or $6$ form (use mosquitto_passwd or `mesh secure`)".to_owned()),
        }
    }

    /// Whether `password` hashes to this, in time that does not depend on where it differs.
    fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Pbkdf2 {
                iterations,
                salt,
                hash,
            } => pbkdf2::verify(
                pbkdf2::PBKDF2_HMAC_SHA512,
                *iterations,
                salt,
                password,
                hash,
            )
            .is_ok(),
            Hash::Sha512 { salt, hash } => {
                let mut context = digest::Context::new(&digest::SHA512);
                context.update(password);
                context.update(salt);
                let computed = context.finish();
                constant_time_eq(computed.as_ref(), hash)
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The accounts of a password file.
#[derive(Clone, Default)]
pub struct Passwords {
    users: HashMap<String, Hash>,
}

impl std::fmt::Debug for Passwords {
    /// The account names only, never a hash.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&String> = self.users.keys().collect();
        names.sort();
        f.debug_struct("Passwords").field("users", &names).finish()
    }
}

impl Passwords {
    /// Reads a password file's text. Blank lines and lines starting with `#` are skipped;
    /// any other line must be `user:hash`. An error names the line (never its hash).
    pub fn parse(text: &str) -> Result<Passwords, String> {
        let mut users = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let number = index + 1;
            let (user, hash) = line
                .split_once(':')
                .ok_or_else(|| format!("line {number}: not `user:hash`"))?;
            if user.is_empty() || user.len() > usize::from(u16::MAX) {
                return Err(format!("line {number}: the user name is empty or too long"));
            }
            let hash = Hash::parse(hash).map_err(|e| format!("line {number} ({user}): {e}"))?;
            if users.insert(user.to_owned(), hash).is_some() {
                return Err(format!("line {number}: user {user} is listed twice"));
            }
        }
        Ok(Passwords { users })
    }

    /// Whether `user` exists and `password` is theirs.
    pub fn verify(&self, user: &str, password: &[u8]) -> bool {
        self.users
            .get(user)
            .is_some_and(|hash| hash.verify(password))
    }

    /// How many accounts the file has.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file has no account.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// A fresh password: 24 bytes of the system's random source, base64url (32 characters, safe
/// in a URL's user info and in a config file), never starting with `-` or `_` (a command line
/// would take a leading `-` for an option).
pub fn random_password() -> String {
    let random = ring::rand::SystemRandom::new();
    loop {
        let mut bytes = [0u8; 24];
        random
            .fill(&mut bytes)
            .expect("the system's random source works");
        let password = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        if !password.starts_with(['-', '_']) {
            return password;
        }
    }
}

/// Hashes `password` in Mosquitto's `$7$` form with a fresh random salt: the part after
/// `user:` of a password-file line, which Mosquitto (2.0 and later) and the embedded broker
/// both read.
pub fn hash_password(password: &str) -> String {
    let mut salt = [0u8; SALT_LEN];
    ring::rand::SystemRandom::new()
        .fill(&mut salt)
        .expect("the system's random source works");
    let iterations = NonZeroU32::new(HASH_ITERATIONS).expect("not zero");
    let mut hash = [0u8; HASH_LEN];
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA512,
        iterations,
        &salt,
        password.as_bytes(),
        &mut hash,
    );
    format!(
        "$7${iterations}${}${}",
        STANDARD.encode(salt),
        STANDARD.encode(hash)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_it_writes_verifies_only_its_password() {
        let line = format!(
            "alice:{}\n# a comment\n\nbob:{}",
            hash_password("pw-a"),
            hash_password("pw-b")
        );
        let passwords = Passwords::parse(&line).unwrap();
        assert_eq!(passwords.len(), 2);
        assert!(passwords.verify("alice", b"pw-a"));
        assert!(passwords.verify("bob", b"pw-b"));
        assert!(!passwords.verify("alice", b"pw-b"));
        assert!(!passwords.verify("alice", b""));
        assert!(!passwords.verify("carol", b"pw-a"));
        assert!(!format!("{passwords:?}").contains("$7$"));
    }

    #[test]
    fn reads_mosquitto_passwd_output() {
        // `mosquitto_passwd -c -b file user secret` (Mosquitto 2.0.11), and a `$6$` line of
        // the older form (SHA-512 of "old-secret" and the salt).
        let file = "user:$7$101$27S3ewn888DIWs18$Ds1k+wLJ3h3svKtBmxaE+MC7mPh0gdm5VueSrpCF3d8CBGgZhX1c1IeLERP6pOL5796Et+aoo0Ph8OjW4Xv3xg==\n\
                    old:$6$MVTXCJASgutsq0Jk$LvIqiDONJIu+kZY2Yg8Ly1WmhIqCN8fIaF4f6tbPFLiErCTFm1aMTucRkrprkke9ksi8x/9GSCQnKwipelMPDQ==";
        let passwords = Passwords::parse(file).unwrap();
        assert_eq!(passwords.len(), 2);
        assert!(passwords.verify("user", b"secret"));
        assert!(passwords.verify("old", b"old-secret"));
        assert!(!passwords.verify("user", b"wrong"));
    }

    #[test]
    fn random_passwords_never_look_like_an_option() {
        for _ in 0..2_000 {
            let password = random_password();
            assert_eq!(password.len(), 32);
            assert!(!password.starts_with(['-', '_']), "{password}");
        }
    }

    #[test]
    fn malformed_lines_are_refused_with_their_number_and_no_hash() {
        for (text, says) in [
            ("nocolon", "line 1"),
            ("\nu:$7$0$AAAA$AAAA", "line 2 (u)"),
            ("u:$7$x$AAAA$AAAA", "iteration"),
            ("u:$7$10$!!$AAAA", "salt is not base64"),
            ("u:$7$10$AAAA$AAAA", "hash is not 64 bytes"),
            ("u:plaintext", "$7$"),
            (":$6$AAAA$AAAA", "empty"),
        ] {
            let error = Passwords::parse(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
        let twice = format!("u:{}\nu:{}", hash_password("a"), hash_password("b"));
        assert!(Passwords::parse(&twice).unwrap_err().contains("twice"));
    }
}
