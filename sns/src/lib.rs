//! Signing and verification of AWS SNS HTTP(S) notifications.
//!
//! bKash delivers its IPN (instant payment notification) webhooks through Amazon SNS: every
//! callback is an SNS HTTP delivery, a JSON document signed with RSA by AWS and carrying the
//! URL of the X.509 certificate whose key made the signature. sellout has two sides of that
//! wire, and this crate is what they share so that they can never disagree:
//!
//! * the mock payment gateway **signs** its notifications the way AWS does, with its own RSA
//!   key and a self-signed certificate ([`Signer`]);
//! * the booking system **verifies** notifications, whether they come from the mock or from
//!   real AWS ([`Verifier`], [`verify`]).
//!
//! The canonical "string to sign" ([`string_to_sign`]) and both signature versions
//! (`SignatureVersion` `1` = SHA1withRSA, `2` = SHA256withRSA, both RSASSA-PKCS1-v1_5) agree
//! byte for byte with AWS; the test suite checks this against real AWS-signed messages and
//! against the `openssl` command line.
//!
//! Verifying an SNS message safely takes four steps, in this order:
//!
//! 1. parse the body with [`SnsMessage::from_json`];
//! 2. check the topic and the `SigningCertURL` against allowlists **before fetching anything**
//!    ([`Verifier::check_before_fetch`], built from a [`TopicPolicy`] and a [`CertUrlPolicy`]);
//!    otherwise an attacker picks the certificate that "proves" their forgery;
//! 3. fetch the certificate (the caller's job: this crate does no I/O);
//! 4. check the signature with it ([`Verifier::verify`], or [`Verifier::verify_at`] to also
//!    check the certificate's validity window).
//!
//! ```no_run
//! # fn fetch(_: &url::Url) -> Vec<u8> { unimplemented!() }
//! # fn demo(body: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
//! use sns::{CertUrlPolicy, SnsMessage, TopicPolicy, Verifier};
//!
//! let verifier = Verifier::new(
//!     CertUrlPolicy::aws(),
//!     TopicPolicy::only(["arn:aws:sns:ap-southeast-1:123456789012:bkash-ipn"]),
//! );
//! let msg = SnsMessage::from_json(body)?;
//! let cert_url = verifier.check_before_fetch(&msg)?;
//! let cert_pem = fetch(&cert_url);
//! verifier.verify_at(&msg, &cert_pem, std::time::SystemTime::now())?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod error;
mod message;
mod policy;
mod signer;
mod verify;

pub use error::{KeyError, ParseError, PolicyError, SignError, VerifyError};
pub use message::{
    HEADER_MESSAGE_ID, HEADER_MESSAGE_TYPE, HEADER_TOPIC_ARN, MessageType, SignatureVersion,
    SnsMessage, string_to_sign,
};
pub use policy::{CertUrlPolicy, TopicPolicy};
pub use signer::Signer;
pub use verify::{SigningCert, Verifier, verify};
