//! A client that acts as payers on the checkout page: what the load scenarios
//! and tests use instead of a browser.
//!
//! A [`Behaviour`] says what one payer does after the merchant hands them the
//! `bkashURL`: pay now, pay after a delay, abandon, cancel, fail, press Back
//! (deliver the same redirect twice), open a second tab (pay in both), or pay
//! and tamper with the redirect's `status`. [`Payer::run`] carries it out and
//! reports every redirect it delivered to the merchant, with the answer.

use std::time::Duration;

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};

use crate::checkout::STATUS_CODE_HEADER;

/// What one payer does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    /// Pay at once and follow the redirect.
    PayNow,
    /// Wait, then pay and follow the redirect.
    PayAfter(Duration),
    /// Open the page and leave: no action, no redirect.
    Abandon,
    /// Cancel and follow the redirect.
    Cancel,
    /// Fail (wallet refuses) and follow the redirect.
    Fail,
    /// Pay, follow the redirect, then press Back: the same redirect again.
    PressBack,
    /// Open the page in two tabs and pay in both; both redirects are delivered.
    SecondTab,
    /// Pay, but deliver the redirect with `status` rewritten (e.g. "cancel").
    ForgeStatus(String),
    /// Pay, but never deliver the redirect (the tab closes, the signal drops).
    PayAndClose,
}

/// The checkout page's answer to an action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActResult {
    /// 302 to the merchant.
    Redirect(url::Url),
    /// 200 without a redirect (a scripted drop).
    NoRedirect,
    /// Refused with a bKash code (e.g. the payment is already completed).
    Refused {
        /// HTTP status.
        http: u16,
        /// The bKash code from the page.
        code: Option<String>,
    },
}

/// One redirect delivered to the merchant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The URL requested.
    pub url: url::Url,
    /// The merchant's HTTP status, if it answered.
    pub status: Option<u16>,
    /// Why it failed, if it did not answer.
    pub error: Option<String>,
}

/// What a payer did, step by step.
#[derive(Debug, Clone, Default)]
pub struct PayerRun {
    /// Answers of the checkout page to each action.
    pub actions: Vec<ActResult>,
    /// Redirects delivered to the merchant, in order.
    pub delivered: Vec<Delivered>,
}

/// A transport failure talking to the gateway.
#[derive(Debug, thiserror::Error)]
pub enum PayerError {
    /// HTTP failed.
    #[error("payer http: {0}")]
    Http(#[from] reqwest::Error),
    /// The gateway answered something the payer cannot read.
    #[error("payer: unexpected answer: {0}")]
    Unexpected(String),
}

/// Acts as payers. Cheap to clone; share one per load generator.
#[derive(Debug, Clone)]
pub struct Payer {
    http: reqwest::Client,
}

impl Payer {
    /// A payer whose requests time out after `timeout`.
    pub fn new(timeout: Duration) -> Result<Payer, PayerError> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .pool_max_idle_per_host(256)
            .build()?;
        Ok(Payer { http })
    }

    /// Opens the checkout page; returns its HTML.
    pub async fn open(&self, bkash_url: &str) -> Result<String, PayerError> {
        let resp = self.http.get(bkash_url).send().await?;
        if resp.status() != StatusCode::OK {
            return Err(PayerError::Unexpected(format!(
                "checkout page answered {}",
                resp.status()
            )));
        }
        Ok(resp.text().await?)
    }

    /// Presses a button: `action` is "pay", "cancel" or "fail".
    pub async fn act(&self, bkash_url: &str, action: &str) -> Result<ActResult, PayerError> {
        let resp = self
            .http
            .post(bkash_url)
            .form(&[("action", action)])
            .send()
            .await?;
        let status = resp.status();
        if status == StatusCode::FOUND {
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| PayerError::Unexpected("302 without Location".into()))?;
            let url = url::Url::parse(location)
                .map_err(|e| PayerError::Unexpected(format!("Location {location:?}: {e}")))?;
            return Ok(ActResult::Redirect(url));
        }
        if status == StatusCode::OK {
            return Ok(ActResult::NoRedirect);
        }
        let code = resp
            .headers()
            .get(STATUS_CODE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(ActResult::Refused {
            http: status.as_u16(),
            code,
        })
    }

    /// Follows a redirect to the merchant, as the browser does.
    pub async fn deliver(&self, url: &url::Url) -> Delivered {
        match self.http.get(url.clone()).send().await {
            Ok(resp) => Delivered {
                url: url.clone(),
                status: Some(resp.status().as_u16()),
                error: None,
            },
            Err(e) => Delivered {
                url: url.clone(),
                status: None,
                error: Some(e.to_string()),
            },
        }
    }

    /// Carries out `behaviour` for the payment behind `bkash_url`.
    pub async fn run(
        &self,
        bkash_url: &str,
        behaviour: &Behaviour,
    ) -> Result<PayerRun, PayerError> {
        let mut run = PayerRun::default();
        match behaviour {
            Behaviour::Abandon => {
                self.open(bkash_url).await?;
            }
            Behaviour::PayNow
            | Behaviour::PressBack
            | Behaviour::PayAfter(_)
            | Behaviour::Cancel
            | Behaviour::Fail => {
                if let Behaviour::PayAfter(wait) = behaviour {
                    tokio::time::sleep(*wait).await;
                }
                let action = match behaviour {
                    Behaviour::Cancel => "cancel",
                    Behaviour::Fail => "fail",
                    _ => "pay",
                };
                let answer = self.act(bkash_url, action).await?;
                if let ActResult::Redirect(url) = &answer {
                    run.delivered.push(self.deliver(url).await);
                    if *behaviour == Behaviour::PressBack {
                        run.delivered.push(self.deliver(url).await);
                    }
                }
                run.actions.push(answer);
            }
            Behaviour::SecondTab => {
                self.open(bkash_url).await?;
                self.open(bkash_url).await?;
                let first = self.act(bkash_url, "pay").await?;
                let second = self.act(bkash_url, "pay").await?;
                for answer in [&first, &second] {
                    if let ActResult::Redirect(url) = answer {
                        run.delivered.push(self.deliver(url).await);
                    }
                }
                run.actions.extend([first, second]);
            }
            Behaviour::ForgeStatus(status) => {
                let answer = self.act(bkash_url, "pay").await?;
                if let ActResult::Redirect(url) = &answer {
                    run.delivered
                        .push(self.deliver(&with_status(url, status)).await);
                }
                run.actions.push(answer);
            }
            Behaviour::PayAndClose => {
                run.actions.push(self.act(bkash_url, "pay").await?);
            }
        }
        Ok(run)
    }
}

/// The same redirect with its `status` replaced: a forgery anyone can type.
pub fn with_status(url: &url::Url, status: &str) -> url::Url {
    let mut forged = url.clone();
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            if k == "status" {
                (k.into_owned(), status.to_owned())
            } else {
                (k.into_owned(), v.into_owned())
            }
        })
        .collect();
    forged.query_pairs_mut().clear().extend_pairs(pairs);
    forged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forging_rewrites_only_the_status() {
        let u =
            url::Url::parse("http://m/cb?x=1&paymentID=TR1&status=success&signature=abc").unwrap();
        let f = with_status(&u, "cancel");
        assert_eq!(
            f.as_str(),
            "http://m/cb?x=1&paymentID=TR1&status=cancel&signature=abc"
        );
    }
}
