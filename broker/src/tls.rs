//! The TLS settings of a listener, from PEM files named in the configuration. Any problem
//! (a missing file, no certificate, no key, a key that does not fit the certificate) stops
//! the start with the file named: a broker must not quietly serve plain text instead.

use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The acceptor for `cert` (the chain, leaf first) and `key`; `what` names the listener in
/// errors (`tls_cert_file`, `kafka_tls_cert_file`...).
pub fn acceptor(cert: &Path, key: &Path, what: &str) -> anyhow::Result<TlsAcceptor> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| {
            anyhow!(
                "{what}: cannot read certificates from {}: {e}",
                cert.display()
            )
        })?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow!("{what}: bad PEM in {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(anyhow!(
            "{what}: {} holds no PEM certificate",
            cert.display()
        ));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow!(
            "{what}: no usable PEM private key in {}: {e}",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .with_context(|| format!("{what}: the key does not fit the certificate chain"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_or_empty_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        let missing = dir.path().join("missing.pem");
        let err = acceptor(&missing, &missing, "tls_cert_file")
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(
            err.contains("missing.pem") && err.contains("tls_cert_file"),
            "{err}"
        );
        let err = acceptor(&empty, &empty, "kafka_tls_cert_file")
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("no PEM certificate"), "{err}");
    }
}
