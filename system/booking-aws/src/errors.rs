//! How an SDK error becomes a port error, pure: the decision is made on the
//! error's code (what the service said) and on whether it answered at all.
//! The adapters only extract those two from the SDK's error types.

use booking::queue::QueueError;
use booking::records::RecordError;

/// What a failed SDK call looked like, as far as the decision goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The service's error code (`ConditionalCheckFailedException`, …), if
    /// it answered with one.
    pub code: Option<String>,
    /// The service's message, or what went wrong on the way.
    pub message: String,
    /// No answer: a timeout, a refused connection, a dispatch failure.
    pub unanswered: bool,
}

impl Failure {
    /// A failure from any SDK error (every AWS SDK crate shares the type).
    pub fn of<E, R>(e: &aws_sdk_dynamodb::error::SdkError<E, R>) -> Failure
    where
        E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        use aws_sdk_dynamodb::error::SdkError;
        match e {
            SdkError::ServiceError(s) => Failure {
                code: s.err().code().map(str::to_owned),
                message: s
                    .err()
                    .message()
                    .map_or_else(|| s.err().to_string(), str::to_owned),
                unanswered: false,
            },
            other => Failure {
                code: None,
                message: format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(other)),
                unanswered: true,
            },
        }
    }
}

/// Codes DynamoDB throttles with (on-demand tables included: a burst above
/// twice the previous peak, or a hot partition).
pub const DYNAMODB_THROTTLE_CODES: [&str; 3] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
];

/// What a failed DynamoDB call means for the record store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DynamoClass {
    /// The write's condition did not hold: nothing changed.
    ConditionFailed,
    /// Over the table's throughput: count it, surface it.
    Throttled,
    /// The table does not exist (not provisioned, or the wrong name).
    NoTable,
    /// The call was malformed: a programmer error.
    Invalid,
    /// Anything else the service or the network said: try again later.
    Unavailable,
}

/// The decision for one DynamoDB failure.
pub fn classify_dynamodb(f: &Failure) -> DynamoClass {
    match f.code.as_deref() {
        _ if f.unanswered => DynamoClass::Unavailable,
        Some("ConditionalCheckFailedException") => DynamoClass::ConditionFailed,
        Some(c) if DYNAMODB_THROTTLE_CODES.contains(&c) => DynamoClass::Throttled,
        Some("ResourceNotFoundException") => DynamoClass::NoTable,
        Some("ValidationException" | "SerializationException") => DynamoClass::Invalid,
        _ => DynamoClass::Unavailable,
    }
}

/// The record-store error of a failure that is not a failed condition (the
/// adapter builds that one itself, with the record the check saw).
pub fn record_error(f: &Failure, table: &str) -> RecordError {
    match classify_dynamodb(f) {
        DynamoClass::Throttled => RecordError::Throttled,
        DynamoClass::Invalid => RecordError::Invalid(f.message.clone()),
        DynamoClass::NoTable => RecordError::Unavailable(format!(
            "table {table} not found (run `booking provision`): {}",
            f.message
        )),
        DynamoClass::ConditionFailed | DynamoClass::Unavailable => {
            RecordError::Unavailable(match &f.code {
                Some(code) => format!("{code}: {}", f.message),
                None => f.message.clone(),
            })
        }
    }
}

/// The queue error of an SQS failure.
pub fn queue_error(f: &Failure) -> QueueError {
    if f.unanswered {
        return QueueError::Unavailable(f.message.clone());
    }
    match f.code.as_deref() {
        Some(
            "ReceiptHandleIsInvalid"
            | "InvalidParameterValue.ReceiptHandle"
            | "MessageNotInflight"
            | "AWS.SimpleQueueService.MessageNotInflight",
        ) => QueueError::InvalidReceipt,
        Some(
            "ThrottlingException"
            | "RequestThrottled"
            | "AWS.SimpleQueueService.RequestThrottled"
            | "KmsThrottled",
        ) => QueueError::Throttled,
        Some(
            "InvalidParameterValue"
            | "MissingParameter"
            | "InvalidMessageContents"
            | "InvalidParameterCombination"
            | "ValidationError",
        ) => QueueError::Invalid(f.message.clone()),
        Some(code) => QueueError::Unavailable(format!("{code}: {}", f.message)),
        None => QueueError::Unavailable(f.message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(code: &str) -> Failure {
        Failure {
            code: Some(code.into()),
            message: "m".into(),
            unanswered: false,
        }
    }

    #[test]
    fn dynamodb_failures_are_classified_by_code() {
        assert_eq!(
            classify_dynamodb(&said("ConditionalCheckFailedException")),
            DynamoClass::ConditionFailed
        );
        for c in DYNAMODB_THROTTLE_CODES {
            assert_eq!(classify_dynamodb(&said(c)), DynamoClass::Throttled);
            assert_eq!(record_error(&said(c), "t"), RecordError::Throttled);
        }
        assert_eq!(
            classify_dynamodb(&said("ResourceNotFoundException")),
            DynamoClass::NoTable
        );
        let e = record_error(&said("ResourceNotFoundException"), "bookings");
        assert!(
            matches!(&e, RecordError::Unavailable(m) if m.contains("bookings") && m.contains("provision")),
            "{e:?}"
        );
        assert!(matches!(
            record_error(&said("ValidationException"), "t"),
            RecordError::Invalid(_)
        ));
        assert!(matches!(
            record_error(&said("InternalServerError"), "t"),
            RecordError::Unavailable(m) if m.starts_with("InternalServerError")
        ));
        let timeout = Failure {
            code: None,
            message: "timeout".into(),
            unanswered: true,
        };
        assert_eq!(classify_dynamodb(&timeout), DynamoClass::Unavailable);
    }

    #[test]
    fn sqs_failures_are_classified_by_code() {
        assert_eq!(
            queue_error(&said("ReceiptHandleIsInvalid")),
            QueueError::InvalidReceipt
        );
        assert_eq!(
            queue_error(&said("AWS.SimpleQueueService.MessageNotInflight")),
            QueueError::InvalidReceipt
        );
        assert_eq!(
            queue_error(&said("RequestThrottled")),
            QueueError::Throttled
        );
        assert!(matches!(
            queue_error(&said("InvalidParameterValue")),
            QueueError::Invalid(_)
        ));
        assert!(matches!(
            queue_error(&said("AWS.SimpleQueueService.NonExistentQueue")),
            QueueError::Unavailable(m) if m.contains("NonExistentQueue")
        ));
    }
}
