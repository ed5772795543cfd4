//! Signing with an RSA key and its self-signed certificate, as the mock gateway does.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rsa::pkcs1::DecodeRsaPrivateKey as _;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::der::zeroize::Zeroizing;
use rsa::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _, LineEnding};
use rsa::signature::{RandomizedSigner as _, SignatureEncoding as _};
use rsa::traits::PublicKeyParts as _;
use rsa::{RsaPrivateKey, RsaPublicKey};
use sha1::Sha1;
use sha2::Sha256;
use x509_cert::builder::{Builder as _, CertificateBuilder, Profile};
use x509_cert::der::asn1::{SetOfVec, Utf8StringRef};
use x509_cert::der::{Any, EncodePem as _};
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::{Time, Validity};

use crate::error::{KeyError, SignError};
use crate::message::{SignatureVersion, SnsMessage, string_to_sign};
use crate::verify::SigningCert;

/// RSA modulus size of generated keys, and the minimum accepted by [`Signer::from_pem`].
const KEY_BITS: usize = 2048;
/// Generated certificates are valid from a day before creation (clock skew) …
const BACKDATE: Duration = Duration::from_secs(24 * 60 * 60);
/// … to a year after it.
const LIFETIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// An RSA private key and its self-signed X.509 certificate, signing SNS messages.
///
/// SignatureVersion 2 (SHA256withRSA) signs with AWS-LC (`aws-lc-rs`), about
/// four times faster than the pure-Rust `rsa` crate (`examples/sign_rate.rs`:
/// the mock gateway signs one message per webhook, thousands a second in a
/// rehearsal); version 1 (SHA1withRSA), which AWS-LC does not sign, uses the
/// `rsa` crate. Both produce the same deterministic PKCS#1 v1.5 signature.
#[derive(Clone)]
pub struct Signer {
    v1: SigningKey<Sha1>,
    v2: Arc<aws_lc_rs::rsa::KeyPair>,
    key_pem: Zeroizing<String>,
    cert_pem: String,
    cert: SigningCert,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("cert", &self.cert)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// Generates a fresh 2048-bit RSA key and a self-signed certificate for it with subject
    /// `CN=<common_name>`, valid from a day ago for a year, signed with SHA256withRSA.
    pub fn generate(common_name: &str) -> Result<Self, KeyError> {
        let mut rng = rand::thread_rng();
        let key = RsaPrivateKey::new(&mut rng, KEY_BITS)
            .map_err(|e| KeyError::Generate(e.to_string()))?;
        let cert_pem = self_signed_cert(&key, common_name)?;
        Self::assemble(key, cert_pem)
    }

    /// Loads a private key (PKCS#8 `PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY` PEM, at least
    /// 2048 bits) and the PEM certificate of its public key.
    pub fn from_pem(key_pem: &str, cert_pem: &str) -> Result<Self, KeyError> {
        let key = RsaPrivateKey::from_pkcs8_pem(key_pem)
            .or_else(|_| RsaPrivateKey::from_pkcs1_pem(key_pem))
            .map_err(|e| KeyError::BadKey(e.to_string()))?;
        Self::assemble(key, cert_pem.to_owned())
    }

    fn assemble(key: RsaPrivateKey, cert_pem: String) -> Result<Self, KeyError> {
        let bits = key.size() * 8;
        if bits < KEY_BITS {
            return Err(KeyError::WeakKey(bits));
        }
        let cert = SigningCert::from_pem(cert_pem.as_bytes())
            .map_err(|e| KeyError::BadCertificate(e.to_string()))?;
        if cert.public_key() != &RsaPublicKey::from(&key) {
            return Err(KeyError::KeyMismatch);
        }
        let key_pem = key
            .to_pkcs8_pem(LineEnding::LF)
            .map_err(|e| KeyError::BadKey(e.to_string()))?;
        let der = key
            .to_pkcs8_der()
            .map_err(|e| KeyError::BadKey(e.to_string()))?;
        let v2 = aws_lc_rs::rsa::KeyPair::from_pkcs8(der.as_bytes())
            .map_err(|e| KeyError::BadKey(e.to_string()))?;
        Ok(Self {
            v1: SigningKey::new(key),
            v2: Arc::new(v2),
            key_pem,
            cert_pem,
            cert,
        })
    }

    /// The certificate, PEM-encoded: serve this at the messages' `SigningCertURL`.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The private key, PKCS#8 PEM-encoded (`-----BEGIN PRIVATE KEY-----`).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// The parsed certificate, for verifying this signer's own messages.
    pub fn signing_cert(&self) -> &SigningCert {
        &self.cert
    }

    /// Sets `msg.SignatureVersion` to `version` and `msg.Signature` to the base64
    /// RSASSA-PKCS1-v1_5 signature over [`string_to_sign`] (SHA-1 for v1, SHA-256 for v2).
    /// Every other field, including `SigningCertURL`, is the caller's to fill in.
    pub fn sign(&self, msg: &mut SnsMessage, version: SignatureVersion) -> Result<(), SignError> {
        msg.signature_version = version.as_str().to_owned();
        let data = string_to_sign(msg)?;
        let signature = match version {
            SignatureVersion::V1 => {
                let mut rng = rand::thread_rng(); // for RSA blinding
                self.v1
                    .try_sign_with_rng(&mut rng, data.as_bytes())
                    .map_err(|e| SignError::Rsa(e.to_string()))?
                    .to_vec()
            }
            SignatureVersion::V2 => {
                let mut out = vec![0u8; self.v2.public_modulus_len()];
                self.v2
                    .sign(
                        &aws_lc_rs::signature::RSA_PKCS1_SHA256,
                        &aws_lc_rs::rand::SystemRandom::new(),
                        data.as_bytes(),
                        &mut out,
                    )
                    .map_err(|e| SignError::Rsa(e.to_string()))?;
                out
            }
        };
        msg.signature = STANDARD.encode(signature);
        Ok(())
    }
}

fn self_signed_cert(key: &RsaPrivateKey, common_name: &str) -> Result<String, KeyError> {
    let bad = |e: &dyn fmt::Display| KeyError::BadCertificate(e.to_string());
    let cn = Any::encode_from(&Utf8StringRef::new(common_name).map_err(|e| bad(&e))?)
        .map_err(|e| bad(&e))?;
    let rdn = SetOfVec::try_from(vec![x509_cert::attr::AttributeTypeAndValue {
        oid: x509_cert::der::oid::db::rfc4519::CN,
        value: cn,
    }])
    .map_err(|e| bad(&e))?;
    let subject: Name = RdnSequence(vec![RelativeDistinguishedName(rdn)]);

    let mut serial = [0u8; 16];
    rand::Rng::fill(&mut rand::thread_rng(), &mut serial);
    serial[0] = (serial[0] & 0x7f) | 0x40; // positive, and exactly 16 bytes long
    let serial = SerialNumber::new(&serial).map_err(|e| bad(&e))?;

    let now = SystemTime::now();
    let validity = Validity {
        not_before: Time::try_from(now - BACKDATE).map_err(|e| bad(&e))?,
        not_after: Time::try_from(now + LIFETIME).map_err(|e| bad(&e))?,
    };
    let spki = SubjectPublicKeyInfoOwned::from_key(RsaPublicKey::from(key)).map_err(|e| bad(&e))?;
    let signer = SigningKey::<Sha256>::new(key.clone());
    let profile = Profile::Leaf {
        issuer: subject.clone(),
        enable_key_agreement: false,
        enable_key_encipherment: false,
    };
    let cert = CertificateBuilder::new(profile, serial, validity, subject, spki, &signer)
        .map_err(|e| bad(&e))?
        .build_with_rng::<rsa::pkcs1v15::Signature>(&mut rand::thread_rng())
        .map_err(|e| bad(&e))?;
    cert.to_pem(LineEnding::LF).map_err(|e| bad(&e))
}
