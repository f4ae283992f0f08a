-- Run webhooks (docs/webhooks.md): a tenant's subscriptions and the outbox of their deliveries.
-- `events` is the subscribed event types between commas (",run.completed,run.failed,"), so the append
-- that produces an event finds its subscriptions with one LIKE; `secret` is the signing secret sealed
-- under the subscription's own data key (run_keys id `webhook:<id>`), never in clear.
CREATE TABLE webhook_subscriptions (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    events      TEXT    NOT NULL,
    secret      TEXT    NOT NULL,     -- JSON: a $sealed marker
    enabled     INTEGER NOT NULL DEFAULT 1,
    created_by  TEXT,
    created_at  INTEGER NOT NULL
);
CREATE INDEX webhook_subscriptions_by_tenant ON webhook_subscriptions (tenant);

-- One row per (subscription, run event), written in the transaction of the event (the outbox). Its id
-- is the `webhook-id` of every attempt. A run's rows of one subscription are delivered in seq order:
-- the delivery pass takes a row only when no earlier row of the same run and subscription is pending.
CREATE TABLE webhook_deliveries (
    id            TEXT    PRIMARY KEY,
    subscription  TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    event         TEXT    NOT NULL,
    body          TEXT    NOT NULL,     -- the JSON posted (ids, names, codes; no run values)
    status        TEXT    NOT NULL,     -- pending | delivered | failed
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_status   INTEGER,              -- the receiver's HTTP status of the last attempt
    last_error    TEXT,
    available_at  INTEGER NOT NULL,     -- when the pass may take it (a claim pushes it by the lease)
    created_at    INTEGER NOT NULL,
    delivered_at  INTEGER
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (available_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (run_id, subscription, seq);
CREATE INDEX webhook_deliveries_by_subscription ON webhook_deliveries (subscription, created_at);

CREATE TRIGGER webhook_deliveries_purge_only_delete BEFORE DELETE ON webhook_deliveries
WHEN NOT EXISTS (SELECT 1 FROM tombstones WHERE run_id = OLD.run_id)
BEGIN SELECT RAISE(ABORT, 'a webhook delivery row is deleted only by its run''s purge, once the run has a tombstone'); END;
