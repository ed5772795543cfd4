//! The request path of `POST /bookings`, below HTTP: what the API, the
//! simulator and any other harness call for one booking request.
//!
//! Admit (one atomic ledger step, under a fresh [`RequestToken`] from the
//! stack's [`booking::Entropy`]) → create the payment at the gateway → attach
//! it to the hold (pending → held, deadline = now + hold) → keep the booking
//! copy in coordination storage (TTL = hold + `booking_copy_slack`) → enqueue
//! the [`AdmittedBooking`] → admitted. Nothing durable happens on the way
//! besides the queue send. If create, attach, the copy or the enqueue fails
//! (or the admission itself gives no answer), the admission is undone by its
//! token **before** the answer (tried [`booking::ledger::UNDO_ATTEMPTS`]
//! times), the copy (if written) is deleted so no callback can confirm a
//! released seat, and the answer is [`BookAnswer::Busy`]. A failed undo
//! raises an alert (`undo_failed`); a pending hold left behind is the
//! reconciler's to clean.
//!
//! Each step gets what is left of the request deadline minus
//! [`UNDO_RESERVE`] (`Settings::check` keeps it within a quarter of the
//! deadline), kept back so the
//! undo can still run before the deadline. Every deadline is a tokio
//! [`Instant`], so the path runs on a paused runtime in virtual time.
//!
//! What a harness wants to count or do along the way (metrics, poking the
//! status writer) it gets through [`PathEvents`].

use std::time::Duration;

use booking::coordination::keys;
use booking::entropy::request_token;
use booking::gateway::{CreatePayment, GatewayError};
use booking::ledger::{Admission, HoldState, Step, undo_admission_retried};
use booking::notify::Alert;
use booking::{AdmittedBooking, CandidateHash, Level, PaymentId, RequestToken};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::stack::Stack;

pub use booking::settings::UNDO_RESERVE;

/// What a harness hears from the request path. Every method does nothing
/// by default.
pub trait PathEvents: Send + Sync {
    /// A gateway call ended: `error` is `None` on success, else its kind
    /// (`timeout`, `refused`, `unavailable`, `token_unavailable`, `deadline`).
    fn gateway_call(&self, _op: &'static str, _error: Option<&'static str>) {}
    /// An admission was undone after `failed` (`admit`, `create`, `attach`,
    /// `copy`, `enqueue`); `step` is the undo's answer (`done`, `no_match`,
    /// `paid`, `failed`).
    fn undo(&self, _failed: &'static str, _step: &'static str) {}
    /// A hold was admitted and queued.
    fn held(&self, _booking: &AdmittedBooking) {}
    /// The seat counters changed (or may have): the status document is due.
    fn counters_changed(&self) {}
}

/// A [`PathEvents`] that hears nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Quiet;

impl PathEvents for Quiet {}

/// What is kept at `keys::booking_copy`: the [`AdmittedBooking`] (with its
/// signature) plus the checkout URL, so a duplicate booking request can send
/// the payer back to the same payment page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCopy {
    /// The admission.
    #[serde(flatten)]
    pub booking: AdmittedBooking,
    /// The gateway's checkout URL of the payment.
    #[serde(default)]
    pub redirect_url: Option<String>,
}

/// What [`book`] kept at `keys::booking_copy` for `payment`, if anything. A
/// copy that does not parse, or names another payment or sale, is treated as
/// absent (and logged).
pub async fn load_stored(
    stack: &Stack,
    payment: &PaymentId,
) -> Result<Option<StoredCopy>, booking::CoordinationError> {
    let key = keys::booking_copy(&stack.prefix, &stack.sale, payment);
    let Some(raw) = stack.coordination.get(&key).await? else {
        return Ok(None);
    };
    match serde_json::from_str::<StoredCopy>(&raw) {
        Ok(c) if c.booking.payment_id == *payment && c.booking.sale == stack.sale => Ok(Some(c)),
        Ok(_) => {
            tracing::error!(%payment, "booking copy names another payment or sale; ignored");
            Ok(None)
        }
        Err(e) => {
            tracing::error!(%payment, error = %e, "booking copy unreadable; ignored");
            Ok(None)
        }
    }
}

/// The booking copy of `payment`: the admission of [`load_stored`].
pub async fn load_copy(
    stack: &Stack,
    payment: &PaymentId,
) -> Result<Option<AdmittedBooking>, booking::CoordinationError> {
    Ok(load_stored(stack, payment).await?.map(|c| c.booking))
}

/// A live hold, as the answer shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSeat {
    /// Which level.
    pub level: Level,
    /// The gateway payment.
    pub payment_id: PaymentId,
    /// The hold deadline, ms since the epoch.
    pub deadline_ms: u64,
    /// Where the payer goes to pay, when known.
    pub redirect_url: Option<String>,
}

/// Why an admission was refused (nothing is held).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The level is at its cap.
    LevelFull,
    /// Admissions are not open.
    SaleClosed,
    /// The candidate is not on the list.
    NotEligible,
    /// No such level in this sale.
    UnknownLevel,
    /// The candidate has paid for a seat already.
    AlreadyPaid,
}

impl Refusal {
    /// The machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::LevelFull => "level_full",
            Refusal::SaleClosed => "sale_closed",
            Refusal::NotEligible => "not_eligible",
            Refusal::UnknownLevel => "unknown_level",
            Refusal::AlreadyPaid => "already_paid",
        }
    }

    /// A sentence for a person.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::LevelFull => "every seat of this level is taken",
            Refusal::SaleClosed => "the sale is not open",
            Refusal::NotEligible => "this candidate is not on the list",
            Refusal::UnknownLevel => "this sale has no such level",
            Refusal::AlreadyPaid => "this candidate has paid for a seat already",
        }
    }
}

/// Which step of the path failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The ledger's admission gave no answer.
    Admit,
    /// The gateway's create.
    Create,
    /// Attaching the payment to the hold.
    Attach,
    /// Keeping the booking copy.
    Copy,
    /// The queue send.
    Enqueue,
}

impl Failed {
    /// The step's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Failed::Admit => "admit",
            Failed::Create => "create",
            Failed::Attach => "attach",
            Failed::Copy => "copy",
            Failed::Enqueue => "enqueue",
        }
    }
}

/// What the request path decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookAnswer {
    /// Admitted: pay at the redirect URL before the deadline.
    Admitted {
        /// The admission.
        booking: AdmittedBooking,
        /// The gateway's checkout URL.
        redirect_url: String,
    },
    /// The candidate already holds a seat: the live hold, or `None` while
    /// another request is still creating its payment (pending).
    AlreadyHolding {
        /// The level of the hold.
        level: Level,
        /// The hold, once its payment is attached.
        held: Option<HeldSeat>,
    },
    /// Refused; nothing is held.
    Refused(Refusal),
    /// A step failed (and was undone, or alerted); nothing is held by this
    /// request. Try again.
    Busy {
        /// Which step.
        failed: Failed,
        /// What went wrong.
        why: String,
    },
}

impl BookAnswer {
    /// The outcome's name, as metrics and clients count it.
    pub fn outcome(&self) -> &'static str {
        match self {
            BookAnswer::Admitted { .. } => "admitted",
            BookAnswer::AlreadyHolding { .. } => "already_holding",
            BookAnswer::Refused(r) => r.code(),
            BookAnswer::Busy { .. } => "busy",
        }
    }
}

/// One booking request for `candidate` on `level`, to be answered by
/// `deadline`: see the module documentation.
pub async fn book(
    stack: &Stack,
    events: &dyn PathEvents,
    candidate: &CandidateHash,
    level: &Level,
    deadline: Instant,
) -> BookAnswer {
    debug_assert!(
        stack.settings.request_deadline >= UNDO_RESERVE * 4,
        "Settings::check lets no request deadline below four undo reserves through"
    );
    let request = Request {
        stack,
        events,
        candidate,
        level,
        token: request_token(stack.entropy.as_ref()),
        deadline,
        work_until: deadline.checked_sub(UNDO_RESERVE).unwrap_or(deadline),
    };
    request.run().await
}

/// One admission on its way, from the ledger to the queue.
struct Request<'a> {
    stack: &'a Stack,
    events: &'a dyn PathEvents,
    candidate: &'a CandidateHash,
    level: &'a Level,
    token: RequestToken,
    /// The end of the request.
    deadline: Instant,
    /// The end of the work before the undo reserve.
    work_until: Instant,
}

impl Request<'_> {
    fn left(&self) -> Duration {
        self.work_until.saturating_duration_since(Instant::now())
    }

    /// Runs `f` until the work deadline; `None` if it passed.
    async fn timed<T>(&self, f: impl Future<Output = T>) -> Option<T> {
        tokio::time::timeout_at(self.work_until, f).await.ok()
    }

    async fn run(self) -> BookAnswer {
        let stack = self.stack;
        let Some(amount) = stack.prices.get(self.level).cloned() else {
            return BookAnswer::Refused(Refusal::UnknownLevel);
        };
        let request_ms = stack.clock.now_ms();
        let admitted = self
            .timed(stack.ledger.admit(
                &stack.sale,
                self.candidate,
                self.level,
                &self.token,
                request_ms,
            ))
            .await;
        match admitted {
            Some(Ok(Admission::Admitted { .. })) => {}
            Some(Ok(refusal)) => return self.refusal(refusal).await,
            Some(Err(e)) => return self.undo(Failed::Admit, None, e.to_string()).await,
            None => return self.undo(Failed::Admit, None, "the ledger timed out").await,
        }
        self.events.counters_changed();

        // create the payment
        let create = CreatePayment {
            invoice: booking::invoice_number(&stack.sale, self.candidate, request_ms),
            amount,
            payer_reference: self.candidate.as_str()[..16].to_owned(),
            callback_url: stack.callback_url(),
        };
        let created = match self.timed(stack.gateway.create(&create, self.left())).await {
            Some(Ok(created)) => {
                self.events.gateway_call("create", None);
                created
            }
            Some(Err(e)) => {
                self.events
                    .gateway_call("create", Some(gateway_error_kind(&e)));
                return self.undo(Failed::Create, None, e.to_string()).await;
            }
            None => {
                self.events.gateway_call("create", Some("deadline"));
                return self
                    .undo(Failed::Create, None, "the gateway timed out")
                    .await;
            }
        };
        let payment = created.payment_id.clone();

        // attach it: pending → held until the deadline
        let deadline_ms = stack
            .clock
            .now_ms()
            .saturating_add(stack.settings.hold.as_millis() as u64);
        let attached = self
            .timed(stack.ledger.attach_payment(
                &stack.sale,
                self.candidate,
                &self.token,
                &payment,
                deadline_ms,
            ))
            .await;
        match attached {
            Some(Ok(Step::Done)) => {}
            Some(Ok(step)) => {
                let why = format!("the hold could not take the payment ({step:?})");
                return self.undo(Failed::Attach, None, why).await;
            }
            Some(Err(e)) => return self.undo(Failed::Attach, None, e.to_string()).await,
            None => {
                return self
                    .undo(Failed::Attach, None, "the ledger timed out")
                    .await;
            }
        }
        let booking = AdmittedBooking {
            candidate: self.candidate.clone(),
            sale: stack.sale.clone(),
            level: self.level.clone(),
            payment_id: payment.clone(),
            signature: Some(created.signature.clone()),
            token: Some(self.token.clone()),
            request_ms,
            deadline_ms,
        };

        // keep the copy for a payer faster than the worker
        let stored = StoredCopy {
            booking: booking.clone(),
            redirect_url: Some(created.bkash_url.clone()),
        };
        let copy_key = keys::booking_copy(&stack.prefix, &stack.sale, &payment);
        let json = match serde_json::to_string(&stored) {
            Ok(json) => json,
            Err(e) => return self.undo(Failed::Copy, None, e.to_string()).await,
        };
        let ttl = stack.settings.hold + stack.settings.booking_copy_slack;
        match self
            .timed(stack.coordination.set(&copy_key, &json, Some(ttl)))
            .await
        {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return self
                    .undo(Failed::Copy, Some(&copy_key), e.to_string())
                    .await;
            }
            None => {
                return self
                    .undo(Failed::Copy, Some(&copy_key), "coordination timed out")
                    .await;
            }
        }

        // enqueue: the worker writes the HELD record
        let message = match booking.to_message() {
            Ok(message) => message,
            Err(e) => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), e.to_string())
                    .await;
            }
        };
        match self.timed(stack.queue.send(message)).await {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), e.to_string())
                    .await;
            }
            None => {
                return self
                    .undo(Failed::Enqueue, Some(&copy_key), "the queue timed out")
                    .await;
            }
        }
        self.events.held(&booking);
        BookAnswer::Admitted {
            booking,
            redirect_url: created.bkash_url,
        }
    }

    /// Undoes this request's admission (and deletes its copy), then answers busy.
    async fn undo(
        &self,
        failed: Failed,
        copy_key: Option<&str>,
        why: impl Into<String>,
    ) -> BookAnswer {
        let why = why.into();
        let stack = self.stack;
        tracing::warn!(
            candidate = %self.candidate,
            step = failed.as_str(),
            %why,
            "undoing the admission"
        );
        // an undo whose answer was lost is tried once more: it is guarded by
        // the token, so a repeat that finds the hold gone changes nothing
        let undone = tokio::time::timeout_at(
            self.deadline,
            undo_admission_retried(
                stack.ledger.as_ref(),
                &stack.sale,
                self.candidate,
                &self.token,
            ),
        )
        .await;
        let step = match &undone {
            Ok(Ok(Step::Done)) => "done",
            Ok(Ok(Step::NoMatch)) => "no_match",
            Ok(Ok(Step::Paid)) => "paid",
            Ok(Err(_)) | Err(_) => "failed",
        };
        self.events.undo(failed.as_str(), step);
        if let Some(key) = copy_key {
            let deleted =
                tokio::time::timeout_at(self.deadline, stack.coordination.delete(key)).await;
            if !matches!(deleted, Ok(Ok(_))) {
                tracing::warn!(
                    key,
                    "could not delete the booking copy of an undone admission"
                );
            }
        }
        if step == "failed" {
            // the hold stays counted: the reconciler cleans a pending one, a
            // human looks at the rest
            let alert = Alert {
                kind: "undo_failed".into(),
                detail: format!(
                    "the admission of request {} failed at {} ({why}) and could not be undone",
                    self.token,
                    failed.as_str()
                ),
                candidate: Some(self.candidate.clone()),
                payment_id: None,
            };
            if let Err(e) = tokio::time::timeout_at(self.deadline, stack.alerts.raise(alert)).await
            {
                tracing::error!(error = %e, "could not raise an alert in time");
            }
        } else {
            self.events.counters_changed();
        }
        BookAnswer::Busy { failed, why }
    }

    /// The answer to a refused admission.
    async fn refusal(&self, admission: Admission) -> BookAnswer {
        match admission {
            Admission::LevelFull => {
                // a full level is news for the status document
                self.events.counters_changed();
                BookAnswer::Refused(Refusal::LevelFull)
            }
            Admission::SaleClosed => BookAnswer::Refused(Refusal::SaleClosed),
            Admission::NotEligible => BookAnswer::Refused(Refusal::NotEligible),
            Admission::UnknownLevel => BookAnswer::Refused(Refusal::UnknownLevel),
            Admission::AlreadyPaid { .. } => BookAnswer::Refused(Refusal::AlreadyPaid),
            Admission::AlreadyHolding { hold } => {
                let held = match hold.state {
                    HoldState::Held {
                        payment_id,
                        deadline_ms,
                    } => {
                        // the payer goes back to the same checkout page
                        let redirect_url =
                            match self.timed(load_stored(self.stack, &payment_id)).await {
                                Some(Ok(Some(c))) => c.redirect_url,
                                _ => None,
                            };
                        Some(HeldSeat {
                            level: hold.level.clone(),
                            payment_id,
                            deadline_ms,
                            redirect_url,
                        })
                    }
                    HoldState::Pending { .. } => None,
                };
                BookAnswer::AlreadyHolding {
                    level: hold.level,
                    held,
                }
            }
            Admission::Admitted { .. } => BookAnswer::Busy {
                failed: Failed::Admit,
                why: "unexpected admission".into(),
            },
        }
    }
}

/// A gateway error's kind, as metrics name it.
pub fn gateway_error_kind(e: &GatewayError) -> &'static str {
    match e {
        GatewayError::Timeout => "timeout",
        GatewayError::Refused { .. } => "refused",
        GatewayError::Unavailable(_) => "unavailable",
        GatewayError::TokenUnavailable => "token_unavailable",
    }
}
