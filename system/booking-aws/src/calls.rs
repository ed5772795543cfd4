//! Every AWS call the adapters make, counted per service and operation:
//! [`AwsCalls`], filled by an SDK interceptor ([`CountCalls`]) on each of
//! the four clients ([`crate::Clients`]), so the count covers every caller
//! of those clients (the request path, the worker, the confirm step, the
//! reconciler, the status writer, the stream mappings, `/metrics` itself)
//! without a line in any of them.
//!
//! One count per operation the SDK executes, before serialization (once
//! per operation, whatever its attempts): an SDK
//! retry of the same call is not counted again (DynamoDB makes one attempt
//! anyway), and a call that fails is counted like one that succeeds. The
//! service is the SDK's own name for it (`SQS`, `S3`, `DynamoDB`,
//! `DynamoDB Streams`), the operation the API's (`SendMessageBatch`,
//! `PutObject`, `GetItem`, …).

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_sqs::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_sqs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// Calls of one operation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CallCount {
    /// The SDK's service name (`SQS`, `S3`, `DynamoDB`, `DynamoDB Streams`).
    pub service: String,
    /// The operation (`SendMessage`, `PutObject`, …).
    pub operation: String,
    /// How many times it was called.
    pub calls: u64,
}

/// Running totals of AWS calls by service and operation.
#[derive(Debug, Default)]
pub struct AwsCalls {
    counts: Mutex<BTreeMap<String, BTreeMap<String, u64>>>,
}

impl AwsCalls {
    /// Counts one call of `operation` on `service`.
    pub fn count(&self, service: &str, operation: &str) {
        let mut counts = self.counts.lock();
        if let Some(ops) = counts.get_mut(service) {
            if let Some(n) = ops.get_mut(operation) {
                *n += 1;
                return;
            }
            ops.insert(operation.to_owned(), 1);
            return;
        }
        counts.insert(
            service.to_owned(),
            BTreeMap::from([(operation.to_owned(), 1)]),
        );
    }

    /// Every operation called so far, by service then operation.
    pub fn snapshot(&self) -> Vec<CallCount> {
        self.counts
            .lock()
            .iter()
            .flat_map(|(service, ops)| {
                ops.iter().map(move |(op, calls)| CallCount {
                    service: service.clone(),
                    operation: op.clone(),
                    calls: *calls,
                })
            })
            .collect()
    }

    /// Calls of one operation so far.
    pub fn calls(&self, service: &str, operation: &str) -> u64 {
        self.counts
            .lock()
            .get(service)
            .and_then(|ops| ops.get(operation))
            .copied()
            .unwrap_or(0)
    }

    /// Calls of every operation of `service` so far.
    pub fn service_calls(&self, service: &str) -> u64 {
        self.counts
            .lock()
            .get(service)
            .map_or(0, |ops| ops.values().sum())
    }
}

/// The difference `after - before` per operation (operations absent from
/// `before` count from zero), without the ones that made no call in between
/// (pure).
pub fn calls_between(before: &[CallCount], after: &[CallCount]) -> Vec<CallCount> {
    after
        .iter()
        .filter_map(|a| {
            let b = before
                .iter()
                .find(|b| b.service == a.service && b.operation == a.operation)
                .map_or(0, |b| b.calls);
            let calls = a.calls.saturating_sub(b);
            (calls > 0).then(|| CallCount { calls, ..a.clone() })
        })
        .collect()
}

/// The SDK interceptor that counts each operation into an [`AwsCalls`].
#[derive(Debug, Clone)]
pub struct CountCalls(pub Arc<AwsCalls>);

impl Intercept for CountCalls {
    fn name(&self) -> &'static str {
        "sellout::CountCalls"
    }

    // not `read_before_execution`: a client's interceptors read that
    // before the operation's configuration (its `Metadata`) is applied
    fn read_before_serialization(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(m) = cfg.load::<Metadata>() {
            self.0.count(m.service(), m.name());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_per_service_and_operation() {
        let c = AwsCalls::default();
        c.count("SQS", "SendMessage");
        c.count("SQS", "SendMessage");
        c.count("SQS", "DeleteMessageBatch");
        c.count("S3", "PutObject");
        assert_eq!(c.calls("SQS", "SendMessage"), 2);
        assert_eq!(c.calls("SQS", "ReceiveMessage"), 0);
        assert_eq!(c.service_calls("SQS"), 3);
        assert_eq!(c.service_calls("DynamoDB"), 0);
        let s = c.snapshot();
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0],
            CallCount {
                service: "S3".into(),
                operation: "PutObject".into(),
                calls: 1
            }
        );
    }

    #[test]
    fn the_difference_keeps_only_operations_called_in_between() {
        let c = AwsCalls::default();
        c.count("SQS", "SendMessage");
        c.count("S3", "PutObject");
        let before = c.snapshot();
        c.count("SQS", "SendMessage");
        c.count("SQS", "ReceiveMessage");
        let d = calls_between(&before, &c.snapshot());
        let pairs: Vec<(&str, u64)> = d.iter().map(|x| (x.operation.as_str(), x.calls)).collect();
        assert_eq!(pairs, vec![("ReceiveMessage", 1), ("SendMessage", 1)]);
    }
}
