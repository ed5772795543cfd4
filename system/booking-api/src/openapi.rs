//! The OpenAPI 3.0 document of the whole API (`GET /openapi.json`),
//! hand-written so every answer is the documented one: every rule the server
//! enforces on a request (the `candidate` and `level` rules of
//! [`crate::bookings`], the body limits) and every status code each route
//! answers, with its content type and the headers it always carries.
//!
//! It also describes the admin routes (`/ops/…`, tag `admin`), which are
//! served on the admin listener (`admin_listen`), not on the public one, and
//! need a bearer token (`bearerAuth`); the public routes need none.
//!
//! [`PATHS`] and [`ADMIN_PATHS`] list the paths it describes; tests check
//! the document names each of them, that every `$ref` resolves, and that
//! [`CANDIDATE_PATTERN`] and the length bounds say what
//! [`crate::bookings::candidate_hash`] accepts. An API fuzzer
//! (`booking-server`'s `tests/api_fuzz.rs`) checks the running server
//! against the document.

use serde_json::{Map, Value, json};

use crate::bookings::{BODY_BYTES_MAX, RAW_CANDIDATE_LEN_MAX};

/// Every public path the API serves.
pub const PATHS: [&str; 9] = [
    "/bookings",
    "/status.json",
    "/status",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/payment/callback",
    "/payment/webhook",
];

/// Every admin path (served on the admin listener, `admin_listen`).
pub const ADMIN_PATHS: [&str; 11] = [
    "/ops/reset",
    "/ops/load-candidates",
    "/ops/open",
    "/ops/close",
    "/ops/status",
    "/ops/counters",
    "/ops/audit",
    "/ops/emails/pending",
    "/ops/emails/resend",
    "/ops/faults",
    "/ops/faults/start",
];

/// The tag of the admin operations.
pub const ADMIN_TAG: &str = "admin";

/// The rule on `candidate` as an ECMA-262 regular expression (JSON Schema's
/// dialect; `$` is the end of the string): no control character (Unicode
/// general category Cc, what `char::is_control` tests), at least one
/// character. With `maxLength` = [`RAW_CANDIDATE_LEN_MAX`] (characters,
/// i.e. Unicode code points) it is exactly what
/// [`crate::bookings::candidate_hash`] accepts.
pub const CANDIDATE_PATTERN: &str = r"^[^\x00-\x1F\x7F-\x9F]+$";

/// The rule on `level` (`booking::Level::parse`): 1 to [`LEVEL_LEN_MAX`]
/// ASCII letters, digits, `-` or `_`.
pub const LEVEL_PATTERN: &str = "^[A-Za-z0-9_-]+$";

/// The longest level, characters (`booking::Level`).
pub const LEVEL_LEN_MAX: usize = 32;

/// The largest body of the routes that read one with axum's default limit
/// (`/payment/webhook`, `/ops/faults/start`), bytes.
pub const AXUM_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

/// The largest `/ops/load-candidates` body, bytes (`booking-server`'s
/// `ops::LOAD_BODY_BYTES_MAX`).
pub const LOAD_BODY_BYTES_MAX: usize = 2 * 1024 * 1024;

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

/// A JSON `503` from [`crate::answers`]: always with `Retry-After`.
fn busy_response(description: &str) -> Value {
    json!({
        "description": description,
        "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

fn html_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"text/html": {"schema": {"type": "string"}}}
    })
}

fn text_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"text/plain": {"schema": {"type": "string"}}}
    })
}

fn booking_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Booking"}}}
    })
}

fn json_response(description: &str, schema: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema}")}}}
    })
}

fn admin_error(description: &str) -> Value {
    json_response(description, "AdminError")
}

/// The answers every admin operation may give besides its own.
fn admin_responses(ok: Value, more: &[(&str, Value)]) -> Value {
    let mut responses = Map::new();
    responses.insert("200".into(), ok);
    for (code, answer) in more {
        responses.insert((*code).into(), answer.clone());
    }
    responses.insert(
        "401".into(),
        json!({
            "description": "No bearer token, or not one the admin listener accepts.",
            "headers": {"WWW-Authenticate": {
                "description": "`Bearer realm=\"sellout-admin\"`.",
                "schema": {"type": "string"}
            }},
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AdminError"}}}
        }),
    );
    responses.insert(
        "503".into(),
        admin_error("The step failed (a backend could not answer); nothing more was done."),
    );
    Value::Object(responses)
}

fn confirm_sale_parameter() -> Value {
    json!({
        "name": "X-Confirm-Sale",
        "in": "header",
        "required": false,
        "description": "The sale's id. Required in production (`environment = \"production\"`): \
            without it, or with another sale's id, the step is refused with 428 and nothing is \
            done (`booking --confirm SALE`). Ignored elsewhere.",
        "schema": {"type": "string"}
    })
}

fn unconfirmed_response() -> Value {
    admin_error(
        "Production only: `X-Confirm-Sale` is missing or names another sale; nothing was done.",
    )
}

fn admin_operation(id: &str, summary: &str, responses: Value) -> Value {
    json!({
        "operationId": id,
        "tags": [ADMIN_TAG],
        "summary": summary,
        "description": "Served on the admin listener (`admin_listen`, loopback by default), not on \
            the public one. Needs `Authorization: Bearer <token>` when an admin token is configured \
            (always, off loopback).",
        "security": [{"bearerAuth": []}],
        "responses": responses
    })
}

fn with(mut op: Value, key: &str, value: Value) -> Value {
    if let Some(m) = op.as_object_mut() {
        m.insert(key.into(), value);
    }
    op
}

fn bookings_path() -> Value {
    json!({
        "post": {
            "operationId": "createBooking",
            "tags": ["sale"],
            "summary": "Hold a seat: admit, create the payment, keep the booking copy, enqueue.",
            "description": format!("`candidate` is the candidate's SHA-256 hash (64 hex digits, either case) or their raw \
                identifier, which is hashed: 1 to {RAW_CANDIDATE_LEN_MAX} characters (Unicode code points), none \
                of them a control character (U+0000–U+001F, U+007F–U+009F). `level` is 1 to {LEVEL_LEN_MAX} ASCII \
                letters, digits, `-` or `_`; which levels exist is the sale's configuration (404 otherwise). \
                Unknown fields are refused. With `candidate_auth` configured (off by default) the request \
                needs `Authorization: Bearer <JWT>` whose `sub` names the same candidate (`candidateToken`), \
                checked after the body's syntax and before anything is done (401). The body is read as JSON whatever its Content-Type, and is at most \
                {BODY_BYTES_MAX} bytes (413). If the payment or the enqueue fails the admission is undone before \
                the answer (503)."),
            "security": [{}, {"candidateToken": []}],
            "requestBody": {
                "required": true,
                "description": format!("At most {BODY_BYTES_MAX} bytes."),
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BookingRequest"}}}
            },
            "responses": {
                "201": booking_response("Admitted: the seat is HELD until `deadline`; send the payer to `redirect_url`."),
                "200": booking_response("Already holding: the candidate's live hold (HELD with its payment, or PENDING while another request creates it)."),
                "400": error_response("bad_request: malformed JSON, missing or unknown fields, a candidate or level that breaks its rule."),
                "401": {
                    "description": "unauthorized: `candidate_auth` is on and the request carries no valid token \
                        whose subject is this candidate; nothing was done.",
                    "headers": {"WWW-Authenticate": {
                        "description": "`Bearer` without a token, `Bearer error=\"invalid_token\"` with a bad one.",
                        "required": true,
                        "schema": {"type": "string"}
                    }},
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                },
                "403": error_response("not_eligible: the candidate is not on the list."),
                "404": error_response("unknown_level: the sale has no such level."),
                "409": error_response("level_full, sale_closed or already_paid."),
                "413": error_response(&format!("payload_too_large: the body is over {BODY_BYTES_MAX} bytes.")),
                "415": error_response("unsupported_media_type: the body was not sent as `Content-Type: application/json`; nothing was read."),
                "503": {
                    "description": "busy or deadline_exceeded: nothing is held; retry after Retry-After seconds. \
                        draining: the instance is shutting down, nothing was done; retry on another instance \
                        (with `Connection: close`).",
                    "headers": {
                        "Retry-After": {"$ref": "#/components/headers/RetryAfter"},
                        "Connection": {
                            "description": "`close` on a draining refusal.",
                            "schema": {"type": "string"}
                        }
                    },
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                }
            }
        }
    })
}

fn info_paths(paths: &mut Map<String, Value>) {
    paths.insert(
        "/status.json".into(),
        json!({
            "get": {
                "operationId": "getStatus",
                "tags": ["sale"],
                "summary": "The live status document: availability per level.",
                "responses": {
                    "200": {
                        "description": "The latest document written, or one built from the counters if none was written yet.",
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StatusDocument"}}}
                    },
                    "503": busy_response("busy or deadline_exceeded: the document or the counters could not be read in time.")
                }
            }
        }),
    );
    paths.insert(
        "/status".into(),
        json!({
            "get": {
                "operationId": "getStatusPage",
                "tags": ["sale"],
                "summary": "The status page: a static HTML page that reads status.json beside it every 2 s.",
                "description": "Shows the sale (open, closed, not yet open) and each level's seats left. \
                    The counts decide as well as the flags: a level with every seat taken shows full \
                    even if the document says open; a document older than 10 s shows stale with its age. \
                    `booking provision` uploads the same page beside status.json on S3.",
                "responses": {
                    "200": html_response("The page.")
                }
            }
        }),
    );
    paths.insert(
        "/healthz".into(),
        json!({
            "get": {
                "operationId": "getHealth",
                "tags": ["instance"],
                "summary": "The instance is up (touches no backend).",
                "responses": {
                    "200": json_response("Up.", "Health")
                }
            }
        }),
    );
    paths.insert(
        "/readyz".into(),
        json!({
            "get": {
                "operationId": "getReadiness",
                "tags": ["instance"],
                "summary": "Whether the instance takes traffic (touches no backend): 503 once it drains on its way out (SIGTERM), while /healthz stays 200.",
                "responses": {
                    "200": json_response("Ready.", "Readiness"),
                    "503": {
                        "description": "Draining: send traffic elsewhere.",
                        "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}
                    }
                }
            }
        }),
    );
    paths.insert(
        "/metrics".into(),
        json!({
            "get": {
                "operationId": "getMetrics",
                "tags": ["instance"],
                "summary": "Prometheus metrics (OpenMetrics text).",
                "responses": {
                    "200": {
                        "description": "The metrics.",
                        "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}
                    }
                }
            }
        }),
    );
    paths.insert(
        "/openapi.json".into(),
        json!({
            "get": {
                "operationId": "getOpenApi",
                "tags": ["instance"],
                "summary": "This document.",
                "responses": {
                    "200": {
                        "description": "The OpenAPI 3.0 document.",
                        "content": {"application/json": {"schema": {"type": "object"}}}
                    }
                }
            }
        }),
    );
}

fn confirm_paths(paths: &mut Map<String, Value>) {
    // the confirm routes run under the request-deadline layer: its answer is JSON
    let unavailable = json!({
        "description": "unavailable (HTML, Retry-After 2): a backend could not answer in time; try again. \
            deadline_exceeded (JSON): the request deadline passed.",
        "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
        "content": {
            "text/html": {"schema": {"type": "string"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
        }
    });
    paths.insert(
        "/payment/callback".into(),
        json!({
            "get": {
                "operationId": "paymentCallback",
                "tags": ["confirm"],
                "summary": "Confirm path 1: the payer's browser back from the gateway.",
                "description": "Accepted only for a payment ID this API issued, with the per-payment \
                    signature the gateway returned at create, before the hold deadline. Executes the \
                    payment at most once (per-payment lock). The `status` parameter never decides \
                    anything and a redirect never releases a seat. Every answer is a small HTML page \
                    (`data-result` names the outcome) with `Cache-Control: no-store`.",
                "parameters": [
                    {"name": "paymentID", "in": "query", "required": true,
                     "description": "The gateway's payment ID: anything but a payment this API issued is 404.",
                     "schema": {"type": "string"}},
                    {"name": "status", "in": "query", "required": false,
                     "description": "success, failure or cancel as the redirect claims: never decides anything.",
                     "schema": {"type": "string"}},
                    {"name": "signature", "in": "query", "required": true,
                     "description": "The per-payment signature: a wrong or missing one is 403.",
                     "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": html_response("paid: the booking is PAID with this payment."),
                    "202": {
                        "description": "processing (another request is executing it; Retry-After 2) or pending \
                            (not known to be paid yet; the reconciler decides).",
                        "headers": {"Retry-After": {
                            "description": "Seconds to wait before reloading (processing only).",
                            "schema": {"type": "integer", "minimum": 0}
                        }},
                        "content": {"text/html": {"schema": {"type": "string"}}}
                    },
                    "400": html_response("bad_request: a query that does not parse (a parameter given twice, bad percent-encoding)."),
                    "402": html_response("not_paid: the gateway did not complete the payment, or the booking was superseded; nothing changed."),
                    "403": html_response("forbidden: the signature is missing, does not match or cannot be checked."),
                    "404": html_response("unknown_payment: no payment ID, or not a payment this API issued."),
                    "409": html_response("needs_attention: money moved but the seat is no longer this booking's; a human was alerted."),
                    "410": html_response("expired: the hold deadline passed; nothing was executed."),
                    "503": unavailable
                }
            }
        }),
    );
    paths.insert(
        "/payment/webhook".into(),
        json!({
            "post": {
                "operationId": "paymentWebhook",
                "tags": ["confirm"],
                "summary": "Confirm path 2: the gateway's notification, AWS SNS HTTP delivery.",
                "description": format!("The body (an SNS message as JSON, which SNS sends as text/plain; read \
                    whatever its Content-Type, at most {AXUM_BODY_BYTES_MAX} bytes) is verified before anything \
                    is read: the SNS signature (SignatureVersion 1 or 2) against a certificate from an allowed \
                    SigningCertURL, and the TopicArn must be allowed. A correctly signed message is always \
                    answered 200, even when the decision is left to the reconciler."),
                "parameters": [
                    {"name": "x-amz-sns-message-type", "in": "header", "required": false,
                     "description": "Sent by SNS; the message's own `Type` decides.",
                     "schema": {"type": "string", "enum": ["Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"]}}
                ],
                "requestBody": {
                    "required": true,
                    "description": format!("At most {AXUM_BODY_BYTES_MAX} bytes."),
                    "content": {
                        "text/plain": {"schema": {"type": "string"}},
                        "application/json": {"schema": {"$ref": "#/components/schemas/SnsMessage"}}
                    }
                },
                "responses": {
                    "200": text_response("A correctly signed message: handled, or left to the reconciler."),
                    "400": text_response("The body could not be read."),
                    "403": text_response("Not an SNS message, unsigned, badly signed, or from a certificate URL or topic that is not allowed."),
                    "413": text_response(&format!("The body is over {AXUM_BODY_BYTES_MAX} bytes.")),
                    "503": {
                        "description": "The signing certificate or a backend could not answer in time; SNS retries \
                            (text/plain), or the request deadline passed (JSON deadline_exceeded, with Retry-After).",
                        "content": {
                            "text/plain": {"schema": {"type": "string"}},
                            "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}
                        }
                    }
                }
            }
        }),
    );
}

fn admin_paths(paths: &mut Map<String, Value>) {
    let conflict_open =
        admin_error("The sale is open: close it first (a reset would drop live holds).");
    paths.insert(
        "/ops/reset".into(),
        json!({"post": with(
            admin_operation(
                "opsReset",
                "Reset the sale: levels and caps from the configuration, closed, no candidates; publish the status document.",
                admin_responses(
                    json_response("What was reset, and what could not be cleared.", "ResetReport"),
                    &[("409", conflict_open), ("428", unconfirmed_response())],
                ),
            ),
            "parameters",
            json!([confirm_sale_parameter()]),
        )}),
    );
    let load = with(
        admin_operation(
            "opsLoadCandidates",
            "Make candidates eligible: raw identifiers or their hashes.",
            admin_responses(
                json_response("What was loaded.", "LoadReport"),
                &[
                    (
                        "400",
                        admin_error(
                            "Not UTF-8, or a JSON body (`application/json`) that is not a list of strings.",
                        ),
                    ),
                    (
                        "413",
                        text_response(&format!("The body is over {LOAD_BODY_BYTES_MAX} bytes.")),
                    ),
                    ("428", unconfirmed_response()),
                ],
            ),
        ),
        "parameters",
        json!([confirm_sale_parameter()]),
    );
    let load = with(
        load,
        "requestBody",
        json!({
            "required": false,
            "description": format!("With `Content-Type: application/json`, a JSON list of strings; \
                with any other type, UTF-8 text, one entry per line (blank lines and `#` comments skipped; an \
                empty body loads nothing). At most {LOAD_BODY_BYTES_MAX} bytes: a longer list goes in several requests."),
            "content": {
                "text/plain": {"schema": {"type": "string"}, "example": "candidate-0001\ncandidate-0002\n"},
                "application/json": {
                    "schema": {"type": "array", "items": {"type": "string"}},
                    "example": ["candidate-0001", "candidate-0002"]
                }
            }
        }),
    );
    paths.insert("/ops/load-candidates".into(), json!({ "post": load }));
    paths.insert(
        "/ops/open".into(),
        json!({"post": admin_operation(
            "opsOpen",
            "Open admissions.",
            admin_responses(json_response("The sale now.", "StatusReport"), &[]),
        )}),
    );
    paths.insert(
        "/ops/close".into(),
        json!({"post": with(
            admin_operation(
                "opsClose",
                "Close admissions.",
                admin_responses(
                    json_response("The sale now.", "StatusReport"),
                    &[("428", unconfirmed_response())],
                ),
            ),
            "parameters",
            json!([confirm_sale_parameter()]),
        )}),
    );
    paths.insert(
        "/ops/status".into(),
        json!({"get": admin_operation(
            "opsStatus",
            "The sale now: publishes the status document and reads every record (an operator's look, not a poll).",
            admin_responses(json_response("The sale now.", "StatusReport"), &[]),
        )}),
    );
    paths.insert(
        "/ops/counters".into(),
        json!({"get": admin_operation(
            "opsCounters",
            "The ledger's counters: one O(levels) read, what a live view polls.",
            admin_responses(json_response("The counters.", "Counters"), &[]),
        )}),
    );
    paths.insert(
        "/ops/audit".into(),
        json!({"get": admin_operation(
            "opsAudit",
            "Prove the invariants held (after a run has gone quiet). Takes no parameter: a `gateway` URL in the query is refused (400); with `gateway.mock_ledger` the configured gateway's ledger is read.",
            admin_responses(
                json_response("Every invariant's verdict.", "AuditReport"),
                &[
                    ("400", admin_error("A `gateway` parameter: the ground truth is read only from the configured gateway.")),
                    ("502", admin_error("The configured gateway's ledger could not be read.")),
                ],
            ),
        )}),
    );
    paths.insert(
        "/ops/emails/pending".into(),
        json!({"get": admin_operation(
            "opsEmailsPending",
            "PAID bookings whose confirmation email is owed, oldest first.",
            admin_responses(json_response("The owed emails.", "EmailsPending"), &[]),
        )}),
    );
    paths.insert(
        "/ops/emails/resend".into(),
        json!({"post": admin_operation(
            "opsEmailsResend",
            "Run the email sweep now.",
            admin_responses(json_response("What the sweep did.", "OwedSweep"), &[]),
        )}),
    );
    let unarmed = admin_error(
        "The instance has no `[faults]` (rehearsals only): no such route, whatever the method.",
    );
    paths.insert(
        "/ops/faults".into(),
        json!({"get": admin_operation(
            "opsFaults",
            "The fault hooks' state (armed instances only).",
            admin_responses(
                json_response("The fault hooks now.", "FaultsState"),
                &[("404", unarmed.clone())],
            ),
        )}),
    );
    let start = admin_operation(
        "opsFaultsStart",
        "Start the fault schedule's clock (armed instances only).",
        admin_responses(
            json_response("The fault hooks now.", "FaultsState"),
            &[
                (
                    "400",
                    admin_error(
                        "Not `{\"started_unix_ms\": <u64>}`, or a start more than an hour (3 600 000 ms) ahead \
                         of the server's clock.",
                    ),
                ),
                ("404", unarmed),
            ],
        ),
    );
    let start = with(
        start,
        "requestBody",
        json!({
            "required": true,
            "content": {"application/json": {"schema": {
                "type": "object",
                "additionalProperties": false,
                "required": ["started_unix_ms"],
                "properties": {"started_unix_ms": {"type": "integer", "format": "int64", "minimum": 0}}
            }}}
        }),
    );
    paths.insert("/ops/faults/start".into(), json!({ "post": start }));
}

fn public_schemas() -> Map<String, Value> {
    let mut s = Map::new();
    s.insert(
        "BookingRequest".into(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["candidate", "level"],
            "properties": {
                "candidate": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": RAW_CANDIDATE_LEN_MAX,
                    "pattern": CANDIDATE_PATTERN,
                    "description": format!("The candidate's SHA-256 (64 hex digits, either case), or their raw \
                        identifier (hashed by the API): 1 to {RAW_CANDIDATE_LEN_MAX} characters, no control \
                        character (U+0000–U+001F, U+007F–U+009F)."),
                    "example": "candidate-0001"
                },
                "level": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": LEVEL_LEN_MAX,
                    "pattern": LEVEL_PATTERN,
                    "description": "One of the sale's levels (its configuration; an unknown one is 404).",
                    "example": "gold"
                }
            }
        }),
    );
    s.insert(
        "Booking".into(),
        json!({
            "type": "object",
            "required": ["outcome", "candidate_hash", "level", "status"],
            "properties": {
                "outcome": {"type": "string", "enum": ["admitted", "already_holding"]},
                "candidate_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                "level": {"type": "string", "pattern": LEVEL_PATTERN, "maxLength": LEVEL_LEN_MAX},
                "status": {"type": "string", "enum": ["HELD", "PENDING"]},
                "payment_id": {"type": "string", "nullable": true},
                "deadline_ms": {"type": "integer", "format": "int64", "minimum": 0, "nullable": true},
                "deadline": {"type": "string", "format": "date-time", "nullable": true},
                "redirect_url": {"type": "string", "nullable": true}
            }
        }),
    );
    s.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error", "message"],
            "properties": {
                "error": {
                    "type": "string",
                    "enum": ["level_full", "sale_closed", "not_eligible", "unknown_level", "already_paid",
                        "busy", "deadline_exceeded", "draining", "bad_request", "payload_too_large", "unsupported_media_type",
                        "unauthorized"]
                },
                "message": {"type": "string", "description": "For a person."}
            }
        }),
    );
    s.insert(
        "Readiness".into(),
        json!({
            "type": "object",
            "required": ["ready", "status"],
            "properties": {
                "ready": {"type": "boolean"},
                "status": {"type": "string", "enum": ["ready", "draining"]}
            }
        }),
    );
    s.insert(
        "Health".into(),
        json!({
            "type": "object",
            "required": ["status", "sale"],
            "properties": {
                "status": {"type": "string", "enum": ["ok"]},
                "sale": {"type": "string"}
            }
        }),
    );
    s.insert(
        "LevelStatus".into(),
        json!({
            "type": "object",
            "required": ["level", "cap", "taken", "left", "state"],
            "properties": {
                "level": {"type": "string"},
                "cap": {"type": "integer", "minimum": 0},
                "taken": {"type": "integer", "minimum": 0},
                "left": {"type": "integer", "minimum": 0},
                "state": {"type": "string", "enum": ["open", "full", "closed"]}
            }
        }),
    );
    s.insert(
        "StatusDocument".into(),
        json!({
            "type": "object",
            "required": ["sale", "open", "levels", "generated_at_ms"],
            "properties": {
                "sale": {"type": "string"},
                "open": {"type": "boolean"},
                "levels": {"type": "array", "items": {"$ref": "#/components/schemas/LevelStatus"}},
                "generated_at_ms": {"type": "integer", "format": "int64", "minimum": 0}
            }
        }),
    );
    s.insert(
        "SnsMessage".into(),
        json!({
            "type": "object",
            "required": ["Type", "MessageId", "TopicArn", "Timestamp", "SignatureVersion", "Signature", "SigningCertURL"],
            "properties": {
                "Type": {"type": "string"},
                "MessageId": {"type": "string"},
                "TopicArn": {"type": "string"},
                "Subject": {"type": "string"},
                "Message": {"type": "string"},
                "Timestamp": {"type": "string"},
                "SignatureVersion": {"type": "string", "enum": ["1", "2"]},
                "Signature": {"type": "string"},
                "SigningCertURL": {"type": "string"},
                "SubscribeURL": {"type": "string"},
                "Token": {"type": "string"},
                "UnsubscribeURL": {"type": "string"}
            }
        }),
    );
    s
}

fn admin_schemas(s: &mut Map<String, Value>) {
    let count = json!({"type": "integer", "minimum": 0});
    s.insert(
        "AdminError".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string", "description": "Why, for a person."}}
        }),
    );
    s.insert(
        "LevelCount".into(),
        json!({
            "type": "object",
            "required": ["level", "cap", "count"],
            "properties": {
                "level": {"type": "string"},
                "cap": count.clone(),
                "count": count.clone(),
                "peak": count.clone()
            }
        }),
    );
    s.insert(
        "Counters".into(),
        json!({
            "type": "object",
            "required": ["open", "levels"],
            "properties": {
                "open": {"type": "boolean"},
                "levels": {"type": "array", "items": {"$ref": "#/components/schemas/LevelCount"}},
                "paid": count.clone()
            }
        }),
    );
    s.insert(
        "QueueDepth".into(),
        json!({
            "type": "object",
            "required": ["visible", "in_flight"],
            "properties": {"visible": count.clone(), "in_flight": count.clone()}
        }),
    );
    s.insert(
        "ResetReport".into(),
        json!({
            "type": "object",
            "required": ["sale", "levels", "records_left", "queue_left", "dead_letters_left", "note"],
            "properties": {
                "sale": {"type": "string"},
                "levels": {"type": "array", "items": {"$ref": "#/components/schemas/LevelCount"}},
                "records_left": count.clone(),
                "queue_left": {"$ref": "#/components/schemas/QueueDepth"},
                "dead_letters_left": count.clone(),
                "note": {"type": "string"}
            }
        }),
    );
    s.insert(
        "LoadReport".into(),
        json!({
            "type": "object",
            "required": ["read", "added", "batches"],
            "properties": {"read": count.clone(), "added": count.clone(), "batches": count.clone()}
        }),
    );
    s.insert(
        "StatusReport".into(),
        json!({
            "type": "object",
            "required": ["counters", "records", "queue", "dead_letters", "throttles", "emails", "alerts"],
            "properties": {
                "counters": {"$ref": "#/components/schemas/Counters"},
                "document": {"type": "object", "nullable": true, "description": "The status document as just published (a StatusDocument)."},
                "records": {"type": "object", "additionalProperties": {
                    "type": "object",
                    "required": ["held", "paid"],
                    "properties": {"held": count.clone(), "paid": count.clone(), "emails_owed": count.clone()}
                }},
                "queue": {"$ref": "#/components/schemas/QueueDepth"},
                "dead_letters": count.clone(),
                "throttles": {
                    "type": "object",
                    "required": ["reads", "writes"],
                    "properties": {"reads": count.clone(), "writes": count.clone()}
                },
                "emails": count.clone(),
                "alerts": count.clone()
            }
        }),
    );
    s.insert(
        "AuditReport".into(),
        json!({
            "type": "object",
            "required": ["sale", "passed", "invariants"],
            "properties": {
                "sale": {"type": "string"},
                "passed": {"type": "boolean"},
                "invariants": {"type": "array", "items": {
                    "type": "object",
                    "required": ["name", "passed", "figure"],
                    "properties": {
                        "name": {"type": "string"},
                        "passed": {"type": "boolean"},
                        "figure": {"type": "number"},
                        "threshold": {"type": "number"},
                        "unit": {"type": "string"}
                    }
                }}
            }
        }),
    );
    s.insert(
        "EmailsPending".into(),
        json!({
            "type": "object",
            "required": ["owed", "truncated"],
            "properties": {
                "owed": {"type": "array", "items": {"type": "object"}},
                "truncated": {"type": "boolean"}
            }
        }),
    );
    s.insert(
        "OwedSweep".into(),
        json!({
            "type": "object",
            "required": ["owed", "sent", "failed"],
            "properties": {
                "owed": count.clone(),
                "sent": count.clone(),
                "failed": count.clone(),
                "waiting": count.clone(),
                "given_up": count.clone()
            }
        }),
    );
    s.insert(
        "FaultsState".into(),
        json!({
            "type": "object",
            "required": ["instance", "counts", "fired", "dropped"],
            "properties": {
                "instance": {"type": "string"},
                "started_unix_ms": {"type": "integer", "format": "int64", "minimum": 0, "nullable": true},
                "counts": {"type": "array", "items": {"type": "object"}},
                "fired": {"type": "array", "items": {"type": "object"}},
                "dropped": count
            }
        }),
    );
}

/// The document.
pub fn document() -> Value {
    let mut paths = Map::new();
    paths.insert("/bookings".into(), bookings_path());
    info_paths(&mut paths);
    confirm_paths(&mut paths);
    admin_paths(&mut paths);
    let mut schemas = public_schemas();
    admin_schemas(&mut schemas);
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "sellout booking API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Flash-sale seat reservation: hold a seat (POST /bookings), pay at the gateway, \
                get confirmed by the browser callback, the gateway's SNS webhook or the reconciler. \
                Every handler answers within the request deadline (8 s); a 503 from the sale routes carries \
                Retry-After and means nothing was held. No route answers 500. The public routes need no \
                credentials, except POST /bookings where `candidate_auth` is configured (a candidate's JWT, \
                `candidateToken`). The admin routes (tag `admin`, `/ops/…`) are served on a listener of their own \
                (`admin_listen`, 127.0.0.1:8081 by default), not on the public one, and need \
                `Authorization: Bearer <token>` (`bearerAuth`)."
        },
        "tags": [
            {"name": "sale", "description": "Booking a seat and the sale's status."},
            {"name": "confirm", "description": "The confirm paths: the browser callback and the gateway's webhook."},
            {"name": "instance", "description": "Health, readiness, metrics and this document."},
            {"name": ADMIN_TAG, "description": "The ops steps. Served on the admin listener (`admin_listen`, \
                loopback by default), never on the public one; bearer token (`bearerAuth`) when one is \
                configured, which it must be off loopback."}
        ],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "candidateToken": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "A candidate's token from the login front door (`candidate_auth`, off unless \
                        configured): HS256, RS256 or EdDSA as configured, with `sub` (the candidate: raw identifier \
                        or hash) and `exp`; `iss` and `aud` when configured."
                },
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The admin token (`admin_token`, `admin_token_file` or SELLOUT_ADMIN_TOKEN; \
                        `admin_token_previous` is accepted too while a rotation is under way)."
                }
            },
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before retrying.",
                    "required": true,
                    "schema": {"type": "integer", "minimum": 0}
                }
            },
            "schemas": schemas
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::bookings::candidate_hash;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k == "$ref" {
                        if let Some(s) = v.as_str() {
                            out.push(s.to_owned());
                        }
                    }
                    refs(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_path_is_described_and_every_ref_resolves() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.0.3");
        for p in PATHS.iter().chain(&ADMIN_PATHS) {
            assert!(doc["paths"][p].is_object(), "{p}");
        }
        assert_eq!(
            doc["paths"].as_object().unwrap().len(),
            PATHS.len() + ADMIN_PATHS.len(),
            "a path the lists do not name"
        );
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let pointer = r.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
    }

    /// Every operation, with its path and method.
    fn operations(doc: &Value) -> Vec<(String, String, Value)> {
        let mut out = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                out.push((path.clone(), method.clone(), op.clone()));
            }
        }
        out
    }

    #[test]
    fn admin_routes_need_the_bearer_token_and_public_ones_need_nothing() {
        let doc = document();
        assert_eq!(
            doc["components"]["securitySchemes"]["bearerAuth"],
            json!({"type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearerAuth"]["description"]})
        );
        assert!(doc.get("security").is_none(), "no global requirement");
        let mut admin = 0;
        for (path, method, op) in operations(&doc) {
            let tagged = op["tags"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == ADMIN_TAG);
            assert_eq!(tagged, path.starts_with("/ops/"), "{method} {path}");
            if tagged {
                admin += 1;
                assert_eq!(
                    op["security"],
                    json!([{"bearerAuth": []}]),
                    "{method} {path}"
                );
                assert!(op["responses"]["401"].is_object(), "{method} {path}");
                assert!(
                    op["description"].as_str().unwrap().contains("admin_listen"),
                    "{method} {path}"
                );
            } else if (path.as_str(), method.as_str()) == ("/bookings", "post") {
                // candidate_auth is optional: no credentials, or a candidate's token
                assert_eq!(op["security"], json!([{}, {"candidateToken": []}]));
                assert!(op["responses"]["401"].is_object());
            } else {
                assert!(op.get("security").is_none(), "{method} {path}");
                assert!(op["responses"].get("401").is_none(), "{method} {path}");
            }
        }
        assert_eq!(admin, ADMIN_PATHS.len());
    }

    #[test]
    fn every_503_of_the_sale_routes_says_when_to_retry() {
        let doc = document();
        for path in ["/bookings", "/status.json", "/readyz", "/payment/callback"] {
            let item = doc["paths"][path].as_object().unwrap();
            for op in item.values() {
                assert!(
                    op["responses"]["503"]["headers"]["Retry-After"].is_object(),
                    "{path}"
                );
            }
        }
        let booking = &doc["paths"]["/bookings"]["post"]["responses"];
        for code in [
            "200", "201", "400", "401", "403", "404", "409", "413", "503",
        ] {
            assert!(booking[code].is_object(), "POST /bookings {code}");
        }
    }

    /// The ranges of a pattern `^[^<ranges>]+$` whose ranges are `\xHH-\xHH`.
    fn excluded_ranges(pattern: &str) -> Vec<(u32, u32)> {
        let class = pattern
            .strip_prefix("^[^")
            .and_then(|p| p.strip_suffix("]+$"))
            .expect("a negated class");
        let hex = |s: &str| u32::from_str_radix(s.strip_prefix(r"\x").unwrap(), 16).unwrap();
        class
            .split(r"\x")
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .chunks(2)
            .map(|pair| {
                let lo = pair[0].strip_suffix('-').expect("lo-hi");
                (hex(&format!(r"\x{lo}")), hex(&format!(r"\x{}", pair[1])))
            })
            .collect()
    }

    #[test]
    fn the_candidate_pattern_and_lengths_are_the_code_s_rule() {
        let doc = document();
        let candidate = &doc["components"]["schemas"]["BookingRequest"]["properties"]["candidate"];
        assert_eq!(candidate["pattern"], CANDIDATE_PATTERN);
        assert_eq!(candidate["minLength"], 1);
        assert_eq!(candidate["maxLength"], RAW_CANDIDATE_LEN_MAX);
        let ranges = excluded_ranges(CANDIDATE_PATTERN);
        assert_eq!(ranges, vec![(0x00, 0x1F), (0x7F, 0x9F)]);
        let in_class = |c: char| {
            !ranges
                .iter()
                .any(|&(lo, hi)| (lo..=hi).contains(&(c as u32)))
        };
        // every character the pattern allows the code takes, and no other:
        // the whole Basic Multilingual Plane and a sample of the rest
        let sample = (0u32..0x1_0000).chain((0x1_0000..=0x10_FFFF).step_by(97));
        let mut checked = 0;
        for c in sample.filter_map(char::from_u32) {
            let s = format!("a{c}b");
            assert_eq!(
                candidate_hash(&s).is_ok(),
                in_class(c),
                "U+{:04X}: the pattern and candidate_hash disagree",
                c as u32
            );
            checked += 1;
        }
        assert!(checked > 60_000);
        // lengths count characters (JSON Schema's unit), not bytes
        for c in ['x', 'é', '€', '😀'] {
            let at_max: String = std::iter::repeat_n(c, RAW_CANDIDATE_LEN_MAX).collect();
            assert!(
                candidate_hash(&at_max).is_ok(),
                "{c} x {RAW_CANDIDATE_LEN_MAX}"
            );
            let over = format!("{at_max}{c}");
            assert!(
                candidate_hash(&over).is_err(),
                "{c} x {}",
                RAW_CANDIDATE_LEN_MAX + 1
            );
        }
        assert!(candidate_hash("").is_err());
        let level = &doc["components"]["schemas"]["BookingRequest"]["properties"]["level"];
        assert_eq!(level["pattern"], LEVEL_PATTERN);
        assert_eq!(level["maxLength"], LEVEL_LEN_MAX);
        assert!(booking::Level::parse(&"a".repeat(LEVEL_LEN_MAX)).is_ok());
        assert!(booking::Level::parse(&"a".repeat(LEVEL_LEN_MAX + 1)).is_err());
        for bad in ["a b", "a.b", "é", "a\n"] {
            assert!(booking::Level::parse(bad).is_err(), "{bad}");
        }
    }
}
