//! `booking provision`: makes every table, index, queue and bucket with
//! exactly the design's settings, or brings an existing one to them, and
//! reports each setting it looked at. Run twice, it changes nothing the
//! second time (every step says `unchanged`).
//!
//! - the table: on-demand, partition key `candidate`, the `by_payment` GSI,
//!   the sparse `held_due` GSI (the reconciler's query), a stream with new
//!   and old images, deletion protection, TTL on `expires_at_s`,
//!   point-in-time recovery;
//! - the admission queue: FIFO, high-throughput mode
//!   (`DeduplicationScope=messageGroup`, `FifoThroughputLimit=perMessageGroupId`),
//!   the settings' visibility timeout, 20 s long polls by default, explicit
//!   deduplication IDs, redrive to its FIFO dead-letter queue after the
//!   settings' receives (5);
//! - the stream mappings' on-failure queue (standard);
//! - the status bucket; and, with [`status_page`] (which `booking provision`
//!   calls after [`provision`]), the status page beside the status document.
//!
//! What cannot be brought to the design without losing data (another key
//! schema, another stream view, a standard queue under the FIFO name) is
//! refused with the reason ([`ProvisionError::Drift`]). A setting the server
//! does not implement (point-in-time recovery on an emulator) is an error
//! too, unless the caller allows it; the report then says `unsupported`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, GlobalSecondaryIndexUpdate,
    KeySchemaElement, KeyType, PointInTimeRecoverySpecification, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TableStatus, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use booking::Settings;
use booking::queue::{RECEIVE_WAIT_MAX, VISIBILITY_TIMEOUT_MAX};
use booking_streams::item::{
    BY_PAYMENT_INDEX, DEADLINE, HELD_BUCKET, HELD_DUE_INDEX, KEY, PAYMENT, TTL_ATTRIBUTE,
};
use serde::{Deserialize, Serialize};

use crate::errors::Failure;
use crate::queue::whole_seconds;
use crate::resources::Resources;
use crate::sdk::Clients;

/// How long a table or index may take to become active.
pub const ACTIVE_WAIT_MAX: Duration = Duration::from_secs(10 * 60);
/// Between two looks at a table that is not active yet.
pub const ACTIVE_POLL: Duration = Duration::from_millis(500);
/// How long SQS keeps a message: 14 days, its maximum, so nothing in either
/// queue expires before a human has looked.
pub const MESSAGE_RETENTION_S: u32 = 14 * 24 * 60 * 60;

/// What provisioning did with one setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Made now.
    Created,
    /// Already as the design says.
    Unchanged,
    /// Changed to what the design says.
    Updated,
    /// The server does not implement it.
    Unsupported,
}

/// One setting looked at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The table, queue or bucket.
    pub resource: String,
    /// What about it.
    pub setting: String,
    /// What was done.
    pub state: StepState,
    /// The value now (or why unsupported).
    pub detail: String,
}

/// Everything provisioning looked at, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionReport {
    /// The steps.
    pub steps: Vec<Step>,
}

impl ProvisionReport {
    fn push(&mut self, resource: &str, setting: &str, state: StepState, detail: impl Into<String>) {
        self.steps.push(Step {
            resource: resource.to_owned(),
            setting: setting.to_owned(),
            state,
            detail: detail.into(),
        });
    }

    /// Whether anything was created or changed.
    pub fn changed(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.state, StepState::Created | StepState::Updated))
    }

    /// The step for `resource`'s `setting`.
    pub fn step(&self, resource: &str, setting: &str) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| s.resource == resource && s.setting == setting)
    }
}

/// Why provisioning stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// An existing resource differs from the design in a way that cannot be
    /// changed in place.
    #[error("{resource}: {why}")]
    Drift {
        /// Which.
        resource: String,
        /// How.
        why: String,
    },
    /// The server does not implement a setting the design needs.
    #[error(
        "{resource}: {setting} is not supported by this server ({why}); allow unsupported settings for a local emulator"
    )]
    Unsupported {
        /// Which.
        resource: String,
        /// What.
        setting: String,
        /// The server's answer.
        why: String,
    },
    /// A call failed.
    #[error("{what}: {why}")]
    Service {
        /// The call.
        what: String,
        /// Its error.
        why: String,
    },
    /// A table or index did not become active in time.
    #[error("{0} not active after {ACTIVE_WAIT_MAX:?}")]
    NotActive(String),
    /// The names are invalid.
    #[error("invalid names: {0}")]
    Names(String),
}

fn service(what: &str) -> impl Fn(Failure) -> ProvisionError + '_ {
    move |f| ProvisionError::Service {
        what: what.to_owned(),
        why: match f.code {
            Some(c) => format!("{c}: {}", f.message),
            None => f.message,
        },
    }
}

fn built<T, E: std::fmt::Display>(r: Result<T, E>) -> Result<T, ProvisionError> {
    r.map_err(|e| ProvisionError::Service {
        what: "building a request".into(),
        why: e.to_string(),
    })
}

/// Whether an error code says the server does not implement the call.
pub fn is_unsupported(f: &Failure) -> bool {
    matches!(
        f.code.as_deref(),
        Some(
            "UnknownOperationException"
                | "NotImplemented"
                | "InvalidAction"
                | "UnrecognizedClientException"
        )
    ) || (f.code.is_none()
        && !f.unanswered
        && f.message.to_ascii_lowercase().contains("not implemented"))
}

/// What to provision with.
#[derive(Debug, Clone)]
pub struct ProvisionOptions {
    /// The queue's visibility timeout (the settings').
    pub visibility_timeout: Duration,
    /// Receives before the dead-letter queue (the settings').
    pub receives_max: u32,
    /// Report a setting the server lacks as `unsupported` instead of failing.
    pub allow_unsupported: bool,
}

impl ProvisionOptions {
    /// From an instance's settings.
    pub fn from_settings(settings: &Settings, allow_unsupported: bool) -> ProvisionOptions {
        ProvisionOptions {
            visibility_timeout: settings.visibility_timeout,
            receives_max: settings.receives_max,
            allow_unsupported,
        }
    }
}

/// The admission queue's attributes, as SQS spells them. The visibility
/// timeout is whole seconds, at least one.
pub fn admission_queue_attributes(
    options: &ProvisionOptions,
    dead_letter_arn: &str,
) -> BTreeMap<String, String> {
    let visibility = whole_seconds(options.visibility_timeout, VISIBILITY_TIMEOUT_MAX).max(1);
    let mut a = fifo_attributes();
    a.insert("VisibilityTimeout".into(), visibility.to_string());
    a.insert(
        "ReceiveMessageWaitTimeSeconds".into(),
        RECEIVE_WAIT_MAX.as_secs().to_string(),
    );
    a.insert(
        "RedrivePolicy".into(),
        serde_json::json!({
            "deadLetterTargetArn": dead_letter_arn,
            "maxReceiveCount": options.receives_max,
        })
        .to_string(),
    );
    a
}

/// The FIFO attributes both FIFO queues share.
pub fn fifo_attributes() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("FifoQueue".into(), "true".into()),
        ("ContentBasedDeduplication".into(), "false".into()),
        ("DeduplicationScope".into(), "messageGroup".into()),
        ("FifoThroughputLimit".into(), "perMessageGroupId".into()),
        (
            "MessageRetentionPeriod".into(),
            MESSAGE_RETENTION_S.to_string(),
        ),
    ])
}

/// The attributes of `want` that `have` lacks or differs in. The redrive
/// policy compares as JSON (SQS may answer its count as a number or a
/// string).
pub fn attribute_drift(
    want: &BTreeMap<String, String>,
    have: &HashMap<String, String>,
) -> BTreeMap<String, String> {
    let same_redrive = |a: &str, b: &str| {
        let parse = |s: &str| {
            serde_json::from_str::<serde_json::Value>(s).ok().map(|v| {
                (
                    v["deadLetterTargetArn"].as_str().map(str::to_owned),
                    v["maxReceiveCount"]
                        .as_u64()
                        .or_else(|| v["maxReceiveCount"].as_str().and_then(|s| s.parse().ok())),
                )
            })
        };
        parse(a).is_some() && parse(a) == parse(b)
    };
    want.iter()
        .filter(|(k, v)| match have.get(*k) {
            Some(h) if k.as_str() == "RedrivePolicy" => !same_redrive(v, h),
            Some(h) => h != *v,
            None => true,
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Provisions everything `resources` names.
pub async fn provision(
    clients: &Clients,
    resources: &Resources,
    options: &ProvisionOptions,
) -> Result<ProvisionReport, ProvisionError> {
    resources.check().map_err(ProvisionError::Names)?;
    let mut report = ProvisionReport::default();
    table(clients, &resources.table, options, &mut report).await?;
    let dead_letter_arn = queue(
        clients,
        &resources.dead_letter_queue,
        fifo_attributes(),
        &mut report,
    )
    .await?;
    queue(
        clients,
        &resources.queue,
        admission_queue_attributes(options, &dead_letter_arn),
        &mut report,
    )
    .await?;
    queue(
        clients,
        &resources.failure_queue,
        BTreeMap::from([(
            "MessageRetentionPeriod".into(),
            MESSAGE_RETENTION_S.to_string(),
        )]),
        &mut report,
    )
    .await?;
    bucket(clients, &resources.bucket, &mut report).await?;
    Ok(report)
}

fn key(name: &str, kind: KeyType) -> Result<KeySchemaElement, ProvisionError> {
    built(
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build(),
    )
}

fn attribute(name: &str, kind: ScalarAttributeType) -> Result<AttributeDefinition, ProvisionError> {
    built(
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build(),
    )
}

fn all_projected() -> Projection {
    Projection::builder()
        .projection_type(ProjectionType::All)
        .build()
}

/// The design's two GSIs.
fn indexes() -> Result<Vec<GlobalSecondaryIndex>, ProvisionError> {
    Ok(vec![
        built(
            GlobalSecondaryIndex::builder()
                .index_name(BY_PAYMENT_INDEX)
                .key_schema(key(PAYMENT, KeyType::Hash)?)
                .projection(all_projected())
                .build(),
        )?,
        built(
            GlobalSecondaryIndex::builder()
                .index_name(HELD_DUE_INDEX)
                .key_schema(key(HELD_BUCKET, KeyType::Hash)?)
                .key_schema(key(DEADLINE, KeyType::Range)?)
                .projection(all_projected())
                .build(),
        )?,
    ])
}

fn attribute_definitions() -> Result<Vec<AttributeDefinition>, ProvisionError> {
    Ok(vec![
        attribute(KEY, ScalarAttributeType::S)?,
        attribute(PAYMENT, ScalarAttributeType::S)?,
        attribute(HELD_BUCKET, ScalarAttributeType::S)?,
        attribute(DEADLINE, ScalarAttributeType::N)?,
    ])
}

fn streams_on() -> Result<StreamSpecification, ProvisionError> {
    built(
        StreamSpecification::builder()
            .stream_enabled(true)
            .stream_view_type(StreamViewType::NewAndOldImages)
            .build(),
    )
}

async fn describe(
    clients: &Clients,
    name: &str,
) -> Result<Option<aws_sdk_dynamodb::types::TableDescription>, ProvisionError> {
    match clients
        .dynamodb
        .describe_table()
        .table_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out.table().cloned()),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_resource_not_found_exception()) =>
        {
            Ok(None)
        }
        Err(e) => Err(service("DescribeTable")(Failure::of(&e))),
    }
}

/// Waits until the table and its indexes are active.
async fn wait_active(clients: &Clients, name: &str) -> Result<(), ProvisionError> {
    let started = tokio::time::Instant::now();
    while started.elapsed() < ACTIVE_WAIT_MAX {
        if let Some(t) = describe(clients, name).await? {
            let table_active = t.table_status() == Some(&TableStatus::Active);
            let indexes_active = t.global_secondary_indexes().iter().all(|i| {
                i.index_status()
                    .is_none_or(|s| *s == aws_sdk_dynamodb::types::IndexStatus::Active)
            });
            if table_active && indexes_active {
                return Ok(());
            }
        }
        tokio::time::sleep(ACTIVE_POLL).await;
    }
    Err(ProvisionError::NotActive(name.to_owned()))
}

async fn table(
    clients: &Clients,
    name: &str,
    options: &ProvisionOptions,
    report: &mut ProvisionReport,
) -> Result<(), ProvisionError> {
    let d = &clients.dynamodb;
    match describe(clients, name).await? {
        None => {
            d.create_table()
                .table_name(name)
                .billing_mode(BillingMode::PayPerRequest)
                .key_schema(key(KEY, KeyType::Hash)?)
                .set_attribute_definitions(Some(attribute_definitions()?))
                .set_global_secondary_indexes(Some(indexes()?))
                .stream_specification(streams_on()?)
                .deletion_protection_enabled(true)
                .send()
                .await
                .map_err(|e| service("CreateTable")(Failure::of(&e)))?;
            wait_active(clients, name).await?;
            for (setting, detail) in [
                ("table", "partition key candidate (S)"),
                ("billing", "PAY_PER_REQUEST"),
                ("index by_payment", "payment_id, all attributes"),
                (
                    "index held_due",
                    "held_bucket + deadline_ms, all attributes",
                ),
                ("stream", "NEW_AND_OLD_IMAGES"),
                ("deletion protection", "on"),
            ] {
                report.push(name, setting, StepState::Created, detail);
            }
        }
        Some(t) => {
            let keys: Vec<(String, String)> = t
                .key_schema()
                .iter()
                .map(|k| {
                    (
                        k.attribute_name().to_owned(),
                        k.key_type().as_str().to_owned(),
                    )
                })
                .collect();
            if keys != [(KEY.to_owned(), "HASH".to_owned())] {
                return Err(ProvisionError::Drift {
                    resource: name.into(),
                    why: format!(
                        "key schema {keys:?}, the design's is candidate HASH: a new table is needed"
                    ),
                });
            }
            report.push(
                name,
                "table",
                StepState::Unchanged,
                "partition key candidate (S)",
            );
            let on_demand = t
                .billing_mode_summary()
                .and_then(|b| b.billing_mode())
                .is_some_and(|m| *m == BillingMode::PayPerRequest);
            if on_demand {
                report.push(name, "billing", StepState::Unchanged, "PAY_PER_REQUEST");
            } else {
                d.update_table()
                    .table_name(name)
                    .billing_mode(BillingMode::PayPerRequest)
                    .send()
                    .await
                    .map_err(|e| service("UpdateTable billing")(Failure::of(&e)))?;
                wait_active(clients, name).await?;
                report.push(name, "billing", StepState::Updated, "PAY_PER_REQUEST");
            }
            for index in indexes()? {
                let index_name = index.index_name().to_owned();
                let setting = format!("index {index_name}");
                let existing = t
                    .global_secondary_indexes()
                    .iter()
                    .find(|i| i.index_name() == Some(index_name.as_str()));
                match existing {
                    Some(i) => {
                        let want: Vec<&str> = index
                            .key_schema()
                            .iter()
                            .map(|k| k.attribute_name())
                            .collect();
                        let have: Vec<&str> =
                            i.key_schema().iter().map(|k| k.attribute_name()).collect();
                        if want != have {
                            return Err(ProvisionError::Drift {
                                resource: name.into(),
                                why: format!(
                                    "index {index_name} keyed on {have:?}, the design's on {want:?}"
                                ),
                            });
                        }
                        report.push(name, &setting, StepState::Unchanged, want.join(" + "));
                    }
                    None => {
                        let create = built(
                            aws_sdk_dynamodb::types::CreateGlobalSecondaryIndexAction::builder()
                                .index_name(&index_name)
                                .set_key_schema(Some(index.key_schema().to_vec()))
                                .projection(all_projected())
                                .build(),
                        )?;
                        d.update_table()
                            .table_name(name)
                            .set_attribute_definitions(Some(attribute_definitions()?))
                            .global_secondary_index_updates(
                                GlobalSecondaryIndexUpdate::builder().create(create).build(),
                            )
                            .send()
                            .await
                            .map_err(|e| service("UpdateTable index")(Failure::of(&e)))?;
                        wait_active(clients, name).await?;
                        report.push(name, &setting, StepState::Created, "all attributes");
                    }
                }
            }
            let stream = t.stream_specification();
            match (
                stream.map(|s| s.stream_enabled()),
                stream.and_then(|s| s.stream_view_type()),
            ) {
                (Some(true), Some(StreamViewType::NewAndOldImages)) => {
                    report.push(name, "stream", StepState::Unchanged, "NEW_AND_OLD_IMAGES");
                }
                (Some(true), other) => {
                    return Err(ProvisionError::Drift {
                        resource: name.into(),
                        why: format!(
                            "stream with {other:?} images, the design's has new and old: disable it first (its readers lose their place)"
                        ),
                    });
                }
                _ => {
                    d.update_table()
                        .table_name(name)
                        .stream_specification(streams_on()?)
                        .send()
                        .await
                        .map_err(|e| service("UpdateTable stream")(Failure::of(&e)))?;
                    wait_active(clients, name).await?;
                    report.push(name, "stream", StepState::Updated, "NEW_AND_OLD_IMAGES");
                }
            }
            if t.deletion_protection_enabled() == Some(true) {
                report.push(name, "deletion protection", StepState::Unchanged, "on");
            } else {
                d.update_table()
                    .table_name(name)
                    .deletion_protection_enabled(true)
                    .send()
                    .await
                    .map_err(|e| service("UpdateTable deletion protection")(Failure::of(&e)))?;
                wait_active(clients, name).await?;
                report.push(name, "deletion protection", StepState::Updated, "on");
            }
        }
    }
    ttl(clients, name, report).await?;
    pitr(clients, name, options, report).await
}

async fn ttl(
    clients: &Clients,
    name: &str,
    report: &mut ProvisionReport,
) -> Result<(), ProvisionError> {
    let d = &clients.dynamodb;
    let described = d
        .describe_time_to_live()
        .table_name(name)
        .send()
        .await
        .map_err(|e| service("DescribeTimeToLive")(Failure::of(&e)))?;
    let current = described.time_to_live_description();
    let status = current
        .and_then(|t| t.time_to_live_status())
        .map(|s| s.as_str().to_owned());
    let attribute = current.and_then(|t| t.attribute_name()).map(str::to_owned);
    match (status.as_deref(), attribute.as_deref()) {
        (Some("ENABLED" | "ENABLING"), Some(a)) if a == TTL_ATTRIBUTE => {
            report.push(name, "ttl", StepState::Unchanged, TTL_ATTRIBUTE);
            Ok(())
        }
        (Some("ENABLED" | "ENABLING"), other) => Err(ProvisionError::Drift {
            resource: name.into(),
            why: format!("TTL on {other:?}, the design's is on {TTL_ATTRIBUTE}"),
        }),
        _ => {
            d.update_time_to_live()
                .table_name(name)
                .time_to_live_specification(built(
                    TimeToLiveSpecification::builder()
                        .enabled(true)
                        .attribute_name(TTL_ATTRIBUTE)
                        .build(),
                )?)
                .send()
                .await
                .map_err(|e| service("UpdateTimeToLive")(Failure::of(&e)))?;
            report.push(name, "ttl", StepState::Created, TTL_ATTRIBUTE);
            Ok(())
        }
    }
}

async fn pitr(
    clients: &Clients,
    name: &str,
    options: &ProvisionOptions,
    report: &mut ProvisionReport,
) -> Result<(), ProvisionError> {
    let d = &clients.dynamodb;
    let unsupported = |f: Failure, report: &mut ProvisionReport| {
        if options.allow_unsupported {
            report.push(
                name,
                "point-in-time recovery",
                StepState::Unsupported,
                f.message.clone(),
            );
            Ok(())
        } else {
            Err(ProvisionError::Unsupported {
                resource: name.into(),
                setting: "point-in-time recovery".into(),
                why: f.message,
            })
        }
    };
    let described = match d
        .describe_continuous_backups()
        .table_name(name)
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) => {
            let f = Failure::of(&e);
            return if is_unsupported(&f) {
                unsupported(f, report)
            } else {
                Err(service("DescribeContinuousBackups")(f))
            };
        }
    };
    let enabled = described
        .continuous_backups_description()
        .and_then(|c| c.point_in_time_recovery_description())
        .and_then(|p| p.point_in_time_recovery_status())
        .is_some_and(|s| s.as_str() == "ENABLED");
    if enabled {
        report.push(name, "point-in-time recovery", StepState::Unchanged, "on");
        return Ok(());
    }
    match d
        .update_continuous_backups()
        .table_name(name)
        .point_in_time_recovery_specification(built(
            PointInTimeRecoverySpecification::builder()
                .point_in_time_recovery_enabled(true)
                .build(),
        )?)
        .send()
        .await
    {
        Ok(_) => {
            report.push(name, "point-in-time recovery", StepState::Created, "on");
            Ok(())
        }
        Err(e) => {
            let f = Failure::of(&e);
            if is_unsupported(&f) {
                unsupported(f, report)
            } else {
                Err(service("UpdateContinuousBackups")(f))
            }
        }
    }
}

/// Makes or checks one queue; returns its ARN.
async fn queue(
    clients: &Clients,
    name: &str,
    want: BTreeMap<String, String>,
    report: &mut ProvisionReport,
) -> Result<String, ProvisionError> {
    let sqs = &clients.sqs;
    let existing = match sqs.get_queue_url().queue_name(name).send().await {
        Ok(out) => out.queue_url().map(str::to_owned),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_queue_does_not_exist()) =>
        {
            None
        }
        Err(e) => return Err(service("GetQueueUrl")(Failure::of(&e))),
    };
    let url = match existing {
        None => {
            let mut create = sqs.create_queue().queue_name(name);
            for (k, v) in &want {
                create = create.attributes(QueueAttributeName::from(k.as_str()), v);
            }
            let out = create
                .send()
                .await
                .map_err(|e| service("CreateQueue")(Failure::of(&e)))?;
            for (k, v) in &want {
                report.push(name, k, StepState::Created, v.clone());
            }
            out.queue_url()
                .map(str::to_owned)
                .ok_or_else(|| ProvisionError::Service {
                    what: "CreateQueue".into(),
                    why: "no queue URL".into(),
                })?
        }
        Some(url) => {
            let have = queue_attributes(clients, &url).await?;
            let drift = attribute_drift(&want, &have);
            if drift.contains_key("FifoQueue") {
                return Err(ProvisionError::Drift {
                    resource: name.into(),
                    why: "a standard queue under a FIFO name (a queue's type cannot change)".into(),
                });
            }
            if !drift.is_empty() {
                let mut set = sqs.set_queue_attributes().queue_url(&url);
                for (k, v) in &drift {
                    set = set.attributes(QueueAttributeName::from(k.as_str()), v);
                }
                set.send()
                    .await
                    .map_err(|e| service("SetQueueAttributes")(Failure::of(&e)))?;
            }
            for (k, v) in &want {
                let state = if drift.contains_key(k) {
                    StepState::Updated
                } else {
                    StepState::Unchanged
                };
                report.push(name, k, state, v.clone());
            }
            url
        }
    };
    queue_attributes(clients, &url)
        .await?
        .remove("QueueArn")
        .ok_or_else(|| ProvisionError::Service {
            what: "GetQueueAttributes".into(),
            why: format!("no QueueArn for {name}"),
        })
}

async fn queue_attributes(
    clients: &Clients,
    url: &str,
) -> Result<HashMap<String, String>, ProvisionError> {
    let out = clients
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| service("GetQueueAttributes")(Failure::of(&e)))?;
    Ok(out
        .attributes()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.clone()))
                .collect()
        })
        .unwrap_or_default())
}

async fn bucket(
    clients: &Clients,
    name: &str,
    report: &mut ProvisionReport,
) -> Result<(), ProvisionError> {
    let s3 = &clients.s3;
    if s3.head_bucket().bucket(name).send().await.is_ok() {
        report.push(name, "bucket", StepState::Unchanged, "exists");
        return Ok(());
    }
    let region = s3.config().region().map(|r| r.as_ref().to_owned());
    let mut create = s3.create_bucket().bucket(name);
    if let Some(region) = region.filter(|r| r != "us-east-1") {
        create = create.create_bucket_configuration(
            aws_sdk_s3::types::CreateBucketConfiguration::builder()
                .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(
                    region.as_str(),
                ))
                .build(),
        );
    }
    match create.send().await {
        Ok(_) => {
            report.push(name, "bucket", StepState::Created, "private");
            Ok(())
        }
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_bucket_already_owned_by_you()) =>
        {
            report.push(name, "bucket", StepState::Unchanged, "exists");
            Ok(())
        }
        Err(e) => Err(service("CreateBucket")(Failure::of(&e))),
    }
}

/// The status page's `Cache-Control`: the status document's habit
/// ([`crate::status::STATUS_CACHE_CONTROL`]: browsers revalidate, a CDN keeps
/// a short copy), with longer times since the page only changes with a
/// release.
pub const STATUS_PAGE_CACHE_CONTROL: &str = "public, max-age=60, s-maxage=60, must-revalidate";

/// The status page's key: `status.html` in the status document's folder
/// (`status.json` → `status.html`, `sales/launch/status.json` →
/// `sales/launch/status.html`), so the page's relative `status.json` is
/// the document.
pub fn status_page_key(status_key: &str) -> String {
    match status_key.rsplit_once('/') {
        Some((folder, _)) => format!("{folder}/status.html"),
        None => "status.html".to_owned(),
    }
}

/// Uploads the status page (`html`, `content_type`) beside the status
/// document ([`status_page_key`]) with [`STATUS_PAGE_CACHE_CONTROL`], unless
/// the object there already has these bytes and headers; reports it as the
/// `status page` step of the bucket.
pub async fn status_page(
    clients: &Clients,
    resources: &Resources,
    html: &[u8],
    content_type: &str,
    report: &mut ProvisionReport,
) -> Result<(), ProvisionError> {
    let s3 = &clients.s3;
    let key = status_page_key(&resources.status_key);
    let bucket = &resources.bucket;
    let existing = match s3.get_object().bucket(bucket).key(&key).send().await {
        Ok(out) => {
            let same_headers = out.content_type() == Some(content_type)
                && out.cache_control() == Some(STATUS_PAGE_CACHE_CONTROL);
            let body = out
                .body
                .collect()
                .await
                .map_err(|e| ProvisionError::Service {
                    what: "GetObject".into(),
                    why: e.to_string(),
                })?
                .into_bytes();
            Some(same_headers && body.as_ref() == html)
        }
        Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => None,
        Err(e) => return Err(service("GetObject")(Failure::of(&e))),
    };
    let detail = format!("{key}, {} bytes, {content_type}", html.len());
    if existing == Some(true) {
        report.push(bucket, "status page", StepState::Unchanged, detail);
        return Ok(());
    }
    s3.put_object()
        .bucket(bucket)
        .key(&key)
        .content_type(content_type)
        .cache_control(STATUS_PAGE_CACHE_CONTROL)
        .body(aws_sdk_s3::primitives::ByteStream::from(html.to_vec()))
        .send()
        .await
        .map_err(|e| service("PutObject")(Failure::of(&e)))?;
    tracing::info!(%bucket, %key, bytes = html.len(), "status page uploaded");
    let state = if existing.is_some() {
        StepState::Updated
    } else {
        StepState::Created
    };
    report.push(bucket, "status page", state, detail);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_page_sits_beside_the_status_document() {
        assert_eq!(status_page_key("status.json"), "status.html");
        assert_eq!(
            status_page_key("sales/launch/status.json"),
            "sales/launch/status.html"
        );
        assert_eq!(status_page_key("a/b/doc"), "a/b/status.html");
    }

    fn options() -> ProvisionOptions {
        ProvisionOptions::from_settings(&Settings::default(), false)
    }

    #[test]
    fn the_admission_queue_has_the_designs_attributes() {
        let a = admission_queue_attributes(&options(), "arn:aws:sqs:r:1:q-dlq.fifo");
        assert_eq!(a["FifoQueue"], "true");
        assert_eq!(a["DeduplicationScope"], "messageGroup");
        assert_eq!(a["FifoThroughputLimit"], "perMessageGroupId");
        assert_eq!(a["VisibilityTimeout"], "60");
        assert_eq!(a["ReceiveMessageWaitTimeSeconds"], "20");
        assert_eq!(a["ContentBasedDeduplication"], "false");
        let redrive: serde_json::Value =
            serde_json::from_str(&a["RedrivePolicy"]).unwrap_or_default();
        assert_eq!(redrive["maxReceiveCount"], 5);
        assert_eq!(redrive["deadLetterTargetArn"], "arn:aws:sqs:r:1:q-dlq.fifo");
        let short = Settings {
            visibility_timeout: Duration::from_millis(600),
            ..Settings::default()
        };
        let short = ProvisionOptions::from_settings(&short, false);
        assert_eq!(
            admission_queue_attributes(&short, "x")["VisibilityTimeout"],
            "1",
            "0.6 s rounds up to SQS's whole second"
        );
    }

    #[test]
    fn drift_is_what_differs_and_the_redrive_compares_as_json() {
        let want = admission_queue_attributes(&options(), "arn:q");
        let mut have: HashMap<String, String> =
            want.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        have.insert(
            "RedrivePolicy".into(),
            r#"{"maxReceiveCount":"5","deadLetterTargetArn":"arn:q"}"#.into(),
        );
        have.insert("QueueArn".into(), "arn:main".into());
        assert!(attribute_drift(&want, &have).is_empty());
        have.insert("VisibilityTimeout".into(), "30".into());
        have.insert(
            "RedrivePolicy".into(),
            r#"{"maxReceiveCount":10,"deadLetterTargetArn":"arn:q"}"#.into(),
        );
        have.remove("DeduplicationScope");
        let drift = attribute_drift(&want, &have);
        assert_eq!(
            drift.keys().map(String::as_str).collect::<Vec<_>>(),
            vec!["DeduplicationScope", "RedrivePolicy", "VisibilityTimeout"]
        );
    }

    #[test]
    fn unknown_operations_are_unsupported() {
        let f = |code: Option<&str>, message: &str| Failure {
            code: code.map(str::to_owned),
            message: message.into(),
            unanswered: false,
        };
        assert!(is_unsupported(&f(Some("UnknownOperationException"), "")));
        assert!(!is_unsupported(&f(Some("ValidationException"), "")));
        assert!(!is_unsupported(&f(Some("ResourceNotFoundException"), "")));
    }
}
