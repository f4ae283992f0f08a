-- Queues, priorities and dead letters for tasks; an index that lets claims visit tenants in turn.
ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN dead_reason TEXT;
CREATE INDEX tasks_ready_by_tenant ON tasks (tenant, queue, priority DESC, available_at) WHERE status = 'ready';
CREATE INDEX tasks_leased_tenant ON tasks (tenant) WHERE status = 'leased';
CREATE INDEX tasks_ready_age ON tasks (available_at) WHERE status = 'ready';
