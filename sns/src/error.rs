//! One error type per boundary: parsing, signing, key/certificate handling, policy building
//! and verification.

use std::net::IpAddr;

/// The body is not a well-formed SNS message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, not a JSON object, a field of the wrong JSON type, or a duplicated field.
    #[error("malformed SNS JSON: {0}")]
    MalformedJson(String),
    /// A field that this message type requires is absent (or `null`).
    #[error("required field `{0}` is missing")]
    MissingField(&'static str),
    /// `Type` is not one of the three SNS message types.
    #[error("unknown SNS message type {0:?}")]
    UnknownMessageType(String),
}

/// A message failed verification (or could not be checked at all).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The message lacks something needed to build its string to sign.
    #[error(transparent)]
    Malformed(#[from] ParseError),
    /// `SignatureVersion` is neither `1` nor `2`.
    #[error("unsupported SignatureVersion {0:?}")]
    UnsupportedSignatureVersion(String),
    /// `Signature` is not valid base64.
    #[error("Signature is not valid base64")]
    BadBase64,
    /// The certificate is not a PEM X.509 certificate with an RSA public key.
    #[error("bad signing certificate: {0}")]
    BadCertificate(String),
    /// `SigningCertURL` is not allowed by the [`crate::CertUrlPolicy`].
    #[error("SigningCertURL not allowed: {0}")]
    CertUrlNotAllowed(String),
    /// `TopicArn` is not allowed by the [`crate::TopicPolicy`].
    #[error("TopicArn not allowed: {0}")]
    TopicNotAllowed(String),
    /// The certificate's `notBefore` is after the time it was checked at.
    #[error("signing certificate is not yet valid")]
    CertNotYetValid,
    /// The certificate's `notAfter` is before the time it was checked at.
    #[error("signing certificate has expired")]
    CertExpired,
    /// The signature does not match the message and certificate.
    #[error("signature does not match")]
    BadSignature,
}

/// A message could not be signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The message lacks something needed to build its string to sign.
    #[error(transparent)]
    Malformed(#[from] ParseError),
    /// The RSA operation failed.
    #[error("RSA signing failed: {0}")]
    Rsa(String),
}

/// A signing key or certificate could not be generated or loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// RSA key generation failed.
    #[error("RSA key generation failed: {0}")]
    Generate(String),
    /// The private key PEM is neither PKCS#8 nor PKCS#1 RSA.
    #[error("bad private key: {0}")]
    BadKey(String),
    /// The key is shorter than 2048 bits.
    #[error("RSA key of {0} bits is too short (need at least 2048)")]
    WeakKey(usize),
    /// The certificate could not be built or parsed.
    #[error("bad certificate: {0}")]
    BadCertificate(String),
    /// The certificate's public key is not the private key's.
    #[error("certificate does not belong to the private key")]
    KeyMismatch,
}

/// A [`crate::CertUrlPolicy`] was asked to allow something unsafe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// Plain http is only allowed for loopback addresses.
    #[error("{0} is not a loopback address; plain http is only allowed on loopback")]
    NotLoopback(IpAddr),
    /// The host name is empty or not a valid domain.
    #[error("invalid host {0:?}")]
    BadHost(String),
}
