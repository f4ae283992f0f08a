-- Run webhooks (docs/webhooks.md): subscriptions and the outbox of their deliveries (see the SQLite
-- migration 0015 for the life of a row).
CREATE TABLE webhook_subscriptions (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    url         TEXT    NOT NULL,
    events      TEXT    NOT NULL,
    secret      TEXT    NOT NULL,
    enabled     BOOLEAN NOT NULL DEFAULT TRUE,
    created_by  TEXT,
    created_at  BIGINT  NOT NULL
);
CREATE INDEX webhook_subscriptions_by_tenant ON webhook_subscriptions (tenant);

CREATE TABLE webhook_deliveries (
    id            TEXT    PRIMARY KEY,
    subscription  TEXT    NOT NULL,
    tenant        TEXT    NOT NULL,
    run_id        TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    event         TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_status   INTEGER,
    last_error    TEXT,
    available_at  BIGINT  NOT NULL,
    created_at    BIGINT  NOT NULL,
    delivered_at  BIGINT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (available_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_by_run ON webhook_deliveries (run_id, subscription, seq);
CREATE INDEX webhook_deliveries_by_subscription ON webhook_deliveries (subscription, created_at);
CREATE TRIGGER webhook_deliveries_purge_only_delete BEFORE DELETE ON webhook_deliveries
    FOR EACH ROW EXECUTE FUNCTION lockstep_purge_only_delete('a webhook delivery row');
