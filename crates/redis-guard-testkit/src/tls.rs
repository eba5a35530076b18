//! Certificates made at run time for TLS servers: a certificate authority, a server certificate
//! for `127.0.0.1` and `localhost` signed by it, and a client certificate for mutual TLS.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::TestkitError;

/// A private certificate authority and the certificates it signed, as PEM text. Each call of
/// [`generate`](Self::generate) makes a new authority, so two of them do not trust each other
/// (a test of a wrong CA uses a second one).
#[derive(Clone, Debug)]
pub struct TestTls {
    /// The authority's certificate: what a client trusts.
    pub ca_pem: String,
    /// The server's certificate (for `127.0.0.1` and `localhost`, usable by a server and as a
    /// client, as Redis uses it for replication and the cluster bus).
    pub server_cert_pem: String,
    /// The server's private key.
    pub server_key_pem: String,
    /// A client certificate, for servers that verify clients (`--tls-auth-clients yes`).
    pub client_cert_pem: String,
    /// The client certificate's private key.
    pub client_key_pem: String,
}

impl TestTls {
    /// Makes a new authority and its server and client certificates.
    ///
    /// # Errors
    ///
    /// The certificates could not be made (never expected).
    pub fn generate() -> Result<Self, TestkitError> {
        let err = |e: rcgen::Error| TestkitError::NotReady(format!("certificates: {e}"));
        let mut ca = CertificateParams::default();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca.distinguished_name
            .push(DnType::CommonName, "redis-guard test CA");
        let ca_key = KeyPair::generate().map_err(err)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(err)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(err)?;
        server.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let server_key = KeyPair::generate().map_err(err)?;
        let server_cert = server.signed_by(&server_key, &issuer).map_err(err)?;

        let mut client =
            CertificateParams::new(vec!["redis-guard-client".to_owned()]).map_err(err)?;
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_key = KeyPair::generate().map_err(err)?;
        let client_cert = client.signed_by(&client_key, &issuer).map_err(err)?;

        Ok(Self {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
            client_cert_pem: client_cert.pem(),
            client_key_pem: client_key.serialize_pem(),
        })
    }

    /// What a redis-rs client needs to connect to a server of this authority: its CA, and the
    /// client certificate.
    #[must_use]
    pub fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: Some(redis::ClientTlsConfig {
                client_cert: self.client_cert_pem.clone().into_bytes(),
                client_key: self.client_key_pem.clone().into_bytes(),
            }),
            root_cert: Some(self.ca_pem.clone().into_bytes()),
        }
    }

    /// Writes the PEM files into `dir` and returns the `redis-server` arguments of a TLS-only
    /// server on `port`: no plain port, clients verified as `auth_clients` says (`no`,
    /// `optional`, `yes`).
    pub(crate) fn server_args(
        &self,
        dir: &std::path::Path,
        port: u16,
        auth_clients: &str,
    ) -> std::io::Result<Vec<String>> {
        Ok(self
            .server_config(dir, port, auth_clients)?
            .into_iter()
            .flat_map(|(name, value)| [format!("--{name}"), value])
            .collect())
    }

    /// Writes the PEM files into `dir` and returns the settings (name, value) of a TLS-only
    /// server on `port`, as [`server_args`](Self::server_args) passes them, for a
    /// configuration file.
    pub(crate) fn server_config(
        &self,
        dir: &std::path::Path,
        port: u16,
        auth_clients: &str,
    ) -> std::io::Result<Vec<(&'static str, String)>> {
        let write = |name: &str, pem: &str| -> std::io::Result<String> {
            let path = dir.join(name);
            std::fs::write(&path, pem)?;
            Ok(path.display().to_string())
        };
        Ok(vec![
            ("port", "0".into()),
            ("tls-port", port.to_string()),
            ("tls-cert-file", write("server.pem", &self.server_cert_pem)?),
            ("tls-key-file", write("server.key", &self.server_key_pem)?),
            ("tls-ca-cert-file", write("ca.pem", &self.ca_pem)?),
            ("tls-auth-clients", auth_clients.into()),
        ])
    }
}
