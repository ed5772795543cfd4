//! Signature verification.

use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rsa::RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey as _;
use rsa::signature::Verifier as _;
use sha1::Sha1;
use sha2::Sha256;
use url::Url;
use x509_cert::Certificate;
use x509_cert::der::{Decode as _, Encode as _};

use crate::error::VerifyError;
use crate::message::{SignatureVersion, SnsMessage, string_to_sign};
use crate::policy::{CertUrlPolicy, TopicPolicy};

/// A parsed signing certificate: its RSA public key and validity window.
///
/// Parse once and keep it (e.g. cached by `SigningCertURL`) to verify many messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningCert {
    key: RsaPublicKey,
    not_before: SystemTime,
    not_after: SystemTime,
}

impl SigningCert {
    /// Parses a PEM certificate (the first one, if a chain is given) or a DER certificate,
    /// and takes its RSA public key.
    pub fn from_pem(cert: &[u8]) -> Result<Self, VerifyError> {
        let bad = |e: &dyn std::fmt::Display| VerifyError::BadCertificate(e.to_string());
        let cert = if cert.trim_ascii_start().starts_with(b"-----BEGIN") {
            Certificate::load_pem_chain(cert)
                .map_err(|e| bad(&e))?
                .into_iter()
                .next()
                .ok_or_else(|| bad(&"no certificate in PEM"))?
        } else {
            Certificate::from_der(cert).map_err(|e| bad(&e))?
        };
        let tbs = &cert.tbs_certificate;
        let spki = tbs.subject_public_key_info.to_der().map_err(|e| bad(&e))?;
        let key = RsaPublicKey::from_public_key_der(&spki).map_err(|e| bad(&e))?;
        Ok(Self {
            key,
            not_before: tbs.validity.not_before.to_system_time(),
            not_after: tbs.validity.not_after.to_system_time(),
        })
    }

    /// The RSA public key.
    pub fn public_key(&self) -> &RsaPublicKey {
        &self.key
    }

    /// The certificate's `notBefore`.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// The certificate's `notAfter`.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// Checks that `at` lies within the validity window (both ends inclusive).
    pub fn check_validity_at(&self, at: SystemTime) -> Result<(), VerifyError> {
        if at < self.not_before {
            Err(VerifyError::CertNotYetValid)
        } else if at > self.not_after {
            Err(VerifyError::CertExpired)
        } else {
            Ok(())
        }
    }

    /// Checks `msg.Signature` over [`string_to_sign`] with the algorithm its
    /// `SignatureVersion` names. Checks no policy and no validity window.
    pub fn verify_signature(&self, msg: &SnsMessage) -> Result<(), VerifyError> {
        let version = msg.signature_version()?;
        let data = string_to_sign(msg)?;
        let raw = STANDARD
            .decode(&msg.signature)
            .map_err(|_| VerifyError::BadBase64)?;
        let signature =
            Signature::try_from(raw.as_slice()).map_err(|_| VerifyError::BadSignature)?;
        let key = self.key.clone();
        let result = match version {
            SignatureVersion::V1 => {
                VerifyingKey::<Sha1>::new(key).verify(data.as_bytes(), &signature)
            }
            SignatureVersion::V2 => {
                VerifyingKey::<Sha256>::new(key).verify(data.as_bytes(), &signature)
            }
        };
        result.map_err(|_| VerifyError::BadSignature)
    }
}

/// Checks only the signature of `msg` against the certificate `cert_pem`: no URL or topic
/// policy and no validity window (see [`Verifier`] for those).
pub fn verify(msg: &SnsMessage, cert_pem: &[u8]) -> Result<(), VerifyError> {
    SigningCert::from_pem(cert_pem)?.verify_signature(msg)
}

/// Full verification: topic and certificate-URL allowlists, then the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    cert_urls: CertUrlPolicy,
    topics: TopicPolicy,
}

impl Verifier {
    /// A verifier with these allowlists.
    pub fn new(cert_urls: CertUrlPolicy, topics: TopicPolicy) -> Self {
        Self { cert_urls, topics }
    }

    /// The checks to run before fetching the certificate: the topic is allowed, the
    /// `SignatureVersion` is supported and the `SigningCertURL` is allowed. Returns the
    /// parsed URL to fetch.
    pub fn check_before_fetch(&self, msg: &SnsMessage) -> Result<Url, VerifyError> {
        self.topics.check(&msg.topic_arn)?;
        msg.signature_version()?;
        self.cert_urls.check(&msg.signing_cert_url)
    }

    /// [`Verifier::check_before_fetch`], then the signature against `cert_pem` (the
    /// certificate fetched from `SigningCertURL`). Ignores the certificate's validity window.
    pub fn verify(&self, msg: &SnsMessage, cert_pem: &[u8]) -> Result<(), VerifyError> {
        self.check_before_fetch(msg)?;
        SigningCert::from_pem(cert_pem)?.verify_signature(msg)
    }

    /// As [`Verifier::verify`], and also requires the certificate to be valid at `at`
    /// (normally `SystemTime::now()`).
    pub fn verify_at(
        &self,
        msg: &SnsMessage,
        cert_pem: &[u8],
        at: SystemTime,
    ) -> Result<(), VerifyError> {
        self.check_before_fetch(msg)?;
        let cert = SigningCert::from_pem(cert_pem)?;
        cert.verify_signature(msg)?;
        cert.check_validity_at(at)
    }

    /// As [`Verifier::verify`], with an already parsed certificate (e.g. from a cache keyed
    /// by the URL that [`Verifier::check_before_fetch`] returned).
    pub fn verify_cert(&self, msg: &SnsMessage, cert: &SigningCert) -> Result<(), VerifyError> {
        self.check_before_fetch(msg)?;
        cert.verify_signature(msg)
    }
}
