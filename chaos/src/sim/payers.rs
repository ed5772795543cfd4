//! The payers of a simulated sale: what each does once admitted (pay now or
//! late, abandon, approve and leave, cancel, fail, forge the redirect's
//! status, come back after the deadline), and how their redirects and the
//! gateway's IPNs reach the API's own callback and webhook decision, recorded
//! in the history as the client saw them.

use super::*;

/// A confirm path's answer, as the history records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConfirmAnswer {
    /// The booking is PAID with the payment.
    Paid,
    /// Certainly not marked paid by this call (the reason).
    Refused(&'static str),
    /// Not known; the reconciler decides.
    Unknown,
}

impl ConfirmAnswer {
    fn of_callback(outcome: CallbackOutcome) -> ConfirmAnswer {
        match outcome {
            CallbackOutcome::Paid => ConfirmAnswer::Paid,
            CallbackOutcome::NotPaid
            | CallbackOutcome::NeedsAttention
            | CallbackOutcome::Expired
            | CallbackOutcome::Forbidden
            | CallbackOutcome::Unknown => ConfirmAnswer::Refused(outcome.name()),
            CallbackOutcome::Processing
            | CallbackOutcome::Pending
            | CallbackOutcome::Unavailable => ConfirmAnswer::Unknown,
        }
    }

    fn of_notification(outcome: &NotificationOutcome) -> ConfirmAnswer {
        match outcome {
            NotificationOutcome::MarkedPaid | NotificationOutcome::AlreadyPaid => {
                ConfirmAnswer::Paid
            }
            NotificationOutcome::Unreadable
            | NotificationOutcome::UnknownBooking
            | NotificationOutcome::Mismatch(_)
            | NotificationOutcome::NotOurs => ConfirmAnswer::Refused(outcome.name()),
            NotificationOutcome::NotConfirmed(_) | NotificationOutcome::Uncertain(_) => {
                ConfirmAnswer::Unknown
            }
        }
    }
}

/// What the sim hears from the confirm step: the records a refused
/// HELD→PAID found in its way.
#[derive(Debug, Default)]
struct SimConfirmEvents {
    found: Mutex<Vec<booking::records::BookingRecord>>,
}

impl ConfirmEvents for SimConfirmEvents {
    fn not_held(&self, _payment: &PaymentId, current: Option<&booking::records::BookingRecord>) {
        if let Some(record) = current {
            self.found.lock().push(record.clone());
        }
    }
}

/// How long to wait, of `left` until the deadline, to act at a moment drawn
/// in the hold's last ninety seconds (and at least a second before it ends).
fn last_ninety_seconds(left: Duration, rng: &mut ChaCha8Rng) -> Duration {
    let lo = left.saturating_sub(Duration::from_secs(90));
    let hi = left.saturating_sub(Duration::from_secs(1));
    uniform_ms(rng, lo, hi)
}

impl Ctx {
    /// Records a confirm path's answer in the history: the booking is PAID
    /// (`ok paid`), it certainly is not this payment's to mark (`ok refused`),
    /// or nobody knows yet (`unknown`: left to the reconciler).
    fn record_confirm(op: crate::history::OpHandle, answer: ConfirmAnswer) {
        match answer {
            ConfirmAnswer::Paid => op.ok(OpValue::Paid),
            ConfirmAnswer::Refused(reason) => op.ok(OpValue::Refused {
                reason: reason.into(),
            }),
            ConfirmAnswer::Unknown => op.unknown(),
        }
    }

    /// What the confirm step heard while `payment` was confirmed: a refused
    /// HELD→PAID that found another payment's HELD record (a shadowed
    /// booking; see [`Ctx::note_shadowed`]).
    async fn after_confirm(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        events: &SimConfirmEvents,
    ) {
        let found = std::mem::take(&mut *events.found.lock());
        for record in found {
            self.note_shadowed(candidate, payment, &record).await;
        }
    }

    /// A refused HELD→PAID of `payment` found `record`: if that is another
    /// payment's HELD record while the ledger's hold is this payment's
    /// (held, or paid since by the fast payer's write, which repairs it),
    /// and the worker has finished this booking's message, the worker left a
    /// stale record in the live booking's place.
    pub(super) async fn note_shadowed(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        record: &booking::records::BookingRecord,
    ) {
        if record.status != RecordStatus::Held || record.payment_id == *payment {
            return;
        }
        if !self.tracking.handled(payment) {
            return;
        }
        let held = matches!(
            self.raw_ledger.hold(&self.sale, candidate).await,
            Ok(Some(booking::ledger::Hold {
                state: booking::ledger::HoldState::Held { payment_id, .. },
                ..
            })) if payment_id == *payment
        );
        let paid = matches!(
            self.raw_ledger.paid(&self.sale, candidate).await,
            Ok(Some(p)) if p == *payment
        );
        if held || paid {
            self.shadowed.lock().push(format!(
                "{payment}: live and handled, record HELD with {}",
                record.payment_id
            ));
        }
    }

    /// The payer's redirect back from the checkout, claiming `status`, with
    /// the signature the gateway gave the payment: the API's own callback
    /// ([`booking_service::callback::handle`]) over the stack of the
    /// candidate's API instance. With
    /// `crash` the instance dies right after its execute call.
    pub(super) async fn callback(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        status: &str,
        crash: bool,
    ) -> Option<CallbackOutcome> {
        let query = CallbackQuery {
            payment_id: Some(payment.as_str().to_owned()),
            status: Some(status.to_owned()),
            signature: self.sim_gateway.signature(payment),
        };
        let approved = self.sim_gateway.executable(payment);
        let op = self.history.invoke(
            process_of(candidate),
            OpKind::Confirm {
                candidate: candidate.clone(),
                payment: payment.clone(),
            },
        );
        let events = SimConfirmEvents::default();
        let stack = self.stack_for(candidate);
        let outcome = if crash {
            let dying = Stack {
                gateway: Arc::new(DiesAfterExecute(stack.gateway.clone())),
                ..stack.clone()
            };
            let died_by = self.config.settings.request_deadline * 2;
            tokio::time::timeout(died_by, Box::pin(callback::handle(&dying, &events, &query)))
                .await
                .ok()
        } else {
            Some(Box::pin(callback::handle(stack, &events, &query)).await)
        };
        self.after_confirm(candidate, payment, &events).await;
        let Some(outcome) = outcome else {
            // the instance died: nobody heard the answer
            op.unknown();
            return None;
        };
        Self::record_confirm(op, ConfirmAnswer::of_callback(outcome));
        if outcome == CallbackOutcome::NotPaid && approved && self.sim_gateway.executable(payment) {
            self.told_not_paid.lock().push(format!(
                "{payment}: approved, redirect ({status}) answered not_paid, never executed"
            ));
        }
        Some(outcome)
    }

    /// The gateway's webhook for a completed payment: its IPN, as SNS
    /// delivers it, through the API's own decision
    /// ([`booking_service::webhook::handle`]; the SNS signature is the
    /// API's, outside the sim). Delivered once: the API answers every
    /// signed notification 200, so SNS does not deliver it again.
    pub(super) async fn webhook(&self, candidate: &CandidateHash, payment: &PaymentId) {
        let Some(ipn) = self.sim_gateway.ipn(payment) else {
            return;
        };
        let op = self.history.invoke(
            process_of(candidate),
            OpKind::Confirm {
                candidate: candidate.clone(),
                payment: payment.clone(),
            },
        );
        let events = SimConfirmEvents::default();
        let outcome = Box::pin(webhook::handle(self.stack_for(candidate), &events, &ipn)).await;
        self.after_confirm(candidate, payment, &events).await;
        Self::record_confirm(op, ConfirmAnswer::of_notification(&outcome));
    }

    /// The payer pays: approves at the gateway, then the redirect back
    /// (claiming `status`) and the webhook.
    pub(super) async fn pay(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        status: &str,
        rng: &mut ChaCha8Rng,
    ) {
        if !self.sim_gateway.approve(payment) {
            return;
        }
        let mix = &self.config.payers;
        let crash = coin(mix.callback_crash, rng);
        let lost = coin(mix.webhook_lost, rng);
        let twice = coin(mix.webhook_twice, rng);
        let together = coin(mix.webhook_with_callback, rng);
        let delay = uniform_ms(rng, Duration::ZERO, Duration::from_secs(5));
        if together {
            tokio::join!(
                self.callback(candidate, payment, status, crash),
                self.webhook(candidate, payment)
            );
            return;
        }
        self.callback(candidate, payment, status, crash).await;
        if lost {
            return;
        }
        tokio::time::sleep(delay).await;
        if twice {
            tokio::join!(
                self.webhook(candidate, payment),
                self.webhook(candidate, payment)
            );
        } else {
            self.webhook(candidate, payment).await;
        }
    }

    /// What the payer does once admitted; whether they book again.
    pub(super) async fn payer(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        deadline_ms: u64,
        rng: &mut ChaCha8Rng,
    ) -> bool {
        let mix = &self.config.payers;
        let hold = self.config.settings.hold;
        let soon = (Duration::from_secs(15), Duration::from_secs(180).min(hold));
        let left_at = |now: u64| Duration::from_millis(deadline_ms.saturating_sub(now));
        match mix.draw(rng) {
            Behaviour::PayNow => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.pay(candidate, payment, "success", rng).await;
                false
            }
            Behaviour::PayLate => {
                tokio::time::sleep(last_ninety_seconds(left_at(self.now()), rng)).await;
                self.pay(candidate, payment, "success", rng).await;
                false
            }
            Behaviour::Abandon => false,
            Behaviour::ApproveOnly => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.sim_gateway.approve(payment);
                false
            }
            // the gateway sends the payer back with the status of what they
            // did; a forging browser edits it to say success
            Behaviour::Cancel => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.leave_checkout(candidate, payment, SimGateway::cancel, "cancel")
                    .await
                    && coin(mix.rebook, rng)
            }
            Behaviour::Fail => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.leave_checkout(candidate, payment, SimGateway::fail, "failure")
                    .await
                    && coin(mix.rebook, rng)
            }
            Behaviour::CancelForgeSuccess => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.leave_checkout(candidate, payment, SimGateway::cancel, "success")
                    .await
                    && coin(mix.rebook, rng)
            }
            Behaviour::PayForgeCancel => {
                tokio::time::sleep(uniform_ms(rng, soon.0, soon.1)).await;
                self.pay(candidate, payment, "cancel", rng).await;
                false
            }
            Behaviour::PayAfterDeadline => {
                // approves in the hold's last ninety seconds, the redirect
                // comes back up to half a minute after the deadline
                tokio::time::sleep(last_ninety_seconds(left_at(self.now()), rng)).await;
                if !self.sim_gateway.approve(payment) {
                    return false;
                }
                let late = uniform_ms(rng, Duration::from_secs(1), Duration::from_secs(30));
                tokio::time::sleep(left_at(self.now()) + late).await;
                self.callback(candidate, payment, "success", false).await;
                self.webhook(candidate, payment).await;
                false
            }
        }
    }

    /// The payer cancels or fails the payment at the gateway (`act`), then
    /// comes back with a redirect claiming `status`; whether `act` took.
    pub(super) async fn leave_checkout(
        &self,
        candidate: &CandidateHash,
        payment: &PaymentId,
        act: fn(&SimGateway, &PaymentId) -> bool,
        status: &str,
    ) -> bool {
        let done = act(&self.sim_gateway, payment);
        if done {
            self.callback(candidate, payment, status, false).await;
        }
        done
    }

    /// What payers were told: `approved_payers_told_paid` (what the gateway
    /// did is the audit's, in [`checks::invariants`]).
    pub(super) fn payer_checks(&self) -> Vec<Verdict> {
        vec![checks::verdict(
            "approved_payers_told_paid",
            "approved payers' redirects answered not_paid".to_owned(),
            self.told_not_paid.lock().clone(),
        )]
    }
}
