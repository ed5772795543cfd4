//! The SNS HTTP message body and its canonical string to sign.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{ParseError, VerifyError};

/// HTTP header carrying the [`MessageType`] of an SNS delivery.
pub const HEADER_MESSAGE_TYPE: &str = "x-amz-sns-message-type";
/// HTTP header carrying the `MessageId` of an SNS delivery.
pub const HEADER_MESSAGE_ID: &str = "x-amz-sns-message-id";
/// HTTP header carrying the `TopicArn` of an SNS delivery.
pub const HEADER_TOPIC_ARN: &str = "x-amz-sns-topic-arn";

/// The `Type` of an SNS message (also sent in the [`HEADER_MESSAGE_TYPE`] header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum MessageType {
    /// A message published to the topic.
    #[default]
    Notification,
    /// Asks the endpoint to confirm a subscription by visiting `SubscribeURL`.
    SubscriptionConfirmation,
    /// Tells the endpoint it has been unsubscribed.
    UnsubscribeConfirmation,
}

impl MessageType {
    /// The value as it appears in `Type` and in the `x-amz-sns-message-type` header.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Notification => "Notification",
            Self::SubscriptionConfirmation => "SubscriptionConfirmation",
            Self::UnsubscribeConfirmation => "UnsubscribeConfirmation",
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MessageType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "Notification" => Ok(Self::Notification),
            "SubscriptionConfirmation" => Ok(Self::SubscriptionConfirmation),
            "UnsubscribeConfirmation" => Ok(Self::UnsubscribeConfirmation),
            other => Err(ParseError::UnknownMessageType(other.to_owned())),
        }
    }
}

/// The `SignatureVersion` of an SNS message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignatureVersion {
    /// `"1"`: RSASSA-PKCS1-v1_5 with SHA-1 (SHA1withRSA).
    V1,
    /// `"2"`: RSASSA-PKCS1-v1_5 with SHA-256 (SHA256withRSA).
    V2,
}

impl SignatureVersion {
    /// The value as it appears in the `SignatureVersion` field.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "1",
            Self::V2 => "2",
        }
    }
}

impl fmt::Display for SignatureVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SignatureVersion {
    type Err = VerifyError;

    fn from_str(s: &str) -> Result<Self, VerifyError> {
        match s {
            "1" => Ok(Self::V1),
            "2" => Ok(Self::V2),
            other => Err(VerifyError::UnsupportedSignatureVersion(other.to_owned())),
        }
    }
}

/// The JSON body of an SNS HTTP(S) delivery, with AWS's exact field names.
///
/// Values are kept as the exact strings received (the signature covers them byte for byte).
/// `SignatureVersion` is kept as a string so that an unsupported version still parses and is
/// reported by verification as [`VerifyError::UnsupportedSignatureVersion`].
///
/// Deserializing (with [`SnsMessage::from_json`] or serde) ignores unknown fields such as
/// `MessageAttributes`, and rejects missing required fields; `Token` and `SubscribeURL` are
/// required for the two confirmation types. Serializing writes AWS's field order and omits
/// absent optional fields.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "RawMessage")]
pub struct SnsMessage {
    /// `Type`.
    #[serde(rename = "Type")]
    pub message_type: MessageType,
    /// `MessageId`: unique per published message.
    #[serde(rename = "MessageId")]
    pub message_id: String,
    /// `Token`: only in confirmation messages.
    #[serde(rename = "Token", skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `TopicArn`.
    #[serde(rename = "TopicArn")]
    pub topic_arn: String,
    /// `Subject`: only in notifications published with one.
    #[serde(rename = "Subject", skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// `Message`: the payload.
    #[serde(rename = "Message")]
    pub message: String,
    /// `SubscribeURL`: only in confirmation messages.
    #[serde(rename = "SubscribeURL", skip_serializing_if = "Option::is_none")]
    pub subscribe_url: Option<String>,
    /// `Timestamp`: ISO 8601, e.g. `2026-03-06T19:55:38.903Z`.
    #[serde(rename = "Timestamp")]
    pub timestamp: String,
    /// `SignatureVersion`: `"1"` or `"2"` (see [`SignatureVersion`]).
    #[serde(rename = "SignatureVersion")]
    pub signature_version: String,
    /// `Signature`: base64 of the RSA signature over [`string_to_sign`].
    #[serde(rename = "Signature")]
    pub signature: String,
    /// `SigningCertURL`: where the certificate of the signing key is served.
    #[serde(rename = "SigningCertURL")]
    pub signing_cert_url: String,
    /// `UnsubscribeURL`: only in notifications.
    #[serde(rename = "UnsubscribeURL", skip_serializing_if = "Option::is_none")]
    pub unsubscribe_url: Option<String>,
}

impl SnsMessage {
    /// Parses an SNS HTTP body.
    pub fn from_json(body: &[u8]) -> Result<Self, ParseError> {
        let raw: RawMessage =
            serde_json::from_slice(body).map_err(|e| ParseError::MalformedJson(e.to_string()))?;
        Self::try_from(raw)
    }

    /// The parsed `SignatureVersion`.
    pub fn signature_version(&self) -> Result<SignatureVersion, VerifyError> {
        self.signature_version.parse()
    }
}

/// Every field optional, so that a missing one becomes a typed [`ParseError::MissingField`].
#[derive(Deserialize)]
struct RawMessage {
    #[serde(rename = "Type")]
    message_type: Option<String>,
    #[serde(rename = "MessageId")]
    message_id: Option<String>,
    #[serde(rename = "Token")]
    token: Option<String>,
    #[serde(rename = "TopicArn")]
    topic_arn: Option<String>,
    #[serde(rename = "Subject")]
    subject: Option<String>,
    #[serde(rename = "Message")]
    message: Option<String>,
    #[serde(rename = "SubscribeURL")]
    subscribe_url: Option<String>,
    #[serde(rename = "Timestamp")]
    timestamp: Option<String>,
    #[serde(rename = "SignatureVersion")]
    signature_version: Option<String>,
    #[serde(rename = "Signature")]
    signature: Option<String>,
    #[serde(rename = "SigningCertURL")]
    signing_cert_url: Option<String>,
    #[serde(rename = "UnsubscribeURL")]
    unsubscribe_url: Option<String>,
}

fn required(value: Option<String>, name: &'static str) -> Result<String, ParseError> {
    value.ok_or(ParseError::MissingField(name))
}

impl TryFrom<RawMessage> for SnsMessage {
    type Error = ParseError;

    fn try_from(raw: RawMessage) -> Result<Self, ParseError> {
        let message_type: MessageType = required(raw.message_type, "Type")?.parse()?;
        if message_type != MessageType::Notification {
            if raw.subscribe_url.is_none() {
                return Err(ParseError::MissingField("SubscribeURL"));
            }
            if raw.token.is_none() {
                return Err(ParseError::MissingField("Token"));
            }
        }
        Ok(Self {
            message_type,
            message_id: required(raw.message_id, "MessageId")?,
            token: raw.token,
            topic_arn: required(raw.topic_arn, "TopicArn")?,
            subject: raw.subject,
            message: required(raw.message, "Message")?,
            subscribe_url: raw.subscribe_url,
            timestamp: required(raw.timestamp, "Timestamp")?,
            signature_version: required(raw.signature_version, "SignatureVersion")?,
            signature: required(raw.signature, "Signature")?,
            signing_cert_url: required(raw.signing_cert_url, "SigningCertURL")?,
            unsubscribe_url: raw.unsubscribe_url,
        })
    }
}

/// The canonical string that SNS signs, exactly as AWS defines it.
///
/// Each pair is written as `"Key\nValue\n"`, in this order:
/// * `Notification`: `Message`, `MessageId`, `Subject` (only if present), `Timestamp`,
///   `TopicArn`, `Type`;
/// * `SubscriptionConfirmation` and `UnsubscribeConfirmation`: `Message`, `MessageId`,
///   `SubscribeURL`, `Timestamp`, `Token`, `TopicArn`, `Type`.
///
/// Fails only if a confirmation message lacks `SubscribeURL` or `Token`.
pub fn string_to_sign(msg: &SnsMessage) -> Result<String, ParseError> {
    let mut out = String::with_capacity(256 + msg.message.len());
    let mut pair = |key: &str, value: &str| {
        out.push_str(key);
        out.push('\n');
        out.push_str(value);
        out.push('\n');
    };
    pair("Message", &msg.message);
    pair("MessageId", &msg.message_id);
    match msg.message_type {
        MessageType::Notification => {
            if let Some(subject) = &msg.subject {
                pair("Subject", subject);
            }
            pair("Timestamp", &msg.timestamp);
        }
        MessageType::SubscriptionConfirmation | MessageType::UnsubscribeConfirmation => {
            let url = msg.subscribe_url.as_deref();
            pair(
                "SubscribeURL",
                url.ok_or(ParseError::MissingField("SubscribeURL"))?,
            );
            pair("Timestamp", &msg.timestamp);
            let token = msg.token.as_deref();
            pair("Token", token.ok_or(ParseError::MissingField("Token"))?);
        }
    }
    pair("TopicArn", &msg.topic_arn);
    pair("Type", msg.message_type.as_str());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn confirmation() -> SnsMessage {
        SnsMessage {
            message_type: MessageType::SubscriptionConfirmation,
            message_id: "id".into(),
            token: Some("tok".into()),
            topic_arn: "arn:t".into(),
            subject: Some("ignored for confirmations".into()),
            message: "m".into(),
            subscribe_url: Some("https://s/".into()),
            timestamp: "ts".into(),
            ..SnsMessage::default()
        }
    }

    #[test]
    fn confirmation_string_to_sign_order() {
        assert_eq!(
            string_to_sign(&confirmation()).unwrap(),
            "Message\nm\nMessageId\nid\nSubscribeURL\nhttps://s/\nTimestamp\nts\nToken\ntok\n\
             TopicArn\narn:t\nType\nSubscriptionConfirmation\n"
        );
        let mut unsub = confirmation();
        unsub.message_type = MessageType::UnsubscribeConfirmation;
        assert!(
            string_to_sign(&unsub)
                .unwrap()
                .ends_with("Type\nUnsubscribeConfirmation\n")
        );
    }

    #[test]
    fn notification_subject_only_when_present() {
        let mut msg = SnsMessage {
            message: "m".into(),
            message_id: "id".into(),
            subject: Some("S".into()),
            timestamp: "ts".into(),
            topic_arn: "arn:t".into(),
            token: Some("never signed".into()),
            ..SnsMessage::default()
        };
        assert_eq!(
            string_to_sign(&msg).unwrap(),
            "Message\nm\nMessageId\nid\nSubject\nS\nTimestamp\nts\nTopicArn\narn:t\nType\nNotification\n"
        );
        msg.subject = None;
        assert_eq!(
            string_to_sign(&msg).unwrap(),
            "Message\nm\nMessageId\nid\nTimestamp\nts\nTopicArn\narn:t\nType\nNotification\n"
        );
    }

    #[test]
    fn confirmation_missing_token_is_typed_error() {
        let mut msg = confirmation();
        msg.token = None;
        assert_eq!(string_to_sign(&msg), Err(ParseError::MissingField("Token")));
        let mut msg = confirmation();
        msg.subscribe_url = None;
        assert_eq!(
            string_to_sign(&msg),
            Err(ParseError::MissingField("SubscribeURL"))
        );
    }

    #[test]
    fn json_round_trip_keeps_aws_field_names() {
        let msg = confirmation();
        let json = serde_json::to_string(&msg).unwrap();
        assert!(
            json.starts_with(
                r#"{"Type":"SubscriptionConfirmation","MessageId":"id","Token":"tok""#
            )
        );
        assert!(json.contains(r#""SubscribeURL":"https://s/""#));
        assert!(
            !json.contains("UnsubscribeURL"),
            "absent optionals are omitted: {json}"
        );
        assert_eq!(SnsMessage::from_json(json.as_bytes()).unwrap(), msg);
        // serde's own entry point goes through the same checks.
        assert_eq!(serde_json::from_str::<SnsMessage>(&json).unwrap(), msg);
    }

    #[test]
    fn header_values() {
        assert_eq!(MessageType::Notification.as_str(), "Notification");
        assert_eq!(
            "UnsubscribeConfirmation".parse::<MessageType>().unwrap(),
            MessageType::UnsubscribeConfirmation
        );
        assert_eq!(SignatureVersion::V2.to_string(), "2");
    }
}
