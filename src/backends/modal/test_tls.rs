//! For the clients' tests: a TLS server builder with a certificate for `name` signed by a CA
//! made here, and a loopback listener.

use std::net::SocketAddr;

use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Identity, Server, ServerTlsConfig};

/// A tonic server builder serving TLS for `name`, the CA's PEM, a listener on 127.0.0.1 and
/// its address.
pub(super) async fn tls_server(name: &str) -> (Server, Vec<u8>, TcpListenerStream, SocketAddr) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(vec![name.to_owned()]).unwrap().signed_by(&key, &issuer).unwrap();
    let identity = Identity::from_pem(cert.pem(), key.serialize_pem());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::builder().tls_config(ServerTlsConfig::new().identity(identity)).unwrap();
    (server, ca.pem().into_bytes(), TcpListenerStream::new(listener), addr)
}
