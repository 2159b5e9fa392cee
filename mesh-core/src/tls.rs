//! TLS for every client in the workspace, done one way: rustls with its ring crypto
//! provider (aws-lc needs cmake and builds slowly cold), trusting the operating system's
//! roots (rustls-native-certs) and/or a PEM file of private CAs.
//!
//! - [`TlsRoots::client_config`] builds a client configuration with the ring provider given
//!   explicitly: the bus (`mqtts://`) and the gateway's webhook client use it.
//! - [`install_crypto_provider`] installs ring as the process-wide default provider. reqwest
//!   (built with `rustls-no-provider`) panics when a client is built without one, so every
//!   process that builds a reqwest client calls it first (it is cheap and idempotent).

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::path::PathBuf;
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
    fn installing_the_provider_twice_is_harmless() {
        install_crypto_provider();
        install_crypto_provider();
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
