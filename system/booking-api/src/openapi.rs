//! The OpenAPI 3.0 document of the whole API (`GET /openapi.json`),
//! hand-written so every answer is the documented one, including the confirm
//! paths' routes. [`PATHS`] lists the paths it describes; a test checks the
//! document names each of them and that every `$ref` resolves.

use serde_json::{Value, json};

/// Every path the API serves.
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

fn error_response(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    })
}

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

/// The document.
pub fn document() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "sellout booking API",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Flash-sale seat reservation: hold a seat (POST /bookings), pay at the gateway, \
                get confirmed by the browser callback, the gateway's SNS webhook or the reconciler. \
                Every handler answers within the request deadline (8 s); a 503 carries Retry-After and \
                means nothing was held."
        },
        "paths": {
            "/bookings": {
                "post": {
                    "operationId": "createBooking",
                    "summary": "Hold a seat: admit, create the payment, keep the booking copy, enqueue.",
                    "description": "`candidate` is the candidate's SHA-256 hash (64 hex digits) or their raw \
                        identifier, which is hashed. Unknown fields are refused. If the payment or the \
                        enqueue fails the admission is undone before the answer (503).",
                    "requestBody": {
                        "required": true,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/BookingRequest"}}}
                    },
                    "responses": {
                        "201": booking_response("Admitted: the seat is HELD until `deadline`; send the payer to `redirect_url`."),
                        "200": booking_response("Already holding: the candidate's live hold (HELD with its payment, or PENDING while another request creates it)."),
                        "400": error_response("bad_request: malformed JSON, missing or unknown fields, bad candidate or level syntax."),
                        "403": error_response("not_eligible: the candidate is not on the list."),
                        "404": error_response("unknown_level: the sale has no such level."),
                        "409": error_response("level_full, sale_closed or already_paid."),
                        "413": error_response("payload_too_large: the body is over 16 KiB."),
                        "503": busy_response("busy or deadline_exceeded: nothing is held; retry after Retry-After seconds. draining: the instance is shutting down, nothing was done; retry on another instance.")
                    }
                }
            },
            "/status.json": {
                "get": {
                    "operationId": "getStatus",
                    "summary": "The live status document: availability per level.",
                    "responses": {
                        "200": {
                            "description": "The latest document written, or one built from the counters if none was written yet.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StatusDocument"}}}
                        },
                        "503": busy_response("The document or the counters could not be read in time.")
                    }
                }
            },
            "/status": {
                "get": {
                    "operationId": "getStatusPage",
                    "summary": "The status page: a static HTML page that reads status.json beside it every 2 s.",
                    "description": "Shows the sale (open, closed, not yet open) and each level's seats left. \
                        The counts decide as well as the flags: a level with every seat taken shows full \
                        even if the document says open; a document older than 10 s shows stale with its age. \
                        `booking provision` uploads the same page beside status.json on S3.",
                    "responses": {
                        "200": html_response("The page.")
                    }
                }
            },
            "/healthz": {
                "get": {
                    "operationId": "getHealth",
                    "summary": "The instance is up (touches no backend).",
                    "responses": {
                        "200": {
                            "description": "Up.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Health"}}}
                        }
                    }
                }
            },
            "/readyz": {
                "get": {
                    "operationId": "getReadiness",
                    "summary": "Whether the instance takes traffic (touches no backend): 503 once it drains on its way out (SIGTERM), while /healthz stays 200.",
                    "responses": {
                        "200": {
                            "description": "Ready.",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}
                        },
                        "503": {
                            "description": "Draining: send traffic elsewhere.",
                            "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Readiness"}}}
                        }
                    }
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "getMetrics",
                    "summary": "Prometheus metrics (OpenMetrics text).",
                    "responses": {
                        "200": {
                            "description": "The metrics.",
                            "content": {"application/openmetrics-text": {"schema": {"type": "string"}}}
                        }
                    }
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "getOpenApi",
                    "summary": "This document.",
                    "responses": {
                        "200": {
                            "description": "The OpenAPI 3.0 document.",
                            "content": {"application/json": {"schema": {"type": "object"}}}
                        }
                    }
                }
            },
            "/payment/callback": {
                "get": {
                    "operationId": "paymentCallback",
                    "summary": "Confirm path 1: the payer's browser back from the gateway.",
                    "description": "Accepted only for a payment ID this API issued, with the per-payment \
                        signature the gateway returned at create, before the hold deadline. Executes the \
                        payment at most once (per-payment lock). The `status` parameter never decides \
                        anything and a redirect never releases a seat.",
                    "parameters": [
                        {"name": "paymentID", "in": "query", "required": true, "schema": {"type": "string"}},
                        {"name": "status", "in": "query", "required": false,
                         "description": "success, failure or cancel as the redirect claims: never decides anything.",
                         "schema": {"type": "string"}},
                        {"name": "signature", "in": "query", "required": true, "schema": {"type": "string"}}
                    ],
                    "responses": {
                        "200": html_response("paid: the booking is PAID with this payment."),
                        "202": html_response("processing (another request is executing it) or pending (not known to be paid yet; the reconciler decides)."),
                        "400": html_response("bad_request: missing or malformed parameters."),
                        "402": html_response("not_paid: the gateway did not complete the payment, or the booking was superseded; nothing changed."),
                        "403": html_response("forbidden: the signature does not match or cannot be checked."),
                        "404": html_response("unknown_payment: not a payment this API issued."),
                        "409": html_response("needs_attention: money moved but the seat is no longer this booking's; a human was alerted."),
                        "410": html_response("expired: the hold deadline passed; nothing was executed."),
                        "503": {
                            "description": "unavailable: a backend could not answer in time; try again.",
                            "headers": {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}},
                            "content": {"text/html": {"schema": {"type": "string"}}}
                        }
                    }
                }
            },
            "/payment/webhook": {
                "post": {
                    "operationId": "paymentWebhook",
                    "summary": "Confirm path 2: the gateway's notification, AWS SNS HTTP delivery.",
                    "description": "The SNS signature (SignatureVersion 1 or 2) is verified against a \
                        certificate from an allowed SigningCertURL, and the TopicArn must be allowed. \
                        A correctly signed message is always answered 200, even when the decision is left \
                        to the reconciler.",
                    "parameters": [
                        {"name": "x-amz-sns-message-type", "in": "header", "required": false,
                         "schema": {"type": "string", "enum": ["Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"]}}
                    ],
                    "requestBody": {
                        "required": true,
                        "content": {
                            "text/plain": {"schema": {"type": "string"}},
                            "application/json": {"schema": {"$ref": "#/components/schemas/SnsMessage"}}
                        }
                    },
                    "responses": {
                        "200": text_response("A correctly signed message: handled, or left to the reconciler."),
                        "403": text_response("Not an SNS message, unsigned, badly signed, or from a certificate URL or topic that is not allowed."),
                        "503": text_response("The signing certificate or a backend could not answer in time; SNS retries.")
                    }
                }
            }
        },
        "components": {
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before retrying.",
                    "schema": {"type": "integer", "minimum": 0}
                }
            },
            "schemas": {
                "BookingRequest": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["candidate", "level"],
                    "properties": {
                        "candidate": {
                            "type": "string", "minLength": 1, "maxLength": 256,
                            "description": "The candidate's SHA-256 (64 hex digits), or their raw identifier (hashed by the API)."
                        },
                        "level": {
                            "type": "string", "minLength": 1, "maxLength": 32,
                            "pattern": "^[A-Za-z0-9_-]+$"
                        }
                    }
                },
                "Booking": {
                    "type": "object",
                    "required": ["outcome", "candidate_hash", "level", "status"],
                    "properties": {
                        "outcome": {"type": "string", "enum": ["admitted", "already_holding"]},
                        "candidate_hash": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                        "level": {"type": "string"},
                        "status": {"type": "string", "enum": ["HELD", "PENDING"]},
                        "payment_id": {"type": "string", "nullable": true},
                        "deadline_ms": {"type": "integer", "format": "int64", "minimum": 0, "nullable": true},
                        "deadline": {"type": "string", "format": "date-time", "nullable": true},
                        "redirect_url": {"type": "string", "nullable": true}
                    }
                },
                "Error": {
                    "type": "object",
                    "required": ["error", "message"],
                    "properties": {
                        "error": {
                            "type": "string",
                            "description": "level_full, sale_closed, not_eligible, unknown_level, already_paid, busy, deadline_exceeded, draining, bad_request, payload_too_large, or a confirm path's code."
                        },
                        "message": {"type": "string"}
                    }
                },
                "Readiness": {
                    "type": "object",
                    "required": ["ready", "status"],
                    "properties": {
                        "ready": {"type": "boolean"},
                        "status": {"type": "string", "enum": ["ready", "draining"]}
                    }
                },
                "Health": {
                    "type": "object",
                    "required": ["status", "sale"],
                    "properties": {
                        "status": {"type": "string", "enum": ["ok"]},
                        "sale": {"type": "string"}
                    }
                },
                "LevelStatus": {
                    "type": "object",
                    "required": ["level", "cap", "taken", "left", "state"],
                    "properties": {
                        "level": {"type": "string"},
                        "cap": {"type": "integer", "minimum": 0},
                        "taken": {"type": "integer", "minimum": 0},
                        "left": {"type": "integer", "minimum": 0},
                        "state": {"type": "string", "enum": ["open", "full", "closed"]}
                    }
                },
                "StatusDocument": {
                    "type": "object",
                    "required": ["sale", "open", "levels", "generated_at_ms"],
                    "properties": {
                        "sale": {"type": "string"},
                        "open": {"type": "boolean"},
                        "levels": {"type": "array", "items": {"$ref": "#/components/schemas/LevelStatus"}},
                        "generated_at_ms": {"type": "integer", "format": "int64", "minimum": 0}
                    }
                },
                "SnsMessage": {
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
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for p in PATHS {
            assert!(doc["paths"][p].is_object(), "{p}");
        }
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(!found.is_empty());
        for r in found {
            let pointer = r.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
    }
}
