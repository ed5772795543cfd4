//! One event-source mapping per handler for a whole fleet, with a durable
//! position: what Lambda gives the AWS stack, for the stacks whose stream
//! every instance can read (embedded in one process, Redis across many).
//!
//! [`LeasedMapping::run`] runs on every instance. The instance holding the
//! handler's lease (a [`Coordination`] lock with an owner token) is the one
//! reader: it starts an [`EventSourceMapping`] at the checkpoint the last
//! leader wrote, writes the checkpoint after every step that moved the
//! position, and renews the lease every third of its time. The others try
//! to take the lease every renewal interval. A leader killed mid-batch
//! leaves its lease to expire; the next leader starts at the last
//! checkpoint and reads the unacknowledged records again: at least once,
//! as Lambda, and both handlers are idempotent (a repeated TTL removal is a
//! no-op release, a repeated PAID change an unchanged upsert).
//!
//! A step lasts at most the poll wait plus one batch's handling; the lease
//! must outlive it with room to renew, which [`LeaseConfig::check`] asserts
//! where the settings are built.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use booking::{Alert, Alerts, Coordination};
use booking_service::Shutdown;
use serde::{Deserialize, Serialize};

use crate::mapping::{BatchFailure, EventSourceMapping, FailureDestination};

/// How long a stream lease lasts without renewal: a dead leader's handler
/// resumes on another instance at most this late.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// The lease and checkpoint of one handler on one sale's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The lock whose holder reads the stream.
    pub lease_key: String,
    /// Where the position lives (the last sequence done with).
    pub checkpoint_key: String,
    /// This instance's owner token.
    pub owner: String,
    /// See [`LEASE_TTL`].
    pub lease_ttl: Duration,
}

impl LeaseConfig {
    /// The lease of `handler` on `sale`'s stream, under `prefix`, held as
    /// `owner`.
    pub fn new(prefix: &str, sale: &booking::SaleId, handler: &str, owner: &str) -> LeaseConfig {
        LeaseConfig {
            lease_key: booking::coordination::keys::stream_lease(prefix, sale, handler),
            checkpoint_key: booking::coordination::keys::stream_checkpoint(prefix, sale, handler),
            owner: owner.to_owned(),
            lease_ttl: LEASE_TTL,
        }
    }

    /// The relation the lease depends on: a step (one poll wait and one
    /// batch) fits in a third of the lease, so a leader renews before it
    /// could expire under it.
    pub fn check(&self, poll_wait: Duration) -> Result<(), String> {
        if poll_wait.saturating_mul(3) >= self.lease_ttl {
            return Err(format!(
                "stream lease of {:?} does not outlive three poll waits of {poll_wait:?}",
                self.lease_ttl
            ));
        }
        Ok(())
    }

    /// How often the leader renews and the others try to take over.
    pub fn renew_every(&self) -> Duration {
        self.lease_ttl / 3
    }
}

/// What a leased mapping did, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseCounts {
    /// Times this instance became the reader.
    pub leases_taken: u64,
    /// Times it lost the lease while reading (renewal refused or failed).
    pub leases_lost: u64,
    /// Checkpoints written.
    pub checkpoints: u64,
    /// Checkpoint writes that failed (retried after the next step).
    pub checkpoint_failures: u64,
    /// The last position this instance read to.
    pub position: u64,
}

/// Makes the mapping a new leader runs, starting after a position (an
/// error: the mapping's settings are refused).
pub type MappingFactory = Box<dyn Fn(u64) -> Result<EventSourceMapping, String> + Send + Sync>;

/// A handler's mapping, run by whichever instance holds its lease.
pub struct LeasedMapping {
    coordination: Arc<dyn Coordination>,
    config: LeaseConfig,
    make: MappingFactory,
    name: &'static str,
    taken: AtomicU64,
    lost: AtomicU64,
    checkpoints: AtomicU64,
    checkpoint_failures: AtomicU64,
    position: AtomicU64,
}

impl std::fmt::Debug for LeasedMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedMapping")
            .field("handler", &self.name)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why a checkpoint could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("checkpoint {key} holds {value:?}, not a stream position")]
pub struct CorruptCheckpoint {
    /// The key.
    pub key: String,
    /// What it held.
    pub value: String,
}

/// The position a checkpoint value names (`None`: no checkpoint yet).
pub fn parse_checkpoint(key: &str, value: Option<&str>) -> Result<u64, CorruptCheckpoint> {
    match value {
        None => Ok(0),
        Some(v) => v.parse().map_err(|_| CorruptCheckpoint {
            key: key.to_owned(),
            value: v.to_owned(),
        }),
    }
}

impl LeasedMapping {
    /// A leased mapping of the handler `name`; `make` builds the mapping a
    /// new leader runs from the checkpoint.
    pub fn new(
        coordination: Arc<dyn Coordination>,
        config: LeaseConfig,
        name: &'static str,
        make: MappingFactory,
    ) -> LeasedMapping {
        LeasedMapping {
            coordination,
            config,
            make,
            name,
            taken: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            checkpoint_failures: AtomicU64::new(0),
            position: AtomicU64::new(0),
        }
    }

    /// The counters.
    pub fn stats(&self) -> LeaseCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseCounts {
            leases_taken: g(&self.taken),
            leases_lost: g(&self.lost),
            checkpoints: g(&self.checkpoints),
            checkpoint_failures: g(&self.checkpoint_failures),
            position: g(&self.position),
        }
    }

    /// Takes the lease whenever it is free and reads while holding it,
    /// until `shutdown`.
    pub async fn run(&self, mut shutdown: Shutdown) {
        let every = self.config.renew_every();
        loop {
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            match self
                .coordination
                .try_lock(
                    &self.config.lease_key,
                    &self.config.owner,
                    self.config.lease_ttl,
                )
                .await
            {
                Ok(true) => self.lead(&mut shutdown).await,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(handler = self.name, error = %e, "stream lease unavailable")
                }
            }
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Reads as the leader until the lease is lost or `shutdown`.
    async fn lead(&self, shutdown: &mut Shutdown) {
        let key = &self.config.checkpoint_key;
        let start = match self.coordination.get(key).await {
            Ok(v) => match parse_checkpoint(key, v.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    // read from the start: the handlers are idempotent, and
                    // a position guessed past records would lose them
                    tracing::error!(handler = self.name, error = %e, "reading the stream from its start");
                    0
                }
            },
            Err(e) => {
                tracing::warn!(handler = self.name, error = %e, "checkpoint unreadable; lease given back");
                let _ = self
                    .coordination
                    .unlock(&self.config.lease_key, &self.config.owner)
                    .await;
                return;
            }
        };
        let mapping = match (self.make)(start) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(handler = self.name, error = %e, "stream mapping refused; lease given back");
                let _ = self
                    .coordination
                    .unlock(&self.config.lease_key, &self.config.owner)
                    .await;
                return;
            }
        };
        self.taken.fetch_add(1, Ordering::Relaxed);
        tracing::info!(handler = self.name, position = start, owner = %self.config.owner, "stream lease taken");
        let mut written = start;
        let mut renewed = Instant::now();
        let stopping = loop {
            let stepped = tokio::select! {
                _ = shutdown.wait_for(|s| *s) => break true,
                s = mapping.step() => s,
            };
            let position = mapping.stats().position;
            self.position.store(position, Ordering::Relaxed);
            if position != written {
                self.write_checkpoint(position, &mut written).await;
            }
            if renewed.elapsed() >= self.config.renew_every() {
                match self
                    .coordination
                    .extend_lock(
                        &self.config.lease_key,
                        &self.config.owner,
                        self.config.lease_ttl,
                    )
                    .await
                {
                    Ok(true) => renewed = Instant::now(),
                    Ok(false) => {
                        self.lost.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            handler = self.name,
                            "stream lease lost to another instance"
                        );
                        break false;
                    }
                    Err(e) => {
                        self.lost.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(handler = self.name, error = %e, "stream lease not renewed; stepping down");
                        break false;
                    }
                }
            }
            let pause = mapping.pause(&stepped);
            if !pause.is_zero() {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => break true,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
        };
        if stopping {
            let position = mapping.stats().position;
            if position != written {
                self.write_checkpoint(position, &mut written).await;
            }
            // hand over at once instead of after the lease's time
            let _ = self
                .coordination
                .unlock(&self.config.lease_key, &self.config.owner)
                .await;
        }
    }

    async fn write_checkpoint(&self, position: u64, written: &mut u64) {
        match self
            .coordination
            .set(&self.config.checkpoint_key, &position.to_string(), None)
            .await
        {
            Ok(()) => {
                *written = position;
                self.checkpoints.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.checkpoint_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(handler = self.name, error = %e, position, "checkpoint not written; retried after the next step");
            }
        }
    }
}

/// The on-failure destination of the stacks without an on-failure queue:
/// every given-up batch is an alert (a human replays it), with the records
/// in its detail.
#[derive(Debug)]
pub struct AlertDestination {
    alerts: Arc<dyn Alerts>,
}

impl AlertDestination {
    /// Raises given-up batches on `alerts`.
    pub fn new(alerts: Arc<dyn Alerts>) -> AlertDestination {
        AlertDestination { alerts }
    }
}

#[async_trait]
impl FailureDestination for AlertDestination {
    async fn send(&self, failure: &BatchFailure) -> Result<(), String> {
        let detail = serde_json::to_string(failure).map_err(|e| e.to_string())?;
        self.alerts
            .raise(Alert {
                kind: "stream_records_given_up".into(),
                detail,
                candidate: None,
                payment_id: None,
            })
            .await
            .map_err(|e| e.to_string())
    }
}
