//! The one error type of the crate, with the HTTP status and message
//! toxiproxy gives for each case (its `api.go`).

/// What went wrong; [`NetfaultError::status`] is the HTTP status the API
/// answers with, and the `Display` text is toxiproxy's `error` message.
#[derive(Debug, thiserror::Error)]
pub enum NetfaultError {
    /// No proxy of that name (404).
    #[error("proxy not found")]
    ProxyNotFound,
    /// A proxy of that name exists already (409).
    #[error("proxy already exists")]
    ProxyExists,
    /// No toxic of that name on the proxy (404).
    #[error("toxic not found")]
    ToxicNotFound,
    /// A toxic of that name exists already on the proxy (409).
    #[error("toxic already exists")]
    ToxicExists,
    /// `stream` is neither `upstream` nor `downstream` (400).
    #[error("stream was invalid, can be either upstream or downstream")]
    InvalidStream,
    /// `type` names no toxic this proxy knows (400).
    #[error("invalid toxic type")]
    InvalidToxicType,
    /// A required field is missing or empty (400); the field's name.
    #[error("missing required field: {0}")]
    MissingField(String),
    /// The body or a value in it could not be used (400); what was wrong.
    #[error("bad request body: {0}")]
    BadRequest(String),
    /// A listen address that is not loopback while remote listening is off
    /// (400).
    #[error(
        "listen address {0} is not loopback: netfault listens elsewhere only when allowed (--allow-remote)"
    )]
    RemoteListen(String),
    /// Binding a proxy's listen address failed (500, as toxiproxy answers a
    /// failed `net.Listen`).
    #[error("listen tcp {listen}: {source}")]
    Bind {
        /// The address it tried.
        listen: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Any other I/O failure (500).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl NetfaultError {
    /// The HTTP status toxiproxy answers this error with.
    pub fn status(&self) -> u16 {
        match self {
            NetfaultError::ProxyNotFound | NetfaultError::ToxicNotFound => 404,
            NetfaultError::ProxyExists | NetfaultError::ToxicExists => 409,
            NetfaultError::InvalidStream
            | NetfaultError::InvalidToxicType
            | NetfaultError::MissingField(_)
            | NetfaultError::BadRequest(_)
            | NetfaultError::RemoteListen(_) => 400,
            NetfaultError::Bind { .. } | NetfaultError::Io(_) => 500,
        }
    }
}
