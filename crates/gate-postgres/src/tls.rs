//! TLS to PostgreSQL: the connection string's `sslmode` and `sslrootcert` (libpq's names and
//! meanings, PostgreSQL documentation 34.19 "SSL Support", Table 34.1), applied with rustls on
//! the aws-lc-rs provider through `tokio-postgres-rustls` (which also gives SCRAM its
//! `tls-server-end-point` channel binding).
//!
//! tokio-postgres knows only `disable`, `prefer` and `require` and no `sslrootcert`: they are
//! taken out of the connection string here (`split_connection_string`) and the driver is given
//! `disable`, `prefer` or `require`; the verification is this module's rustls configuration.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use gate::store::StoreError;

/// libpq's `sslmode`, parsed from the connection string:
///
/// | `sslmode` | encrypted | the certificate's chain | the host name in the certificate |
/// | --- | --- | --- | --- |
/// | `disable` | no | | |
/// | `prefer` | if the server offers it | checked only with a CA bundle | no |
/// | `require` | yes | checked only with a CA bundle | no |
/// | `verify-ca` | yes | checked | no |
/// | `verify-full` (**the default here**) | yes | checked | checked |
///
/// The default differs from libpq's (`prefer`): a connection string without `sslmode` is
/// [`SslMode::VerifyFull`], so a deployment is encrypted and authenticated unless it says
/// otherwise. A local server without TLS needs `sslmode=disable` in its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it, else plain; the certificate unchecked without a CA bundle.
    Prefer,
    /// TLS; the certificate unchecked without a CA bundle (checked as `verify-ca` with one).
    Require,
    /// TLS; the certificate's chain checked against the roots, not its host name.
    VerifyCa,
    /// TLS; the chain checked and the certificate naming the host connected to.
    #[default]
    VerifyFull,
}

impl SslMode {
    /// The mode named `s` (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`; libpq's
    /// `allow` is not supported: it would fall back to plain text).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "disable" => Some(Self::Disable),
            "prefer" => Some(Self::Prefer),
            "require" => Some(Self::Require),
            "verify-ca" => Some(Self::VerifyCa),
            "verify-full" => Some(Self::VerifyFull),
            _ => None,
        }
    }

    /// The libpq name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    /// What the driver is told: whether to ask for TLS and whether to insist.
    fn driver(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require | Self::VerifyCa | Self::VerifyFull => "require",
        }
    }
}

/// Where the CA certificates (roots) a chain is checked against come from: the PEM file of the
/// connection string's `sslrootcert=PATH`, or the file of [`super::PostgresConfig::ca_bundle`]
/// (the Lambda wiring's `DATABASE_CA_BUNDLE`), or (neither, or `sslrootcert=system`) the
/// system's roots. RDS and Aurora present certificates of the RDS certificate authorities, which
/// are in no system store: ship AWS's `global-bundle.pem`
/// (<https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem>) with the function and
/// name it. RDS Proxy presents an Amazon Trust Services certificate, in the system roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's trust store (`rustls-native-certs`).
    System,
    /// A PEM file of CA certificates (the RDS `global-bundle.pem`).
    Bundle(PathBuf),
}

/// The TLS settings taken out of a connection string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsParams {
    pub mode: SslMode,
    /// `sslrootcert`: `None` when absent.
    pub roots: Option<Roots>,
}

const TLS_KEYS: [&str; 2] = ["sslmode", "sslrootcert"];

/// A connection string without its TLS keys, and those keys with their (decoded) values.
type Split = (String, Vec<(&'static str, String)>);

/// Splits `conn` (a `postgresql://` URL or a libpq `key=value` string) into the connection
/// string for tokio-postgres (its `sslmode` replaced by `disable`, `prefer` or `require`, no
/// `sslrootcert`) and the TLS settings.
///
/// # Errors
/// An unknown `sslmode` or an unterminated quote; the message never quotes the string (it holds
/// the password).
pub(crate) fn split_connection_string(conn: &str) -> Result<(String, TlsParams), String> {
    let conn = conn.trim();
    let is_url = conn.starts_with("postgres://") || conn.starts_with("postgresql://");
    let (kept, found) = if is_url {
        split_url(conn)
    } else {
        split_key_values(conn)?
    };
    let mut params = TlsParams {
        mode: SslMode::default(),
        roots: None,
    };
    for (key, value) in found {
        match key {
            "sslmode" => {
                params.mode = SslMode::parse(&value).ok_or(
                    "sslmode is not one of disable, prefer, require, verify-ca, verify-full",
                )?;
            }
            _ if value == "system" => params.roots = Some(Roots::System),
            _ if value.is_empty() => return Err("sslrootcert is empty".to_string()),
            _ => params.roots = Some(Roots::Bundle(PathBuf::from(value))),
        }
    }
    let driver = format!("sslmode={}", params.mode.driver());
    let rebuilt = if is_url {
        let after_userinfo = kept.find('@').map_or(0, |at| at + 1);
        let separator = if kept[after_userinfo..].contains('?') {
            '&'
        } else {
            '?'
        };
        format!("{kept}{separator}{driver}")
    } else if kept.is_empty() {
        driver
    } else {
        format!("{kept} {driver}")
    };
    Ok((rebuilt, params))
}

/// The URL without the TLS keys of its query, and their percent-decoded values.
fn split_url(url: &str) -> Split {
    // The query starts at the first `?` after the authority's userinfo: a password may hold a
    // raw `?` (Secrets Manager's generated passwords can), and tokio-postgres reads the
    // credentials up to the first `@` (its `parse_credentials`), as this does.
    let after_userinfo = url.find('@').map_or(0, |at| at + 1);
    let Some(q) = url[after_userinfo..].find('?') else {
        return (url.to_string(), Vec::new());
    };
    let (base, query) = (&url[..after_userinfo + q], &url[after_userinfo + q + 1..]);
    let mut kept = Vec::new();
    let mut found = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match TLS_KEYS.iter().find(|k| **k == key) {
            Some(k) => found.push((
                *k,
                percent_decode_str(value).decode_utf8_lossy().into_owned(),
            )),
            None => kept.push(pair),
        }
    }
    let rebuilt = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (rebuilt, found)
}

/// The `key=value` string without the TLS keys (every other value re-quoted), and their values.
/// The grammar is libpq's (and tokio-postgres'): `key = value` separated by whitespace, a value
/// single-quoted or bare, `\` escaping the next character in either.
fn split_key_values(conn: &str) -> Result<Split, String> {
    let mut chars = conn.chars().peekable();
    let mut kept = Vec::new();
    let mut found = Vec::new();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err("a connection string key without `=`".to_string());
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\'') => break,
                    Some('\\') => value.push(chars.next().ok_or("an unterminated quote")?),
                    Some(c) => value.push(c),
                    None => return Err("an unterminated quote".to_string()),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or("a trailing backslash")?);
                } else {
                    value.push(c);
                }
            }
        }
        match TLS_KEYS.iter().find(|k| **k == key) {
            Some(k) => found.push((*k, value)),
            None => {
                let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
                kept.push(format!("{key}='{quoted}'"));
            }
        }
    }
    Ok((kept.join(" "), found))
}

/// The connector for `mode` with the CA certificates of `roots` (`None`: the system's). With
/// [`SslMode::Disable`] it is never used (no root is loaded).
///
/// # Errors
/// [`StoreError::Corrupt`] (a configuration error): the bundle cannot be read or holds no
/// certificate, or no system root could be loaded; the message names the file.
pub(crate) fn connector(
    mode: SslMode,
    roots: Option<&Roots>,
) -> Result<MakeRustlsConnect, StoreError> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::corrupt(format!("TLS: {e}"), e))?;
    let verifier: Arc<dyn ServerCertVerifier> = match (mode, roots) {
        (SslMode::Disable, _) | (SslMode::Prefer | SslMode::Require, None) => {
            Arc::new(HostNotChecked {
                chain: None,
                provider,
            })
        }
        (SslMode::VerifyFull, roots) => webpki(load_roots(roots)?, &provider)?,
        (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, roots) => {
            Arc::new(HostNotChecked {
                chain: Some(webpki(load_roots(roots)?, &provider)?),
                provider,
            })
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn webpki(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, StoreError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| StoreError::corrupt(format!("TLS: the CA certificates: {e}"), e))
}

/// The CA certificates of `roots` (`None`: the system's).
fn load_roots(roots: Option<&Roots>) -> Result<RootCertStore, StoreError> {
    let mut store = RootCertStore::empty();
    match roots {
        Some(Roots::Bundle(path)) => {
            let certs = read_bundle(path)?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(StoreError::Corrupt(
                    format!(
                        "TLS: the CA bundle {} holds no usable certificate",
                        path.display()
                    )
                    .into(),
                ));
            }
        }
        None | Some(Roots::System) => {
            let loaded = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(loaded.certs);
            if added == 0 {
                return Err(StoreError::Corrupt(
                    "TLS: no system root certificate could be loaded; name a CA bundle \
                     (DATABASE_CA_BUNDLE, or sslrootcert= in the connection string)"
                        .to_string()
                        .into(),
                ));
            }
        }
    }
    Ok(store)
}

fn read_bundle(path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let unreadable = |e: &dyn std::fmt::Display| {
        StoreError::Corrupt(format!("TLS: the CA bundle {}: {e}", path.display()).into())
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if certs.is_empty() {
        return Err(unreadable(&"no PEM certificate in it"));
    }
    Ok(certs)
}

/// Every mode but `verify-full` (which is webpki's own verifier): the handshake's signatures
/// checked with the provider's algorithms (the ones webpki's verifier checks them with), so the
/// key exchange is with the holder of the certificate's key; the certificate as `chain` says.
///
/// * `Some` (`verify-ca`; `prefer` and `require` with a CA bundle): the chain checked by webpki,
///   a certificate not naming the host accepted (webpki checks the name only after the chain, so
///   this error means the chain held).
/// * `None` (`prefer` and `require` without a CA bundle, libpq's meaning): the certificate not
///   checked. Open to an active man in the middle: `verify-full` is the default.
#[derive(Debug)]
struct HostNotChecked {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for HostNotChecked {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(conn: &str) -> (String, TlsParams) {
        split_connection_string(conn).unwrap()
    }

    #[test]
    fn verify_full_is_the_default_and_the_driver_is_told_require() {
        let (url, tls) = split("postgresql://gate:pw@db.example:5432/gate");
        assert_eq!(
            url,
            "postgresql://gate:pw@db.example:5432/gate?sslmode=require"
        );
        assert_eq!(
            tls,
            TlsParams {
                mode: SslMode::VerifyFull,
                roots: None
            }
        );
        let (kv, tls) = split("host=db user=gate password=pw");
        assert_eq!(kv, "host='db' user='gate' password='pw' sslmode=require");
        assert_eq!(tls.mode, SslMode::VerifyFull);
    }

    #[test]
    fn url_sslmode_and_sslrootcert_are_taken_out() {
        let (url, tls) = split(
            "postgres://u:p@h/db?application_name=x&sslmode=verify-ca&sslrootcert=%2Fopt%2Frds.pem",
        );
        assert_eq!(
            url,
            "postgres://u:p@h/db?application_name=x&sslmode=require"
        );
        assert_eq!(tls.mode, SslMode::VerifyCa);
        assert_eq!(
            tls.roots,
            Some(Roots::Bundle(PathBuf::from("/opt/rds.pem")))
        );
        let (url, tls) = split("postgresql://u@h/db?sslmode=disable");
        assert_eq!(url, "postgresql://u@h/db?sslmode=disable");
        assert_eq!(tls.mode, SslMode::Disable);
        let (url, tls) = split("postgresql://u@h/db?sslmode=prefer&sslrootcert=system");
        assert_eq!(url, "postgresql://u@h/db?sslmode=prefer");
        assert_eq!(
            tls,
            TlsParams {
                mode: SslMode::Prefer,
                roots: Some(Roots::System)
            }
        );
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        // Secrets Manager may generate `?` and `&` in a password; the default stays verify-full
        // and the driver is told `require`, after the path (its own reading).
        let (url, tls) = split("postgresql://gate:p?w&x@db.example/gate");
        assert_eq!(
            url,
            "postgresql://gate:p?w&x@db.example/gate?sslmode=require"
        );
        assert_eq!(tls.mode, SslMode::VerifyFull);
        let cfg: tokio_postgres::Config = url.parse().unwrap();
        assert_eq!(cfg.get_password(), Some(&b"p?w&x"[..]));
        assert_eq!(cfg.get_dbname(), Some("gate"));
        assert_eq!(cfg.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        let (url, tls) = split("postgresql://gate:p?w@db.example/gate?sslmode=verify-ca");
        assert_eq!(url, "postgresql://gate:p?w@db.example/gate?sslmode=require");
        assert_eq!(tls.mode, SslMode::VerifyCa);
    }

    #[test]
    fn key_value_quotes_and_escapes_survive() {
        let (kv, tls) = split(
            r"host = db  password='it\'s \\ y' sslmode=verify-full sslrootcert='/a b/ca.pem'",
        );
        assert_eq!(kv, r"host='db' password='it\'s \\ y' sslmode=require");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.roots, Some(Roots::Bundle(PathBuf::from("/a b/ca.pem"))));
        // The rewritten string means the same to the driver.
        let cfg: tokio_postgres::Config = kv.parse().unwrap();
        assert_eq!(cfg.get_password(), Some(&b"it's \\ y"[..]));
    }

    #[test]
    fn a_bad_sslmode_is_refused_without_quoting_the_string() {
        for conn in [
            "postgresql://u:SECRETPW@h/db?sslmode=allow",
            "host=h password=SECRETPW sslmode=verify",
            "host=h password='SECRETPW",
        ] {
            let e = split_connection_string(conn).unwrap_err();
            assert!(!e.contains("SECRETPW"), "{e}");
        }
    }

    #[test]
    fn a_missing_bundle_is_named() {
        let e = connector(
            SslMode::VerifyFull,
            Some(&Roots::Bundle(PathBuf::from("/nonexistent/ca.pem"))),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        assert!(connector(SslMode::Disable, None).is_ok());
    }
}
