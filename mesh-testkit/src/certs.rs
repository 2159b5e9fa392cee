//! Throwaway certificates made in the test's process (rcgen, no `openssl` command): a CA, a
//! server certificate for `localhost` and `127.0.0.1` signed by it, and its key, as PEM
//! files in a fresh temporary directory removed when the [`TestCertificates`] is dropped.

use std::io;
use std::path::PathBuf;

/// A CA, a server certificate it signed, the server's key, and a key of no certificate (for
/// the tests of a key that does not match).
#[derive(Debug)]
pub struct TestCertificates {
    /// The directory holding the files (removed on drop).
    pub dir: PathBuf,
    /// `ca.pem`: the CA's certificate, what a client trusts.
    pub ca: PathBuf,
    /// The CA's certificate as PEM text.
    pub ca_pem: String,
    /// `server.pem`: the server's certificate (for `localhost` and `127.0.0.1`) then the CA's.
    pub cert: PathBuf,
    /// `server.key`: the server's private key (PKCS#8 PEM, ECDSA P-256).
    pub key: PathBuf,
    /// `other.key`: a private key of no certificate here.
    pub other_key: PathBuf,
}

impl TestCertificates {
    /// Makes the CA, the certificate and the keys in a fresh temporary directory.
    pub fn generate() -> io::Result<TestCertificates> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
            IsCa, KeyPair, KeyUsagePurpose,
        };
        let rcgen_error = |e: rcgen::Error| io::Error::other(format!("rcgen: {e}"));
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "mesh-testkit-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().map_err(rcgen_error)?)
            .map_err(rcgen_error)?;
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
                .map_err(rcgen_error)?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate().map_err(rcgen_error)?;
        let server = server_params
            .signed_by(&server_key, &ca)
            .map_err(rcgen_error)?;
        let other_key = KeyPair::generate().map_err(rcgen_error)?;

        let dir = std::env::temp_dir().join(format!(
            "mesh-testkit-certs-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir)?;
        let certificates = TestCertificates {
            ca: dir.join("ca.pem"),
            ca_pem: ca.pem(),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            other_key: dir.join("other.key"),
            dir,
        };
        std::fs::write(&certificates.ca, &certificates.ca_pem)?;
        std::fs::write(
            &certificates.cert,
            format!("{}{}", server.pem(), certificates.ca_pem),
        )?;
        std::fs::write(&certificates.key, server_key.serialize_pem())?;
        std::fs::write(&certificates.other_key, other_key.serialize_pem())?;
        Ok(certificates)
    }
}

impl Drop for TestCertificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
