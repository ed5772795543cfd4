//! What moto's SES recorded, read back for a rehearsal's audit:
//! [`SesMotoLog`] and [`SesMotoOutputs`], an [`OutputLog`] whose mail is
//! what the SES mailer really handed to SES, the way
//! `booking_smtp::MaildirOutputs` is for SMTP.
//!
//! SES has no API that lists what it sent. moto keeps every raw message
//! (`SendEmail` with raw content, v1 and v2 alike, lands in the SES v1
//! backend's `sent_messages` as a `RawMessage`: `id`, `source`,
//! `destinations`, `raw_data`) and its server shows every model it tracks
//! at `GET <moto>/moto-api/data.json` (`{"ses": {"RawMessage": [..]}}`, in
//! creation order, every account and region together). That URL comes from
//! the configuration only (`[mail] readback_moto_url`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::notify::{Alert, Confirmation, NotifyError, OutputLog, StatusWrite};
use booking_smtp::{Delivered, read_back};
use serde::Deserialize;

/// Where moto's server shows the models it tracks.
pub const MOTO_DATA_PATH: &str = "/moto-api/data.json";
/// One read of moto's state at most.
pub const READBACK_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest state document read (moto shows every service's models:
/// a rehearsal's S3 writes and queues are in it too).
pub const READBACK_BYTES_MAX: usize = 256 * 1024 * 1024;

/// One raw message moto's SES recorded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RecordedRaw {
    /// SES's message id.
    pub id: String,
    /// The sender as given (`FromEmailAddress`), if any.
    #[serde(default)]
    pub source: Option<String>,
    /// The whole MIME message.
    pub raw_data: String,
}

#[derive(Debug, Default, Deserialize)]
struct SesModels {
    #[serde(rename = "RawMessage", default)]
    raw_messages: Vec<RecordedRaw>,
}

#[derive(Debug, Deserialize)]
struct ModelData {
    #[serde(default)]
    ses: SesModels,
}

/// The address of `mailbox` (`Name <a@b>` or `a@b`), lower case.
fn address_of(mailbox: &str) -> String {
    let m = mailbox.trim();
    let inner = match (m.rfind('<'), m.rfind('>')) {
        (Some(open), Some(close)) if open < close => &m[open + 1..close],
        _ => m,
    };
    inner.trim().to_ascii_lowercase()
}

/// The messages of moto's state document `data` sent from `from`'s
/// address, in send order, each read back as the confirmation it carries
/// (pure). Mail from other senders (other tests, other deployments on the
/// same moto) is left out; a message from `from` that is not a
/// confirmation is an error naming it: the audit must not skip what it
/// cannot read.
pub fn sent_from(data: &[u8], from: &str) -> Result<Vec<Delivered>, String> {
    let data: ModelData =
        serde_json::from_slice(data).map_err(|e| format!("moto's state document: {e}"))?;
    let ours = address_of(from);
    data.ses
        .raw_messages
        .iter()
        .filter(|m| m.source.as_deref().map(address_of).as_deref() == Some(ours.as_str()))
        .map(|m| read_back(m.raw_data.as_bytes()).map_err(|e| format!("SES message {}: {e}", m.id)))
        .collect()
}

/// A `moto_url` as [`SesMotoLog::new`] takes it: `http(s)://host[:port]`,
/// nothing after the path.
pub fn check_moto_url(moto_url: &str) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(moto_url).map_err(|e| format!("{moto_url:?}: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(format!("{moto_url:?}: an http(s) URL of moto's server"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("{moto_url:?}: no query or fragment"));
    }
    let base = url.as_str().trim_end_matches('/');
    reqwest::Url::parse(&format!("{base}{MOTO_DATA_PATH}")).map_err(|e| e.to_string())
}

/// What a moto server's SES recorded as sent from one address.
#[derive(Debug, Clone)]
pub struct SesMotoLog {
    data_url: reqwest::Url,
    from: String,
    http: reqwest::Client,
}

impl SesMotoLog {
    /// The mail moto's server at `moto_url` recorded from `from` (the
    /// mailer's `From`).
    pub fn new(moto_url: &str, from: &str) -> Result<SesMotoLog, String> {
        let data_url = check_moto_url(moto_url)?;
        let http = reqwest::Client::builder()
            .timeout(READBACK_TIMEOUT)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(SesMotoLog {
            data_url,
            from: from.to_owned(),
            http,
        })
    }

    /// Where it reads.
    pub fn data_url(&self) -> &str {
        self.data_url.as_str()
    }

    /// moto's whole state document, at most [`READBACK_BYTES_MAX`].
    async fn fetch(&self) -> Result<Vec<u8>, String> {
        let url = &self.data_url;
        let mut answer = self
            .http
            .get(url.clone())
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !answer.status().is_success() {
            return Err(format!("{url} answered {}", answer.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = answer.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            if body.len() + chunk.len() > READBACK_BYTES_MAX {
                return Err(format!("{url}: more than {READBACK_BYTES_MAX} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Every message recorded from this sender, in send order, read back.
    pub async fn delivered(&self) -> Result<Vec<Delivered>, NotifyError> {
        let data = self.fetch().await.map_err(NotifyError::Unavailable)?;
        sent_from(&data, &self.from).map_err(NotifyError::Unavailable)
    }

    /// The confirmations recorded, repeats included (the audit's view).
    pub async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        Ok(self
            .delivered()
            .await?
            .into_iter()
            .map(|d| d.confirmation)
            .collect())
    }
}

/// An [`OutputLog`] whose emails are the ones moto's SES recorded, the
/// alerts and status writes still the stack's own: the audit's view of a
/// rehearsal that mails through SES on moto.
#[derive(Debug, Clone)]
pub struct SesMotoOutputs {
    /// The stack's own log (alerts, status writes).
    pub base: Arc<dyn OutputLog>,
    /// What moto recorded.
    pub moto: SesMotoLog,
}

#[async_trait]
impl OutputLog for SesMotoOutputs {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        self.moto.sent_mail().await
    }

    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        self.base.alerts_raised().await
    }

    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        self.base.status_writes(since_ms).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use booking::{CandidateHash, Level, PaymentId, SaleId};

    fn confirmation(p: &str) -> Confirmation {
        Confirmation {
            sale: SaleId::parse("launch").unwrap(),
            candidate: CandidateHash::of("alice"),
            level: Level::parse("gold").unwrap(),
            payment_id: PaymentId::parse(p).unwrap(),
            trx_id: None,
            recovered: false,
        }
    }

    fn raw(c: &Confirmation, from: &str) -> String {
        let a = booking_smtp::Addressing {
            from,
            recipient_domain: "c.invalid",
            message_id_domain: "m.invalid",
        };
        String::from_utf8(booking_smtp::compose_with(c, a).unwrap().formatted()).unwrap()
    }

    fn data(messages: &[(&str, &str)]) -> Vec<u8> {
        let raws: Vec<serde_json::Value> = messages
            .iter()
            .enumerate()
            .map(|(i, (source, raw))| {
                serde_json::json!({"id": format!("m{i}"), "source": source,
                    "destinations": ["x@c.invalid"], "raw_data": raw})
            })
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "s3": {"FakeBucket": [{"name": "b"}]},
            "ses": {"Message": [], "RawMessage": raws},
        }))
        .unwrap()
    }

    #[test]
    fn only_our_senders_mail_is_read_in_order() {
        let ours = "Tickets <Tickets@Sellout.invalid>";
        let (a, b) = (confirmation("P1"), confirmation("P2"));
        let doc = data(&[
            ("tickets@sellout.invalid", &raw(&a, ours)),
            ("other@elsewhere.invalid", "Subject: not ours\r\n\r\nhi"),
            (ours, &raw(&b, ours)),
        ]);
        let back = sent_from(&doc, ours).unwrap();
        let got: Vec<_> = back.iter().map(|d| d.confirmation.clone()).collect();
        assert_eq!(got, vec![a, b]);
        assert_eq!(back[1].message_id, "<P2.launch@m.invalid>");
    }

    #[test]
    fn a_message_of_ours_that_is_no_confirmation_is_an_error_naming_it() {
        let doc = data(&[("t@s.invalid", "Subject: hi\r\n\r\nhello")]);
        let e = sent_from(&doc, "t@s.invalid").unwrap_err();
        assert!(e.contains("SES message m0"), "{e}");
        assert!(sent_from(b"{\"ses\": 1}", "t@s.invalid").is_err());
        assert!(sent_from(b"{}", "t@s.invalid").unwrap().is_empty());
    }

    #[test]
    fn the_url_is_moto_s_server_only() {
        assert_eq!(
            check_moto_url("http://127.0.0.1:5000/").unwrap().as_str(),
            "http://127.0.0.1:5000/moto-api/data.json"
        );
        assert!(check_moto_url("file:///etc/passwd").is_err());
        assert!(check_moto_url("http://127.0.0.1:5000/?x=1").is_err());
        assert!(check_moto_url("127.0.0.1:5000").is_err());
    }
}
