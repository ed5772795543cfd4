//! Toxics as data: what a toxic is, its JSON in toxiproxy's shape
//! (`{"attributes":{..},"name","type","stream","toxicity"}`), parsing and
//! merging attributes. What a toxic does to bytes lives in `stage`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::NetfaultError;

/// Which way a toxic acts, toxiproxy's `stream`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Client → upstream (what the client sends).
    Upstream,
    /// Upstream → client (what the server answers): toxiproxy's default.
    #[default]
    Downstream,
}

impl Stream {
    /// Its name in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Upstream => "upstream",
            Stream::Downstream => "downstream",
        }
    }

    /// Parses toxiproxy's `stream` (case-insensitive, as toxiproxy does).
    pub fn parse(value: &str) -> Result<Stream, NetfaultError> {
        match value.to_ascii_lowercase().as_str() {
            "upstream" => Ok(Stream::Upstream),
            "downstream" => Ok(Stream::Downstream),
            _ => Err(NetfaultError::InvalidStream),
        }
    }
}

/// What a toxic does, with its attributes (toxiproxy's names and units).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToxicKind {
    /// Every chunk waits `latency` ± `jitter` ms (uniform in
    /// `[latency - jitter, latency + jitter)`, at least 0).
    Latency {
        /// ms.
        latency: u64,
        /// ms.
        jitter: u64,
    },
    /// At most `rate` KB (1000 bytes) a second; 0 = no limit.
    Bandwidth {
        /// KB/s.
        rate: u64,
    },
    /// The close (EOF) is passed on `delay` ms late.
    SlowClose {
        /// ms.
        delay: u64,
    },
    /// Nothing is forwarded (data is dropped); the connection is closed
    /// `timeout` ms after the toxic starts acting on it, never when 0 (a
    /// blackhole). Removing it closes the connections it blackholed, as
    /// toxiproxy does: their streams have lost data.
    Timeout {
        /// ms; 0 = blackhole: never forward, never close.
        timeout: u64,
    },
    /// The first data (or close) that reaches it is dropped and, `timeout`
    /// ms later, both sides get a TCP RST (SO_LINGER 0).
    ResetPeer {
        /// ms before the RST.
        timeout: u64,
    },
    /// Every chunk is cut into pieces of `average_size` ± `size_variation`
    /// bytes (at least 1), `delay` µs apart.
    Slicer {
        /// Bytes.
        average_size: u64,
        /// Bytes.
        size_variation: u64,
        /// µs between pieces.
        delay: u64,
    },
    /// The connection is closed once `bytes` bytes went through this way.
    LimitData {
        /// Bytes.
        bytes: u64,
    },
}

/// Every toxic type's name, as toxiproxy spells it.
pub const TOXIC_TYPES: [&str; 7] = [
    "latency",
    "bandwidth",
    "slow_close",
    "timeout",
    "reset_peer",
    "slicer",
    "limit_data",
];

// One serde shape per type: missing attributes default to 0 (as toxiproxy's
// zero values), unknown ones are refused (a typo would silently do nothing).
#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct LatencyAttrs {
    latency: u64,
    jitter: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct RateAttrs {
    rate: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct DelayAttrs {
    delay: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct TimeoutAttrs {
    timeout: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct SlicerAttrs {
    average_size: u64,
    size_variation: u64,
    delay: u64,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct BytesAttrs {
    bytes: u64,
}

fn attrs_of<T: serde::de::DeserializeOwned>(attributes: &Value) -> Result<T, NetfaultError> {
    let value = match attributes {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    };
    serde_json::from_value(value).map_err(|e| NetfaultError::BadRequest(e.to_string()))
}

fn to_value<T: Serialize>(attrs: T) -> Value {
    // Plain structs of integers always serialize.
    serde_json::to_value(attrs).unwrap_or(Value::Null)
}

impl ToxicKind {
    /// Its `type` in JSON.
    pub fn type_name(&self) -> &'static str {
        match self {
            ToxicKind::Latency { .. } => "latency",
            ToxicKind::Bandwidth { .. } => "bandwidth",
            ToxicKind::SlowClose { .. } => "slow_close",
            ToxicKind::Timeout { .. } => "timeout",
            ToxicKind::ResetPeer { .. } => "reset_peer",
            ToxicKind::Slicer { .. } => "slicer",
            ToxicKind::LimitData { .. } => "limit_data",
        }
    }

    /// Parses `attributes` (an object, or null for all zeros) for the toxic
    /// type `type_name`.
    pub fn from_attributes(
        type_name: &str,
        attributes: &Value,
    ) -> Result<ToxicKind, NetfaultError> {
        Ok(match type_name {
            "latency" => {
                let a: LatencyAttrs = attrs_of(attributes)?;
                ToxicKind::Latency {
                    latency: a.latency,
                    jitter: a.jitter,
                }
            }
            "bandwidth" => ToxicKind::Bandwidth {
                rate: attrs_of::<RateAttrs>(attributes)?.rate,
            },
            "slow_close" => ToxicKind::SlowClose {
                delay: attrs_of::<DelayAttrs>(attributes)?.delay,
            },
            "timeout" => ToxicKind::Timeout {
                timeout: attrs_of::<TimeoutAttrs>(attributes)?.timeout,
            },
            "reset_peer" => ToxicKind::ResetPeer {
                timeout: attrs_of::<TimeoutAttrs>(attributes)?.timeout,
            },
            "slicer" => {
                let a: SlicerAttrs = attrs_of(attributes)?;
                ToxicKind::Slicer {
                    average_size: a.average_size,
                    size_variation: a.size_variation,
                    delay: a.delay,
                }
            }
            "limit_data" => ToxicKind::LimitData {
                bytes: attrs_of::<BytesAttrs>(attributes)?.bytes,
            },
            _ => return Err(NetfaultError::InvalidToxicType),
        })
    }

    /// Its `attributes` object.
    pub fn attributes(&self) -> Value {
        match *self {
            ToxicKind::Latency { latency, jitter } => to_value(LatencyAttrs { latency, jitter }),
            ToxicKind::Bandwidth { rate } => to_value(RateAttrs { rate }),
            ToxicKind::SlowClose { delay } => to_value(DelayAttrs { delay }),
            ToxicKind::Timeout { timeout } | ToxicKind::ResetPeer { timeout } => {
                to_value(TimeoutAttrs { timeout })
            }
            ToxicKind::Slicer {
                average_size,
                size_variation,
                delay,
            } => to_value(SlicerAttrs {
                average_size,
                size_variation,
                delay,
            }),
            ToxicKind::LimitData { bytes } => to_value(BytesAttrs { bytes }),
        }
    }

    /// The same type with the keys of `changes` (an object, or null for no
    /// change) replacing its attributes; the others stay, as toxiproxy's
    /// update decodes onto the existing toxic.
    pub fn merged(&self, changes: &Value) -> Result<ToxicKind, NetfaultError> {
        let mut attributes = self.attributes();
        match (changes, &mut attributes) {
            (Value::Null, _) => {}
            (Value::Object(changes), Value::Object(current)) => {
                for (key, value) in changes {
                    current.insert(key.clone(), value.clone());
                }
            }
            _ => {
                return Err(NetfaultError::BadRequest(
                    "attributes must be an object".to_owned(),
                ));
            }
        }
        ToxicKind::from_attributes(self.type_name(), &attributes)
    }
}

/// A toxic on a proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ToxicJson", into = "ToxicJson")]
pub struct Toxic {
    /// Unique on its proxy; toxiproxy's default is `{type}_{stream}`.
    pub name: String,
    /// Which way it acts (default downstream).
    pub stream: Stream,
    /// The chance, 0..=1, that it acts on a connection (default 1), drawn
    /// once per connection when the toxic meets it.
    pub toxicity: f32,
    /// What it does.
    pub kind: ToxicKind,
}

impl Toxic {
    /// A toxic acting on every connection, named as toxiproxy names it when
    /// the name is left out (`{type}_{stream}`).
    pub fn new(stream: Stream, kind: ToxicKind) -> Toxic {
        Toxic {
            name: default_name(&kind, stream),
            stream,
            toxicity: 1.0,
            kind,
        }
    }

    /// The same toxic with another name.
    pub fn named(mut self, name: impl Into<String>) -> Toxic {
        self.name = name.into();
        self
    }

    /// The same toxic with another toxicity.
    pub fn with_toxicity(mut self, toxicity: f32) -> Toxic {
        self.toxicity = toxicity;
        self
    }

    /// Checks what serde cannot: a name, a toxicity within 0..=1.
    pub(crate) fn validated(mut self) -> Result<Toxic, NetfaultError> {
        if self.name.is_empty() {
            self.name = default_name(&self.kind, self.stream);
        }
        check_toxicity(self.toxicity)?;
        Ok(self)
    }
}

fn default_name(kind: &ToxicKind, stream: Stream) -> String {
    format!("{}_{}", kind.type_name(), stream.name())
}

pub(crate) fn check_toxicity(toxicity: f32) -> Result<(), NetfaultError> {
    if (0.0..=1.0).contains(&toxicity) {
        Ok(())
    } else {
        Err(NetfaultError::BadRequest(format!(
            "toxicity {toxicity} is not within 0..=1"
        )))
    }
}

fn downstream() -> String {
    "downstream".to_owned()
}

fn one() -> f32 {
    1.0
}

/// A toxic's JSON as toxiproxy reads and writes it (field order as its
/// output: attributes, name, type, stream, toxicity).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ToxicJson {
    #[serde(default)]
    pub attributes: Value,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "type", default)]
    pub type_name: String,
    #[serde(default = "downstream")]
    pub stream: String,
    #[serde(default = "one")]
    pub toxicity: f32,
}

impl TryFrom<ToxicJson> for Toxic {
    type Error = NetfaultError;

    /// In toxiproxy's order: the stream, the type, then the attributes.
    fn try_from(json: ToxicJson) -> Result<Toxic, NetfaultError> {
        let stream = Stream::parse(&json.stream)?;
        if !TOXIC_TYPES.contains(&json.type_name.as_str()) {
            return Err(NetfaultError::InvalidToxicType);
        }
        let kind = ToxicKind::from_attributes(&json.type_name, &json.attributes)?;
        Toxic {
            name: json.name,
            stream,
            toxicity: json.toxicity,
            kind,
        }
        .validated()
    }
}

impl From<Toxic> for ToxicJson {
    fn from(toxic: Toxic) -> ToxicJson {
        ToxicJson {
            attributes: toxic.kind.attributes(),
            name: toxic.name,
            type_name: toxic.kind.type_name().to_owned(),
            stream: toxic.stream.name().to_owned(),
            toxicity: toxic.toxicity,
        }
    }
}

/// Applies an update to `toxic`: `changes` is either a toxiproxy update
/// body (`{"attributes": {..}, "toxicity": x}`, either key optional) or the
/// attributes object alone (`{"latency": 500}`). Attributes not named keep
/// their values; the name, type and stream never change.
pub(crate) fn updated(toxic: &Toxic, changes: &Value) -> Result<Toxic, NetfaultError> {
    let Value::Object(map) = changes else {
        return Err(NetfaultError::BadRequest(
            "an update must be a JSON object".to_owned(),
        ));
    };
    let body_form = map.contains_key("attributes") || map.contains_key("toxicity");
    let mut next = toxic.clone();
    if body_form {
        if let Some(attributes) = map.get("attributes") {
            next.kind = toxic.kind.merged(attributes)?;
        }
        if let Some(toxicity) = map.get("toxicity") {
            let toxicity = toxicity
                .as_f64()
                .ok_or_else(|| NetfaultError::BadRequest("toxicity must be a number".to_owned()))?;
            // toxiproxy's toxicity is a float32
            #[allow(clippy::cast_possible_truncation)]
            let toxicity = toxicity as f32;
            check_toxicity(toxicity)?;
            next.toxicity = toxicity;
        }
    } else {
        next.kind = toxic.kind.merged(changes)?;
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn json_round_trips_in_toxiproxys_shape() {
        let toxic = Toxic::new(
            Stream::Upstream,
            ToxicKind::Slicer {
                average_size: 10,
                size_variation: 2,
                delay: 5,
            },
        );
        let value = serde_json::to_value(&toxic).unwrap();
        assert_eq!(
            value,
            json!({"attributes": {"average_size": 10, "size_variation": 2, "delay": 5},
                   "name": "slicer_upstream", "type": "slicer", "stream": "upstream",
                   "toxicity": 1.0})
        );
        let back: Toxic = serde_json::from_value(value).unwrap();
        assert_eq!(back, toxic);
    }

    #[test]
    fn defaults_are_toxiproxys() {
        let toxic: Toxic = serde_json::from_value(json!({"type": "latency"})).unwrap();
        assert_eq!(toxic.name, "latency_downstream");
        assert_eq!(toxic.stream, Stream::Downstream);
        assert!((toxic.toxicity - 1.0).abs() < f32::EPSILON);
        assert_eq!(
            toxic.kind,
            ToxicKind::Latency {
                latency: 0,
                jitter: 0
            }
        );
    }

    #[test]
    fn bad_input_is_refused_with_toxiproxys_errors() {
        let parse = |v: Value| Toxic::try_from(serde_json::from_value::<ToxicJson>(v).unwrap());
        assert!(matches!(
            parse(json!({"type": "latency", "stream": "sideways"})),
            Err(NetfaultError::InvalidStream)
        ));
        assert!(matches!(
            parse(json!({"type": "lag"})),
            Err(NetfaultError::InvalidToxicType)
        ));
        assert!(matches!(
            parse(json!({"type": "latency", "attributes": {"latncy": 5}})),
            Err(NetfaultError::BadRequest(_))
        ));
        assert!(matches!(
            parse(json!({"type": "latency", "attributes": {"latency": -5}})),
            Err(NetfaultError::BadRequest(_))
        ));
        assert!(matches!(
            parse(json!({"type": "latency", "toxicity": 1.5})),
            Err(NetfaultError::BadRequest(_))
        ));
    }

    #[test]
    fn updates_merge_attributes_in_either_form() {
        let toxic = Toxic::new(
            Stream::Downstream,
            ToxicKind::Latency {
                latency: 100,
                jitter: 10,
            },
        );
        let bare = updated(&toxic, &json!({"latency": 500})).unwrap();
        assert_eq!(
            bare.kind,
            ToxicKind::Latency {
                latency: 500,
                jitter: 10
            }
        );
        let body = updated(
            &toxic,
            &json!({"attributes": {"jitter": 0}, "toxicity": 0.5}),
        )
        .unwrap();
        assert_eq!(
            body.kind,
            ToxicKind::Latency {
                latency: 100,
                jitter: 0
            }
        );
        assert!((body.toxicity - 0.5).abs() < f32::EPSILON);
        assert!(updated(&toxic, &json!({"rate": 5})).is_err());
        assert!(updated(&toxic, &json!([1])).is_err());
    }
}
