//! Whether the Redis server keeps what it acknowledges: [`read`] asks it
//! (`CONFIG GET appendonly`, `appendfsync`, `save`), [`check`] decides
//! (pure). `booking provision --stack redis` runs both and refuses a server
//! that would lose acknowledged bookings in a production sale.
//!
//! | found | production sale | otherwise |
//! | --- | --- | --- |
//! | `appendonly no` (RDB snapshots or nothing) | refused | a warning |
//! | `appendonly yes`, `appendfsync always` | accepted | accepted |
//! | `appendonly yes`, `appendfsync everysec` | accepted, with a warning | the same warning |
//! | `appendonly yes`, `appendfsync no` | refused | a warning |
//!
//! On a Redis Cluster (`redis+cluster://…`, [`crate::cluster`]) every
//! primary is asked, and the weakest answer is judged ([`weakest`]): a sale
//! whose keys land on a node without an append-only file loses them there.
//!
//! A managed server that disables `CONFIG` cannot be read
//! ([`ReadError::ConfigUnavailable`]): its operator checks persistence in the
//! provider's console and says so in the server config,
//! `stack.redis_persistence = "out_of_band"`.
//!
//! # What `appendfsync everysec` can lose on a Redis crash
//!
//! With `appendonly yes` and `appendfsync everysec` (Redis's default fsync
//! policy for the append-only file), Redis writes every command to the file,
//! into the kernel's page cache, before it answers, and asks the disk to keep
//! it (`fsync`) once a second, in a background thread. A crash of the
//! `redis-server` process alone, with its host still up, therefore loses
//! nothing acknowledged (the `redis.conf` shipped with Redis: at most "a
//! single write if something wrong with the Redis process itself happens, but
//! the operating system is still running correctly"), except while a slow
//! disk stalls the fsync: Redis then postpones its writes for up to two
//! seconds (`flushAppendOnlyFile` in `aof.c`), and those go with the process.
//! A crash of the host (power loss, kernel panic, the VM or its disk gone)
//! loses every write the last fsync did not cover: about the last second of
//! acknowledged writes ("you may lose 1 second of data if there is a
//! disaster", redis.io, Redis persistence), up to about two when the disk
//! stalls. Redis then comes back as the sale stood a second earlier, all of
//! it at once (on one server, ledger, records, queue, change stream and
//! output log replay from one file, in order, so they still agree with each
//! other: `ledger_matches_records` stays green), while everything outside
//! Redis kept that second: the gateway completed the payments executed in it,
//! their payers were told "paid", their emails went out, and the back-office
//! sync may have written their rows. The audit shows it: a booking that went
//! PAID in the lost second is HELD again (or has no record) while its payment
//! completed at the gateway, so `gateway_completed_have_paid_booking` fails
//! and names each such payment ("`<payment>` of `<candidate>` completed, not
//! PAID"), and `paid_in_back_office` names each row the sync had already
//! written ("`<payment>`: in the back office, no PAID record"). Where the
//! hold survived with its payment attached, the reconciler takes it up when
//! its deadline comes (within the 10-minute hold), asks the gateway, finds
//! the payment completed and marks it PAID again (confirm path `reconciler`;
//! its payer gets a second email, which the sent-mail log, having lost the
//! first, does not show), and the checks turn green; a payment whose hold was
//! lost too stays red until a human books or refunds it. `appendfsync always`
//! fsyncs every write before Redis answers and loses none of this, at the
//! cost of one fsync per write.

use std::collections::HashMap;

use redis::cluster::ClusterClient;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{AsyncConnectionConfig, Client, RedisError, Value};
use serde::Serialize;

use crate::cluster::Target;
use crate::ledger::{CONNECT_MAX, RESPONSE_MAX};
use crate::pool::failed_socket;

/// What the server says about its persistence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Persistence {
    /// `appendonly`: whether every write goes to an append-only file.
    pub appendonly: bool,
    /// `appendfsync`: `always`, `everysec` or `no` (as the server spells it).
    pub appendfsync: String,
    /// `save`: the RDB snapshot points, e.g. `3600 1 300 100 60 10000`
    /// (empty: no snapshots).
    pub save: String,
}

/// A setting a production sale cannot run on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
pub enum Refusal {
    /// No append-only file: only RDB snapshots, or nothing.
    #[error(
        "redis keeps no append-only file (appendonly no, save {save:?}): a crash or restart \
         loses every booking acknowledged since the last snapshot{snapshots}. Set \
         `appendonly yes` with `appendfsync always` (or `everysec`, which can lose about a \
         second of acknowledged bookings on a crash of the Redis host) in redis.conf, or \
         `CONFIG SET appendonly yes` then `CONFIG REWRITE`",
        snapshots = lost_without_aof(.save)
    )]
    NoAppendOnly {
        /// The snapshot points found.
        save: String,
    },
    /// An append-only file the kernel flushes when it likes.
    #[error(
        "appendfsync no: redis leaves flushing the append-only file to the kernel (on Linux \
         about every 30 s), so a crash of the Redis host loses that much of acknowledged \
         bookings. Set `appendfsync always` (or `everysec`)"
    )]
    FsyncNo,
    /// An fsync policy this check does not know.
    #[error(
        "appendfsync {0:?} is none of always, everysec, no: what redis keeps cannot be \
         told. Set `appendfsync always` (or `everysec`)"
    )]
    UnknownFsync(String),
}

/// What a server without an append-only file loses, by its snapshot points.
fn lost_without_aof(save: &str) -> &'static str {
    if save.trim().is_empty() {
        " (no snapshots either: all of it)"
    } else {
        " (minutes of a sale)"
    }
}

/// A setting that is accepted, and what it costs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Warning {
    /// `appendfsync everysec`.
    EverySec,
    /// A setting a production sale would be refused, accepted because this
    /// sale is not one.
    NotForProduction(Refusal),
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::EverySec => f.write_str(
                "appendfsync everysec: a crash of the Redis host (power loss, kernel panic, the \
                 VM gone) loses about the last second of acknowledged writes, up to two when \
                 the disk stalls (a crash of the redis-server process alone loses none); a \
                 booking paid in that second is missing from Redis while the gateway completed \
                 its payment, and the audit's gateway_completed_have_paid_booking names it. \
                 `appendfsync always` loses nothing acknowledged",
            ),
            Warning::NotForProduction(refusal) => {
                write!(f, "accepted for a sale that is not production: {refusal}")
            }
        }
    }
}

/// Why [`read`] could not tell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The URL is not a Redis URL.
    #[error("invalid redis url: {0}")]
    Url(String),
    /// No connection, or no answer in time.
    #[error("cannot reach redis to read its persistence: {0}")]
    Unavailable(String),
    /// The server refuses `CONFIG GET` (managed servers disable it) or
    /// answers it with nothing.
    #[error(
        "redis does not answer CONFIG GET {setting} ({reason}); managed servers often disable \
         CONFIG. Check in the provider's console that the server keeps an append-only file \
         fsynced always or every second, then set `stack.redis_persistence = \"out_of_band\"` \
         in the server config to say so"
    )]
    ConfigUnavailable {
        /// The setting asked for.
        setting: String,
        /// The server's answer.
        reason: String,
    },
}

/// Reads `appendonly`, `appendfsync` and `save` over one connection to
/// `url`, with the ledger's connect and response timeouts; on a cluster,
/// from every primary, answering the [`weakest`].
pub async fn read(url: &str) -> Result<Persistence, ReadError> {
    match Target::parse(url).map_err(|e| ReadError::Url(e.to_string()))? {
        Target::Server(url) => read_server(&url).await,
        Target::Cluster(seeds) => read_cluster(&seeds).await,
    }
}

async fn read_server(url: &str) -> Result<Persistence, ReadError> {
    let client = Client::open(url).map_err(|e| ReadError::Url(e.to_string()))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_MAX))
        .set_response_timeout(Some(RESPONSE_MAX));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| ReadError::Unavailable(e.to_string()))?;
    let mut get = async |setting: &str| -> Result<String, ReadError> {
        let answer: Result<std::collections::HashMap<String, String>, RedisError> =
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(setting)
                .query_async(&mut conn)
                .await;
        let config_unavailable = |reason: String| ReadError::ConfigUnavailable {
            setting: setting.to_owned(),
            reason,
        };
        match answer {
            Ok(mut values) => values
                .remove(setting)
                .ok_or_else(|| config_unavailable("no such setting in the answer".to_owned())),
            Err(e) if failed_socket(&e) => Err(ReadError::Unavailable(e.to_string())),
            Err(e) => Err(config_unavailable(e.to_string())),
        }
    };
    let appendonly = get("appendonly").await?;
    let appendfsync = get("appendfsync").await?;
    let save = get("save").await?;
    Ok(Persistence {
        appendonly: appendonly.eq_ignore_ascii_case("yes"),
        appendfsync: appendfsync.to_ascii_lowercase(),
        save,
    })
}

/// Every primary of the cluster seeded by `seeds`, asked in one
/// `CONFIG GET` per setting; the weakest node's answer.
async fn read_cluster(seeds: &[String]) -> Result<Persistence, ReadError> {
    let client = ClusterClient::builder(seeds.iter().map(String::as_str))
        .connection_timeout(CONNECT_MAX)
        .response_timeout(RESPONSE_MAX)
        .build()
        .map_err(|e| ReadError::Url(e.to_string()))?;
    let mut conn = client
        .get_async_connection()
        .await
        .map_err(|e| ReadError::Unavailable(e.to_string()))?;
    // node address -> setting -> value
    let mut nodes: std::collections::BTreeMap<String, HashMap<String, String>> =
        std::collections::BTreeMap::new();
    for setting in ["appendonly", "appendfsync", "save"] {
        let config_unavailable = |reason: String| ReadError::ConfigUnavailable {
            setting: setting.to_owned(),
            reason,
        };
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("GET").arg(setting);
        let answer = conn
            .route_command(
                cmd,
                RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
            )
            .await;
        let per_node = match answer {
            Ok(Value::Map(per_node)) => per_node,
            Ok(other) => return Err(config_unavailable(format!("unexpected answer {other:?}"))),
            Err(e) if failed_socket(&e) => return Err(ReadError::Unavailable(e.to_string())),
            Err(e) => return Err(config_unavailable(e.to_string())),
        };
        for (node, value) in per_node {
            let node: String = redis::from_redis_value(node)
                .map_err(|e| config_unavailable(format!("node address: {e}")))?;
            let mut values: HashMap<String, String> = match value {
                Value::ServerError(e) => return Err(config_unavailable(format!("{node}: {e:?}"))),
                value => redis::from_redis_value(value)
                    .map_err(|e| config_unavailable(format!("{node}: {e}")))?,
            };
            let value = values.remove(setting).ok_or_else(|| {
                config_unavailable(format!("{node}: no such setting in the answer"))
            })?;
            nodes
                .entry(node)
                .or_default()
                .insert(setting.to_owned(), value);
        }
    }
    let found: Vec<Persistence> = nodes
        .into_values()
        .map(|mut values| {
            let mut take = |k: &str| values.remove(k).unwrap_or_default();
            Persistence {
                appendonly: take("appendonly").eq_ignore_ascii_case("yes"),
                appendfsync: take("appendfsync").to_ascii_lowercase(),
                save: take("save"),
            }
        })
        .collect();
    weakest(&found)
        .cloned()
        .ok_or_else(|| ReadError::Unavailable("the cluster named no primary".to_owned()))
}

/// The node whose persistence loses the most (no append-only file, then an
/// fsync left to the kernel or unknown, then `everysec`, then `always`);
/// the first of equals. `None` for no node.
pub fn weakest(found: &[Persistence]) -> Option<&Persistence> {
    let strength = |p: &Persistence| match check(p, true) {
        Ok(warnings) if warnings.is_empty() => 3,
        Ok(_) => 2,
        Err(Refusal::FsyncNo | Refusal::UnknownFsync(_)) => 1,
        Err(Refusal::NoAppendOnly { .. }) => 0,
    };
    found.iter().min_by_key(|p| strength(p))
}

/// Whether `found` keeps what Redis acknowledges well enough for the sale:
/// the warnings of an accepted server, or why a production sale refuses it
/// (see the module's table).
pub fn check(found: &Persistence, production: bool) -> Result<Vec<Warning>, Refusal> {
    let refusal = if !found.appendonly {
        Refusal::NoAppendOnly {
            save: found.save.clone(),
        }
    } else {
        match found.appendfsync.as_str() {
            "always" => return Ok(Vec::new()),
            "everysec" => return Ok(vec![Warning::EverySec]),
            "no" => Refusal::FsyncNo,
            other => Refusal::UnknownFsync(other.to_owned()),
        }
    };
    if production {
        Err(refusal)
    } else {
        Ok(vec![Warning::NotForProduction(refusal)])
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn found(appendonly: bool, appendfsync: &str, save: &str) -> Persistence {
        Persistence {
            appendonly,
            appendfsync: appendfsync.to_owned(),
            save: save.to_owned(),
        }
    }

    #[test]
    fn always_is_accepted_without_a_word() {
        for production in [true, false] {
            assert_eq!(check(&found(true, "always", ""), production), Ok(vec![]));
        }
    }

    #[test]
    fn everysec_is_accepted_with_what_it_can_lose() {
        for production in [true, false] {
            assert_eq!(
                check(&found(true, "everysec", "3600 1"), production),
                Ok(vec![Warning::EverySec])
            );
        }
        let message = Warning::EverySec.to_string();
        for says in [
            "last second of acknowledged writes",
            "Redis host",
            "process alone loses none",
            "gateway_completed_have_paid_booking",
            "appendfsync always",
        ] {
            assert!(message.contains(says), "{says:?} in {message}");
        }
    }

    #[test]
    fn snapshots_alone_refuse_a_production_sale_and_say_what_to_set() {
        let refusal = check(&found(false, "everysec", "3600 1 300 100"), true).unwrap_err();
        assert_eq!(
            refusal,
            Refusal::NoAppendOnly {
                save: "3600 1 300 100".to_owned()
            }
        );
        let message = refusal.to_string();
        assert!(message.contains("minutes of a sale"), "{message}");
        assert!(message.contains("`appendonly yes`"), "{message}");
        assert!(message.contains("`appendfsync always`"), "{message}");
    }

    #[test]
    fn no_persistence_at_all_says_everything_is_lost() {
        let refusal = check(&found(false, "everysec", ""), true).unwrap_err();
        assert!(refusal.to_string().contains("all of it"), "{refusal}");
    }

    #[test]
    fn fsync_no_refuses_a_production_sale() {
        let refusal = check(&found(true, "no", ""), true).unwrap_err();
        assert_eq!(refusal, Refusal::FsyncNo);
        assert!(refusal.to_string().contains("`appendfsync always`"));
    }

    #[test]
    fn an_unknown_fsync_policy_refuses_a_production_sale() {
        assert_eq!(
            check(&found(true, "sometimes", ""), true),
            Err(Refusal::UnknownFsync("sometimes".to_owned()))
        );
    }

    #[test]
    fn a_sale_that_is_not_production_gets_warnings_only() {
        for (f, refusal) in [
            (
                found(false, "always", "60 1"),
                Refusal::NoAppendOnly {
                    save: "60 1".to_owned(),
                },
            ),
            (found(true, "no", ""), Refusal::FsyncNo),
            (
                found(true, "odd", ""),
                Refusal::UnknownFsync("odd".to_owned()),
            ),
        ] {
            let warnings = check(&f, false).unwrap();
            assert_eq!(warnings, [Warning::NotForProduction(refusal.clone())]);
            assert!(warnings[0].to_string().ends_with(&refusal.to_string()));
        }
    }

    #[test]
    fn a_cluster_is_judged_by_its_weakest_node() {
        let always = found(true, "always", "");
        let everysec = found(true, "everysec", "");
        let no = found(true, "no", "");
        let none = found(false, "always", "");
        assert_eq!(weakest(&[]), None);
        assert_eq!(weakest(std::slice::from_ref(&always)), Some(&always));
        assert_eq!(
            weakest(&[always.clone(), everysec.clone()]),
            Some(&everysec)
        );
        assert_eq!(
            weakest(&[everysec.clone(), no.clone(), always.clone()]),
            Some(&no)
        );
        assert_eq!(
            weakest(&[no.clone(), none.clone(), everysec.clone()]),
            Some(&none)
        );
        // the first of equals
        let other_save = found(false, "always", "60 1");
        assert_eq!(weakest(&[none.clone(), other_save]), Some(&none));
    }

    #[test]
    fn the_config_unavailable_message_names_the_out_of_band_setting() {
        let e = ReadError::ConfigUnavailable {
            setting: "appendonly".to_owned(),
            reason: "ERR unknown command 'CONFIG'".to_owned(),
        };
        let message = e.to_string();
        assert!(
            message.contains("stack.redis_persistence = \"out_of_band\""),
            "{message}"
        );
        assert!(message.contains("unknown command"), "{message}");
    }
}
