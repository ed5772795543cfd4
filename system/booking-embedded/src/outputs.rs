//! The system's outputs in process memory, kept whole for the audit and the
//! tests: the status document with every write ([`ObjectSink`], S3 in
//! production), the confirmation outbox ([`OutboxMailer`], SES/SMTP) and the
//! alert log ([`AlertLog`]).
//!
//! Each can be made unavailable by hand ([`ObjectSink::set_unavailable`],
//! [`OutboxMailer::set_unavailable`]) to rehearse an output that is down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use booking::clock::{Clock, SystemClock};
use booking::notify::{
    Alert, Alerts, Confirmation, Mailer, NotifyError, OutputLog, OutputsCleared, StatusSink,
    StatusWrite,
};
use booking::{PaymentId, SaleId};
use parking_lot::Mutex;

/// One overwrite of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkWrite {
    /// When it was written, ms since the epoch (the sink's clock).
    pub at_ms: u64,
    /// The whole document as written.
    pub document: Vec<u8>,
}

/// The status document in memory: `put` overwrites it and is also recorded,
/// in order, so a test can check every version the page could have shown.
#[derive(Debug)]
pub struct ObjectSink {
    clock: Arc<dyn Clock>,
    writes: Mutex<Vec<SinkWrite>>,
    unavailable: AtomicBool,
}

impl Default for ObjectSink {
    fn default() -> ObjectSink {
        ObjectSink::new(Arc::new(SystemClock))
    }
}

impl ObjectSink {
    /// An empty sink stamping writes with `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> ObjectSink {
        ObjectSink {
            clock,
            writes: Mutex::new(Vec::new()),
            unavailable: AtomicBool::new(false),
        }
    }

    /// Every write so far, oldest first.
    pub fn writes(&self) -> Vec<SinkWrite> {
        self.writes.lock().clone()
    }

    /// How many writes so far.
    pub fn write_count(&self) -> usize {
        self.writes.lock().len()
    }

    /// The current document (the last write), if any.
    pub fn current(&self) -> Option<Vec<u8>> {
        self.writes.lock().last().map(|w| w.document.clone())
    }

    /// While set, `put` and `get` fail with [`NotifyError::Unavailable`].
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// Forgets every write (the current document with them); returns how
    /// many there were.
    pub fn clear(&self) -> usize {
        std::mem::take(&mut *self.writes.lock()).len()
    }

    fn check(&self) -> Result<(), NotifyError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(NotifyError::Unavailable("object store down".to_owned()));
        }
        Ok(())
    }
}

#[async_trait]
impl StatusSink for ObjectSink {
    async fn put(&self, document: &[u8]) -> Result<(), NotifyError> {
        self.check()?;
        let at_ms = self.clock.now_ms();
        self.writes.lock().push(SinkWrite {
            at_ms,
            document: document.to_vec(),
        });
        Ok(())
    }

    async fn get(&self) -> Result<Option<Vec<u8>>, NotifyError> {
        self.check()?;
        Ok(self.current())
    }
}

/// The confirmation emails, appended to an outbox in send order. Duplicates
/// are kept, never merged: the audit's "exactly one email per PAID booking"
/// must be able to find a second one.
#[derive(Debug, Default)]
pub struct OutboxMailer {
    outbox: Mutex<Vec<Confirmation>>,
    unavailable: AtomicBool,
}

impl OutboxMailer {
    /// An empty outbox.
    pub fn new() -> OutboxMailer {
        OutboxMailer::default()
    }

    /// Every email sent, in order, duplicates included.
    pub fn sent(&self) -> Vec<Confirmation> {
        self.outbox.lock().clone()
    }

    /// How many emails went out for `payment_id`.
    pub fn sent_for(&self, payment_id: &PaymentId) -> usize {
        self.outbox
            .lock()
            .iter()
            .filter(|c| &c.payment_id == payment_id)
            .count()
    }

    /// Forgets the emails of `sale`; returns how many there were.
    pub fn clear_sale(&self, sale: &SaleId) -> usize {
        let mut outbox = self.outbox.lock();
        let before = outbox.len();
        outbox.retain(|c| c.sale != *sale);
        before - outbox.len()
    }

    /// While set, `send` fails with [`NotifyError::Unavailable`] and nothing
    /// is appended.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }
}

#[async_trait]
impl Mailer for OutboxMailer {
    async fn send(&self, confirmation: &Confirmation) -> Result<(), NotifyError> {
        if self.unavailable.load(Ordering::SeqCst) {
            return Err(NotifyError::Unavailable("mail server down".to_owned()));
        }
        self.outbox.lock().push(confirmation.clone());
        Ok(())
    }
}

/// Alerts raised for a human, in order.
#[derive(Debug, Default)]
pub struct AlertLog {
    alerts: Mutex<Vec<Alert>>,
}

impl AlertLog {
    /// An empty log.
    pub fn new() -> AlertLog {
        AlertLog::default()
    }

    /// Every alert so far, oldest first.
    pub fn raised(&self) -> Vec<Alert> {
        self.alerts.lock().clone()
    }

    /// Forgets every alert; returns how many there were.
    pub fn clear(&self) -> usize {
        std::mem::take(&mut *self.alerts.lock()).len()
    }

    /// The alerts of one kind, oldest first.
    pub fn of_kind(&self, kind: &str) -> Vec<Alert> {
        self.alerts
            .lock()
            .iter()
            .filter(|a| a.kind == kind)
            .cloned()
            .collect()
    }
}

#[async_trait]
impl Alerts for AlertLog {
    async fn raise(&self, alert: Alert) -> Result<(), NotifyError> {
        self.alerts.lock().push(alert);
        Ok(())
    }
}

/// The three embedded outputs read back together: the [`OutputLog`] of the
/// embedded stack.
#[derive(Debug, Clone)]
pub struct EmbeddedOutputs {
    /// The confirmation outbox.
    pub mailer: Arc<OutboxMailer>,
    /// The alert log.
    pub alerts: Arc<AlertLog>,
    /// The status document and its every write.
    pub sink: Arc<ObjectSink>,
}

#[async_trait]
impl OutputLog for EmbeddedOutputs {
    async fn sent_mail(&self) -> Result<Vec<Confirmation>, NotifyError> {
        Ok(self.mailer.sent())
    }

    async fn alerts_raised(&self) -> Result<Vec<Alert>, NotifyError> {
        Ok(self.alerts.raised())
    }

    async fn status_writes(&self, since_ms: u64) -> Result<Vec<StatusWrite>, NotifyError> {
        Ok(self
            .sink
            .writes()
            .into_iter()
            .filter(|w| w.at_ms >= since_ms)
            .map(|w| StatusWrite {
                at_ms: w.at_ms,
                document: w.document,
            })
            .collect())
    }

    /// The sale's mail; every alert and status write (a process's embedded
    /// outputs serve the one sale its instances run: alerts name no sale).
    async fn clear_sale(&self, sale: &SaleId) -> Result<Option<OutputsCleared>, NotifyError> {
        Ok(Some(OutputsCleared {
            mail: self.mailer.clear_sale(sale) as u64,
            alerts: self.alerts.clear() as u64,
            status_writes: self.sink.clear() as u64,
        }))
    }
}
