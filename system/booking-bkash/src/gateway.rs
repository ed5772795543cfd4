//! [`BkashGateway`]: the payment gateway port over bKash Tokenized Checkout.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use booking::Settings;
use booking::clock::Clock;
use booking::coordination::Coordination;
use booking::gateway::{
    CreatePayment, CreatedPayment, Executed, GatewayError, PaymentGateway, PaymentStatus,
    decide_execute_outcome, execute_needs_query,
};
use booking::ids::PaymentId;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::client::{BkashClient, BkashConfig, BuildError, paths};
use crate::tokens::{TokenConfig, TokenManager};
use crate::wire;

/// The payment gateway over HTTP, with the fleet-shared token.
#[derive(Debug, Clone)]
pub struct BkashGateway {
    client: BkashClient,
    tokens: TokenManager,
}

impl BkashGateway {
    /// A gateway whose token is shared through `coordination` under `prefix`.
    pub fn connect(
        config: BkashConfig,
        coordination: Arc<dyn Coordination>,
        clock: Arc<dyn Clock>,
        settings: &Settings,
        prefix: &str,
    ) -> Result<BkashGateway, BuildError> {
        let client = BkashClient::new(config)?;
        let tokens = TokenManager::new(
            Arc::new(client.clone()),
            coordination,
            clock,
            TokenConfig::from_settings(settings),
            prefix,
        );
        Ok(BkashGateway::new(client, tokens))
    }

    /// A gateway from its parts.
    pub fn new(client: BkashClient, tokens: TokenManager) -> BkashGateway {
        BkashGateway { client, tokens }
    }

    /// The token manager.
    pub fn tokens(&self) -> &TokenManager {
        &self.tokens
    }

    /// An API call with the shared token. A token the gateway refuses is
    /// dropped for the fleet (the next caller refreshes) and reported as
    /// [`GatewayError::TokenUnavailable`]: the call did nothing.
    async fn call(
        &self,
        path: &str,
        token: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Value, GatewayError> {
        let answer = self.client.api(path, token, body, deadline).await?;
        match wire::check_status(&answer) {
            Err(e) if e.refused_code() == Some(wire::INVALID_TOKEN) => {
                self.tokens.invalidate(token).await;
                Err(GatewayError::TokenUnavailable)
            }
            Err(e) => Err(e),
            Ok(()) => Ok(answer),
        }
    }

    async fn query_with(
        &self,
        payment: &PaymentId,
        token: &str,
        deadline: Instant,
    ) -> Result<PaymentStatus, GatewayError> {
        let body = json!({ "paymentID": payment.as_str() });
        let v = self.call(paths::STATUS, token, &body, deadline).await?;
        wire::parse_status(&v, payment)
    }
}

/// The part of `within` an execute call may use, the rest kept for the one
/// query after a timeout: `reserve`, but at most half.
fn execute_budget(within: Duration, reserve: Duration) -> Duration {
    within.saturating_sub(reserve.min(within / 2))
}

#[async_trait]
impl PaymentGateway for BkashGateway {
    async fn create(
        &self,
        req: &CreatePayment,
        within: Duration,
    ) -> Result<CreatedPayment, GatewayError> {
        let deadline = Instant::now() + within;
        let token = self.tokens.token_until(deadline).await?;
        let body = json!({
            "mode": "0011",
            "payerReference": req.payer_reference,
            "callbackURL": req.callback_url,
            "amount": req.amount,
            "currency": "BDT",
            "intent": "sale",
            "merchantInvoiceNumber": req.invoice,
        });
        let v = self.call(paths::CREATE, &token, &body, deadline).await?;
        wire::parse_created(&v)
    }

    async fn execute(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<Executed, GatewayError> {
        let start = Instant::now();
        let deadline = start + within;
        let execute_deadline = start + execute_budget(within, self.client.config().query_reserve);
        let token = self.tokens.token_until(execute_deadline).await?;
        let body = json!({ "paymentID": payment.as_str() });
        let executed = match self
            .call(paths::EXECUTE, &token, &body, execute_deadline)
            .await
        {
            Ok(v) => wire::parse_executed(&v, payment),
            Err(e) => Err(e),
        };
        match executed {
            Err(e) if execute_needs_query(&e) => {
                tracing::info!(%payment, error = %e, "execute gave no answer; querying once");
                let query = self.query_with(payment, &token, deadline).await;
                let outcome = decide_execute_outcome(payment, e, query);
                match &outcome {
                    Ok(done) => {
                        tracing::info!(%payment, trx_id = %done.trx_id, "completed payment recovered by query")
                    }
                    Err(e) => {
                        tracing::warn!(%payment, error = %e, "execute uncertain; left to the reconciler")
                    }
                }
                outcome
            }
            other => other,
        }
    }

    async fn query(
        &self,
        payment: &PaymentId,
        within: Duration,
    ) -> Result<PaymentStatus, GatewayError> {
        let deadline = Instant::now() + within;
        let token = self.tokens.token_until(deadline).await?;
        self.query_with(payment, &token, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execute_keeps_a_reserve_for_the_query_but_at_most_half() {
        let s = Duration::from_secs;
        assert_eq!(execute_budget(s(8), s(2)), s(6));
        assert_eq!(execute_budget(s(2), s(2)), s(1));
        assert_eq!(execute_budget(Duration::ZERO, s(2)), Duration::ZERO);
        assert_eq!(execute_budget(s(8), Duration::ZERO), s(8));
    }
}
