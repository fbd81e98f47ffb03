//! A certificate authority made at start-up and a server certificate it signs for
//! `<domain>` and `*.<domain>`: the adapter trusts the CA through its test-only
//! constructor, so the stub is reached over real TLS.

use std::sync::Arc;

/// The CA's PEM and a TLS acceptor serving the signed certificate.
pub fn acceptor(domain: &str) -> (Vec<u8>, tokio_rustls::TlsAcceptor) {
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(rcgen::DnType::CommonName, "sandboxio e2b stub CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().expect("a server key");
    let params =
        rcgen::CertificateParams::new(vec![domain.to_owned(), format!("*.{domain}")]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("the server certificate");
    let chain = vec![cert.der().clone()];
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key_der)
            .expect("the server config");
    (ca_cert.pem().into_bytes(), tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
