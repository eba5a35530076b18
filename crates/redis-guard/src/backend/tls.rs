//! [`TlsOptions`]: the certificates of a `rediss://` connection (feature `tls`).

use std::fmt;

use redis::{ErrorKind, RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The certificates of TLS connections (`rediss://` URLs, feature `tls`): which certificate
/// authorities to trust, and a client certificate for servers that ask for one (mutual TLS,
/// `tls-auth-clients yes`).
///
/// Without options a `rediss://` connection trusts the platform's root certificates and sends
/// no client certificate, which suits managed Redis services with public certificates. TLS is
/// rustls with the `ring` provider (installed as the process default if none is).
///
/// ```no_run
/// use redis_guard::backend::{ConnectOptions, TlsOptions};
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// // A private certificate authority, and a client certificate:
/// let tls = TlsOptions::new()
///     .ca_pem(std::fs::read("/etc/redis/ca.pem")?)
///     .client_cert(
///         std::fs::read("/etc/redis/client.pem")?,
///         std::fs::read("/etc/redis/client.key")?,
///     );
/// tls.validate()?;
/// let conn = ConnectOptions::new()
///     .tls(tls)
///     .open("rediss://app:secret@redis.internal:6380/")
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct TlsOptions {
    ca_pem: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl TlsOptions {
    /// No options: the platform's root certificates, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the certificate authorities in `pem` (one or more `CERTIFICATE` blocks), and only
    /// them, instead of the platform's roots.
    ///
    /// ```
    /// use redis_guard::backend::TlsOptions;
    /// let tls = TlsOptions::new().ca_pem("-----BEGIN CERTIFICATE-----\n…");
    /// assert!(tls.has_ca());
    /// ```
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.ca_pem = Some(pem.into());
        self
    }

    /// Presents the client certificate `cert_pem` (its chain, leaf first) with its private key
    /// `key_pem` (PKCS#8, PKCS#1 or SEC1), for servers that verify clients (mutual TLS).
    ///
    /// ```
    /// use redis_guard::backend::TlsOptions;
    /// let tls = TlsOptions::new().client_cert("cert…", "key…");
    /// assert!(tls.has_client_cert());
    /// ```
    pub fn client_cert(mut self, cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        self.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Whether a certificate authority of its own is trusted ([`ca_pem`](Self::ca_pem)).
    #[must_use]
    pub fn has_ca(&self) -> bool {
        self.ca_pem.is_some()
    }

    /// Whether a client certificate is presented ([`client_cert`](Self::client_cert)).
    #[must_use]
    pub fn has_client_cert(&self) -> bool {
        self.client.is_some()
    }

    /// Checks that the PEM data parse: the CA holds at least one certificate, the client
    /// certificate at least one and its key a private key. Connecting checks the same; this
    /// lets an application refuse a bad file at start, naming it.
    ///
    /// ```
    /// use redis_guard::backend::TlsOptions;
    /// let e = TlsOptions::new().ca_pem("not a certificate").validate().unwrap_err();
    /// assert!(e.to_string().contains("no certificate"));
    /// ```
    ///
    /// # Errors
    ///
    /// Kind [`InvalidClientConfig`](redis::ErrorKind::InvalidClientConfig), saying which part is
    /// wrong (never its contents).
    pub fn validate(&self) -> RedisResult<()> {
        if let Some(pem) = &self.ca_pem {
            certificates(pem, "the CA PEM")?;
        }
        if let Some((cert, key)) = &self.client {
            certificates(cert, "the client certificate PEM")?;
            PrivateKeyDer::from_pem_slice(key).map_err(|e| {
                invalid(format!("the client key PEM holds no private key ({e})"))
            })?;
        }
        Ok(())
    }

    /// The certificates as redis-rs takes them.
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.ca_pem.clone(),
        }
    }
}

/// Makes `ring` the process' rustls provider unless one is installed: redis-rs builds its TLS
/// configuration with the process default, which rustls cannot choose alone when an application
/// enables several providers.
pub(crate) fn install_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one meanwhile: theirs is as good. rustls deprecates
        // `ring` for lacking post-quantum key exchange; its alternative, aws-lc-rs, needs cmake
        // and a longer build. An application that wants it installs it first, and wins.
        #[allow(deprecated)]
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn certificates(pem: &[u8], what: &str) -> RedisResult<()> {
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| invalid(format!("{what} does not parse ({e})")))?;
        n += 1;
    }
    if n == 0 {
        return Err(invalid(format!(
            "{what} holds no certificate (no -----BEGIN CERTIFICATE----- block)"
        )));
    }
    Ok(())
}

fn invalid(detail: String) -> RedisError {
    RedisError::from((ErrorKind::InvalidClientConfig, "invalid TLS options", detail))
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Certificates are long and keys secret: only whether each is set.
        f.debug_struct("TlsOptions")
            .field("ca_pem", &self.ca_pem.is_some())
            .field("client_cert", &self.client.is_some())
            .finish()
    }
}
