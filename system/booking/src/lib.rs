//! The booking system's domain: identifiers ([`ids`]), settings with the
//! article's numbers ([`settings`]), and the ports every backend implements,
//! starting with the seat [`ledger`] and its reference model.
//!
//! Nothing here does I/O or reads the clock: times are arguments, backends are
//! traits. Adapters live in `booking-embedded` (in-process, the default) and
//! `booking-redis`.

pub mod admission;
pub mod bugs;
pub mod clock;
pub mod coordination;
pub mod entropy;
pub mod gateway;
pub mod ids;
pub mod ledger;
pub mod notify;
pub mod pools;
pub mod queue;
pub mod records;
pub mod settings;
pub mod status;

pub use admission::{AdmittedBooking, invoice_number, parse_invoice};
pub use bugs::{Bug, Bugs};
pub use clock::{Clock, ManualClock, SystemClock};
pub use coordination::{Coordination, CoordinationError};
pub use entropy::{Entropy, OsEntropy, SeededEntropy};
pub use gateway::{
    CreatePayment, CreatedPayment, Executed, GatewayError, GatewayPaymentState, PaymentGateway,
    PaymentStatus,
};
pub use ids::{CandidateHash, Level, PaymentId, RequestToken, SaleId};
pub use ledger::{Admission, Counters, Hold, HoldState, Ledger, LedgerError, Model, Step};
pub use notify::{
    Alert, Alerts, Confirmation, Mailer, NotifyError, OutputLog, StatusSink, StatusWrite,
};
pub use pools::PoolFigures;
pub use queue::{Message, Queue, QueueDepth, QueueError, ReceiptHandle, Received, SendOutcome};
pub use records::{
    BookingRecord, ChangeStream, Condition, ConfirmPath, RecordError, RecordStatus, RecordStore,
    StreamKind, StreamRecord, Throttles, UserIdentity, WorkerVerdict, classify_conflict,
};
pub use settings::{BrokenRelation, Relation, Settings};
pub use status::{StatusDocument, StatusWriter};
