-- Every PAID booking, copied from the bookings table's stream by the sync
-- handler. A PAID booking never changes but for its email flag, so a row is
-- the record as paid; the payment ID is the key the back office looks up by.
CREATE TABLE paid_bookings (
    payment_id  text        PRIMARY KEY,
    sale        text        NOT NULL,
    candidate   text        NOT NULL CHECK (candidate ~ '^[0-9a-f]{64}$'),
    level       text        NOT NULL,
    created_ms  bigint      NOT NULL CHECK (created_ms >= 0),
    deadline_ms bigint      NOT NULL CHECK (deadline_ms >= created_ms),
    paid_ms     bigint      NOT NULL CHECK (paid_ms >= 0),
    paid_by     text        NOT NULL CHECK (paid_by IN ('callback', 'webhook', 'reconciler')),
    extensions  integer     NOT NULL CHECK (extensions >= 0),
    email_sent  boolean     NOT NULL,
    synced_at   timestamptz NOT NULL DEFAULT now(),
    -- one paid seat per candidate and sale
    UNIQUE (sale, candidate)
);
