//! TLS for every client and server in the workspace, done one way: rustls with its ring
//! crypto provider (aws-lc needs cmake and builds slowly cold), clients trusting the
//! operating system's roots (rustls-native-certs) and/or a PEM file of private CAs.
//!
//! - [`TlsRoots::client_config`] builds a client configuration with the ring provider given
//!   explicitly: the bus (`mqtts://`) and the gateway's webhook client use it.
//! - [`server_config`] builds a server configuration from a PEM certificate chain and a PEM
//!   private key, checked against each other: the gateway's HTTPS listener uses it.
//! - [`install_crypto_provider`] installs ring as the process-wide default provider. reqwest
//!   (built with `rustls-no-provider`) panics when a client is built without one, so every
//!   process that builds a reqwest client calls it first (it is cheap and idempotent).

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};

/// Installs rustls's ring provider as the process's default crypto provider, once. Call it
/// before building any reqwest client; later calls do nothing, and a provider another
/// library installed first is kept.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // An error means a provider is installed already: that one is used.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Where the certificate authorities that a server's certificate must chain to come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsRoots {
    /// A PEM file of CA certificates. When set, only these are trusted unless
    /// [`TlsRoots::native`] is also set.
    pub ca_file: Option<PathBuf>,
    /// Also trust the operating system's roots. When no `ca_file` is set, the system roots are
    /// used whatever this says (there would be nothing else to trust).
    pub native: bool,
}

impl TlsRoots {
    /// The trusted roots; why they cannot be loaded (a CA file that is missing, unreadable
    /// or holds no certificate; no system root when only those are asked for).
    pub fn load(&self) -> Result<RootCertStore, String> {
        let mut roots = RootCertStore::empty();
        if let Some(path) = &self.ca_file {
            for cert in CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("reading CA file {}: {e}", path.display()))?
            {
                let cert = cert.map_err(|e| format!("parsing CA file {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("CA in {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("no certificate in CA file {}", path.display()));
            }
        }
        if self.native || self.ca_file.is_none() {
            let native = rustls_native_certs::load_native_certs();
            for e in &native.errors {
                tracing::warn!(error = %e, "could not load some system CA certificates");
            }
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err("no system CA certificate found".to_owned());
            }
        }
        Ok(roots)
    }

    /// A client configuration trusting these roots (see [`TlsRoots::load`]), with the ring
    /// provider and rustls's safe protocol versions.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        client_config(self.load()?)
    }
}

/// A client configuration trusting `roots`, with the ring provider and rustls's safe
/// protocol versions.
pub fn client_config(roots: RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The largest certificate chain or key file [`server_config`] reads: real ones take a few
/// KiB.
pub const MAX_PEM_FILE_BYTES: u64 = 1024 * 1024;

/// A server configuration (ring provider, rustls's safe protocol versions, no client
/// certificates) serving the certificate chain in `cert_file` (PEM, the server's certificate
/// first) with the private key in `key_file` (PEM: PKCS#8, PKCS#1 RSA or SEC1 EC). The caller
/// sets the ALPN protocols.
///
/// Fails with a message naming the file when a file cannot be read, is larger than
/// [`MAX_PEM_FILE_BYTES`], holds no certificate or no key, does not parse, or when the key
/// does not match the certificate. The message never quotes the key file's content.
pub fn server_config(cert_file: &Path, key_file: &Path) -> Result<rustls::ServerConfig, String> {
    let chain_pem = read_pem_file(cert_file, "certificate")?;
    let chain = CertificateDer::pem_slice_iter(&chain_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "certificate file {}: {}",
                cert_file.display(),
                pem_problem(&e, "certificate")
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "certificate file {}: no certificate in it (a PEM \"BEGIN CERTIFICATE\" section)",
            cert_file.display()
        ));
    }
    let key_pem = read_pem_file(key_file, "private key")?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!(
            "private key file {}: {}",
            key_file.display(),
            pem_problem(&e, "private key (PKCS#8, PKCS#1 RSA or SEC1 EC)")
        )
    })?;
    drop(key_pem);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "the private key in {} does not match the certificate in {}",
                key_file.display(),
                cert_file.display()
            ),
            other => format!(
                "cannot serve the certificate in {} with the key in {}: {other}",
                cert_file.display(),
                key_file.display()
            ),
        })
}

/// The bytes of a PEM file, at most [`MAX_PEM_FILE_BYTES`]; `what` names it in errors.
fn read_pem_file(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    let cannot = |e: std::io::Error| format!("cannot read the {what} file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(format!(
            "the {what} file {} is larger than {MAX_PEM_FILE_BYTES} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

/// What is wrong with a PEM file, said without quoting any of it (pem's own messages may
/// quote a line or a decoded byte).
fn pem_problem(error: &rustls::pki_types::pem::Error, wanted: &str) -> String {
    use rustls::pki_types::pem::Error;
    match error {
        Error::NoItemsFound => format!("no {wanted} in it"),
        Error::MissingSectionEnd { .. } => "a PEM section has no END line".to_owned(),
        Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed".to_owned(),
        Error::Base64Decode(_) => "a PEM section is not valid base64".to_owned(),
        Error::Io(e) => e.to_string(),
        _ => format!("not a valid PEM file of a {wanted}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let roots = TlsRoots {
            ca_file: Some("/nonexistent/ca.pem".into()),
            native: false,
        };
        let error = roots.load().unwrap_err();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");

        let empty = std::env::temp_dir().join(format!(
            "mesh-tls-empty-{}-{}.pem",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let roots = TlsRoots {
            ca_file: Some(empty.clone()),
            native: true,
        };
        let error = roots.load().unwrap_err();
        assert!(error.contains("no certificate"), "{error}");
        std::fs::remove_file(empty).unwrap();
    }

    #[test]
    fn server_files_that_cannot_be_used_are_named_and_never_quoted() {
        let dir = std::env::temp_dir().join(format!(
            "mesh-tls-server-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        // pki-types reads a CERTIFICATE section as base64 only: enough to reach the key.
        let cert = dir.join("cert.pem");
        std::fs::write(
            &cert,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA";
        let key = dir.join("key.pem");
        for (content, says) in [
            (
                format!("-----BEGIN PRIVATE KEY-----\n{secret}!!\n-----END PRIVATE KEY-----\n"),
                "not valid base64",
            ),
            (
                format!("-----BEGIN PRIVATE KEY-----\n{secret}\n"),
                "no END line",
            ),
            ("nothing here\n".to_owned(), "no private key"),
        ] {
            std::fs::write(&key, content).unwrap();
            let error = server_config(&cert, &key).unwrap_err();
            assert!(
                error.contains(&key.display().to_string()) && error.contains(says),
                "{error}"
            );
            assert!(!error.contains(secret), "{error}");
        }
        let missing = dir.join("missing.pem");
        let error = server_config(&missing, &key).unwrap_err();
        assert!(error.contains(&missing.display().to_string()), "{error}");
        let error = server_config(&key, &key).unwrap_err();
        assert!(error.contains("no certificate"), "{error}");
        std::fs::write(&key, vec![b'A'; MAX_PEM_FILE_BYTES as usize + 1]).unwrap();
        let error = server_config(&cert, &key).unwrap_err();
        assert!(error.contains("larger than"), "{error}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn installing_the_provider_twice_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
