//! Who may connect to the embedded broker, and what each account may publish and subscribe to:
//! Mosquitto's password file ([`Passwords`]) and ACL file ([`Acl`]) formats, so that one set of
//! files (as `mesh secure` generates them) secures the embedded broker and Mosquitto alike.
//!
//! With an [`Access`] in its config the broker refuses anonymous clients and wrong passwords
//! at CONNECT (as well as a last will on a topic the account may not publish to), acknowledges
//! and drops a publish the account may not make (closing the connection would make a client
//! that sends it again after every reconnect loop), and refuses a subscription outside what
//! the account may read (SUBACK failure).

mod acl;
mod hook;
mod passwords;

pub use acl::Acl;
pub(crate) use hook::AccessHook;
pub use passwords::{HASH_ITERATIONS, Passwords, hash_password, random_password};

use crate::BrokerError;
use std::path::Path;

/// The largest password or ACL file read.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The accounts and their rights.
#[derive(Debug, Clone)]
pub struct Access {
    passwords: Passwords,
    acl: Acl,
}

impl Access {
    /// Accounts from `passwords`, rights from `acl`.
    pub fn new(passwords: Passwords, acl: Acl) -> Access {
        Access { passwords, acl }
    }

    /// Reads a Mosquitto password file and a Mosquitto ACL file.
    ///
    /// # Errors
    /// [`BrokerError::Config`] naming the file (and the line) that cannot be read or parsed.
    pub fn from_files(password_file: &Path, acl_file: &Path) -> Result<Access, BrokerError> {
        let passwords = Passwords::parse(&read(password_file)?)
            .map_err(|e| BrokerError::Config(format!("{}: {e}", password_file.display())))?;
        if passwords.is_empty() {
            return Err(BrokerError::Config(format!(
                "{}: no account: every client would be refused",
                password_file.display()
            )));
        }
        let acl = Acl::parse(&read(acl_file)?)
            .map_err(|e| BrokerError::Config(format!("{}: {e}", acl_file.display())))?;
        Ok(Access { passwords, acl })
    }

    /// Whether `user` may connect with `password`.
    pub fn authenticate(&self, user: &str, password: &[u8]) -> bool {
        self.passwords.verify(user, password)
    }

    /// The ACL.
    pub fn acl(&self) -> &Acl {
        &self.acl
    }
}

fn read(path: &Path) -> Result<String, BrokerError> {
    let unreadable = |e: std::io::Error| BrokerError::Config(format!("{}: {e}", path.display()));
    let size = std::fs::metadata(path).map_err(unreadable)?.len();
    if size > MAX_FILE_BYTES {
        return Err(BrokerError::Config(format!(
            "{}: {size} bytes, more than the {MAX_FILE_BYTES} read",
            path.display()
        )));
    }
    std::fs::read_to_string(path).map_err(unreadable)
}
