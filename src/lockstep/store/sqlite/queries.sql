-- Named queries for the SQLite adapter. Each block starts with `-- name: NAME`.

-- name: definition_latest
SELECT version, digest, document FROM definitions
WHERE tenant = :tenant AND name = :name ORDER BY version DESC LIMIT 1;

-- name: definition_by_version
SELECT version, digest, document FROM definitions
WHERE tenant = :tenant AND name = :name AND version = :version;

-- name: definition_by_digest
SELECT version, digest, document FROM definitions
WHERE tenant = :tenant AND name = :name AND digest = :digest;

-- name: definition_insert
INSERT INTO definitions (tenant, name, version, digest, document, created_at)
VALUES (:tenant, :name, :version, :digest, :document, :created_at);

-- name: definitions_list
SELECT name, version, digest, created_at FROM definitions
WHERE tenant = :tenant ORDER BY name, version;

-- name: run_load
SELECT tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = :run_id;

-- name: runs_to_scrub
-- The next unmarked runs after a cursor, in run-id order (the primary key): the scrub's round robin.
SELECT run_id, tenant FROM runs WHERE run_id > :after AND damaged IS NULL ORDER BY run_id
LIMIT :limit;

-- name: run_mark_damaged
UPDATE runs SET damaged = :damaged WHERE run_id = :run_id AND damaged IS NULL;

-- name: run_by_key
SELECT run_id, request_digest FROM runs WHERE tenant = :tenant AND start_key = :start_key;

-- name: runs_with_prefix
-- A range on the primary key (run ids are lowercase hex): the ids in [prefix, prefix + "g").
SELECT run_id FROM runs WHERE run_id >= :low AND run_id < :high AND tenant = :tenant
ORDER BY run_id LIMIT :limit;

-- name: run_insert
INSERT INTO runs (run_id, tenant, definition, version, status, seq, current_step, snapshot, last_hash,
                  start_key, request_digest, created_at, updated_at, wait_kind)
VALUES (:run_id, :tenant, :definition, :version, :status, :seq, :current_step, :snapshot, :last_hash,
        :start_key, :request_digest, :created_at, :updated_at, :wait_kind);

-- name: run_update
UPDATE runs SET status = :status, seq = :seq, current_step = :current_step, snapshot = :snapshot,
                last_hash = :last_hash, updated_at = :updated_at, wait_kind = :wait_kind
WHERE run_id = :run_id AND seq = :expected_seq;

-- name: runs_list
SELECT snapshot FROM runs
WHERE tenant = :tenant AND (:status IS NULL OR status = :status)
  AND (:definition IS NULL OR definition = :definition) AND run_id > :after
ORDER BY run_id LIMIT :limit;

-- name: runs_list_desc
SELECT snapshot FROM runs
WHERE tenant = :tenant AND (:status IS NULL OR status = :status)
  AND (:definition IS NULL OR definition = :definition) AND run_id < :before
ORDER BY run_id DESC LIMIT :limit;

-- name: runs_all_ids
SELECT run_id FROM runs WHERE (:tenant IS NULL OR tenant = :tenant) ORDER BY run_id;

-- name: event_insert
INSERT INTO events (run_id, seq, type, at, v, data, hash)
VALUES (:run_id, :seq, :type, :at, :v, :data, :hash);

-- name: events_of_run
SELECT seq, type, at, v, data, hash FROM events WHERE run_id = :run_id ORDER BY seq;

-- name: task_insert
INSERT INTO tasks (task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key,
                   definition, version, delivery, timeout_ms, priority, status, available_at, created_at)
VALUES (:task_id, :tenant, :run_id, :step, :attempt, :kind, :activity, :queue, :input, :idempotency_key,
        :definition, :version, :delivery, :timeout_ms, :priority, 'ready', :now, :now);

-- name: task_insert_leased
INSERT INTO tasks (task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key,
                   definition, version, delivery, timeout_ms, priority, status, available_at, created_at,
                   fencing, lease_owner, lease_expires_at, deadline)
VALUES (:task_id, :tenant, :run_id, :step, :attempt, :kind, :activity, :queue, :input, :idempotency_key,
        :definition, :version, :delivery, :timeout_ms, :priority, 'leased', :now, :now,
        :fencing, :worker, :lease_expires_at, :deadline);

-- name: task_lease
UPDATE tasks SET status = 'leased', fencing = :fencing, lease_owner = :worker,
                 lease_expires_at = :lease_expires_at, deadline = :deadline
WHERE task_id = :task_id AND status = 'ready';

-- name: task_close
UPDATE tasks SET status = :status WHERE task_id = :task_id AND status IN ('ready', 'leased');

-- name: task_get
SELECT task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key, definition,
       version, delivery, timeout_ms, status, fencing, lease_owner, lease_expires_at, deadline
FROM tasks WHERE task_id = :task_id;

-- name: tasks_get_many
SELECT task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key, definition,
       version, delivery, timeout_ms, status, fencing, lease_owner, lease_expires_at, deadline
FROM tasks WHERE task_id IN (SELECT value FROM json_each(:task_ids));

-- name: task_heartbeat
UPDATE tasks SET lease_expires_at = MIN(:lease_until, deadline)
WHERE task_id = :task_id AND fencing = :fencing AND status = 'leased';

-- name: leases_abandon
UPDATE tasks SET lease_expires_at = :now
WHERE status = 'leased' AND lease_owner = :owner AND lease_expires_at > :now
  AND (:tenant IS NULL OR tenant = :tenant);

-- name: timer_insert
INSERT INTO timers (run_id, key, generation, tenant, fire_at, status)
VALUES (:run_id, :key, :generation, :tenant, :fire_at, 'scheduled');

-- name: timer_close
UPDATE timers SET status = :status
WHERE run_id = :run_id AND key = :key AND generation = :generation AND status = 'scheduled';

-- name: timers_due
SELECT run_id, key, generation FROM timers
WHERE status = 'scheduled' AND fire_at <= :now
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = timers.run_id AND r.damaged IS NOT NULL)
ORDER BY fire_at LIMIT :limit;

-- name: leases_expired
SELECT task_id, run_id, attempt, fencing, lease_owner, deadline FROM tasks
WHERE status = 'leased' AND lease_expires_at <= :now
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = tasks.run_id AND r.damaged IS NOT NULL)
ORDER BY lease_expires_at LIMIT :limit;

-- name: next_timer
-- A run the scrub marked damaged refuses its timers and leases: they are not due work (app/scrub.py).
-- ORDER BY + LIMIT, not MIN: the index timers_due is walked in order and the first sound row ends it.
SELECT fire_at FROM timers WHERE status = 'scheduled'
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = timers.run_id AND r.damaged IS NOT NULL)
ORDER BY fire_at LIMIT 1;

-- name: next_lease_expiry
SELECT lease_expires_at FROM tasks WHERE status = 'leased'
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = tasks.run_id AND r.damaged IS NOT NULL)
ORDER BY lease_expires_at LIMIT 1;

-- name: task_counts
SELECT status, COUNT(*) FROM tasks GROUP BY status;

-- name: ready_backlog
-- Backpressure (app/backlog.py): a scan of the partial index of ready tasks, at most once per interval.
SELECT tenant, COUNT(*) FROM tasks WHERE status = 'ready' GROUP BY tenant;

-- name: tenant_get
SELECT name, settings, bucket_tokens, bucket_at_ms, created_at FROM tenants WHERE name = :name;

-- name: tenant_insert
INSERT INTO tenants (name, settings, created_at) VALUES (:name, :settings, :created_at);

-- name: tenant_insert_default
-- The default tenant's row, made by its first audited action (sqltx/audit.py); two at once: one row.
INSERT INTO tenants (name, settings, created_at) VALUES (:name, '{}', :created_at) ON CONFLICT (name) DO NOTHING;

-- name: tenant_update_settings
UPDATE tenants SET settings = :settings WHERE name = :name;

-- name: tenant_update_bucket
UPDATE tenants SET bucket_tokens = :tokens, bucket_at_ms = :at_ms WHERE name = :name;

-- name: tenants_list
SELECT name, settings, bucket_tokens, bucket_at_ms, created_at FROM tenants ORDER BY name;

-- name: user_get
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE tenant = :tenant AND name = :name;

-- name: user_by_key
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE key_hash = :key_hash;

-- name: user_insert
INSERT INTO users (tenant, name, roles, groups, key_hash, password_hash, disabled, created_at)
VALUES (:tenant, :name, :roles, :groups, :key_hash, NULL, 0, :created_at);

-- name: user_update
UPDATE users SET roles = :roles, groups = :groups, key_hash = :key_hash, password_hash = :password_hash,
                 disabled = :disabled, email = :email, grants = :grants
WHERE tenant = :tenant AND name = :name;

-- name: users_list
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE tenant = :tenant ORDER BY name;

-- name: session_insert
INSERT INTO sessions (id_hash, tenant, user, csrf, created_at, expires_at, generation)
VALUES (:id_hash, :tenant, :user, :csrf, :created_at, :expires_at, :generation);

-- name: session_get
SELECT tenant, user, csrf, expires_at, generation FROM sessions WHERE id_hash = :id_hash;

-- name: session_delete
DELETE FROM sessions WHERE id_hash = :id_hash OR expires_at < :now;

-- name: audit_tenant_exists
SELECT 1 FROM tenants WHERE name = :name;

-- name: audit_chain_lock
-- The chain's head, created at GENESIS if it is new, and locked to the end of the transaction (an
-- upsert's DO UPDATE locks the row): one writer per chain at a time, in commit order.
INSERT INTO audit_chains (chain, rows, last_id, last_hash) VALUES (:chain, 0, NULL, :genesis)
ON CONFLICT (chain) DO UPDATE SET chain = excluded.chain
RETURNING rows, last_hash;

-- name: audit_insert
INSERT INTO audit (at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash)
VALUES (:at, :tenant, :actor, :action, :target, :outcome, :detail, :seq, :prev_hash, :hash);

-- name: audit_chain_advance
UPDATE audit_chains SET rows = :seq, last_id = last_insert_rowid(), last_hash = :hash
WHERE chain = :chain;

-- name: audit_page
-- One page of a tenant's rows, newest first, below the cursor `before` (an id), with the filters set.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant = :tenant AND id < :before
  AND (:actor IS NULL OR actor = :actor)
  AND (:action IS NULL OR action = :action)
  AND (:prefix_lo IS NULL OR (action >= :prefix_lo AND action < :prefix_hi))
  AND (:outcome IS NULL OR outcome = :outcome)
  AND (:since IS NULL OR at >= :since)
  AND (:until IS NULL OR at < :until)
ORDER BY id DESC LIMIT :limit;

-- name: audit_page_untenanted
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant IS NULL AND id < :before
  AND (:actor IS NULL OR actor = :actor)
  AND (:action IS NULL OR action = :action)
  AND (:prefix_lo IS NULL OR (action >= :prefix_lo AND action < :prefix_hi))
  AND (:outcome IS NULL OR outcome = :outcome)
  AND (:since IS NULL OR at >= :since)
  AND (:until IS NULL OR at < :until)
ORDER BY id DESC LIMIT :limit;

-- name: audit_snapshot
-- Called first in a read transaction: every later read sees the same snapshot (SQLite's reads do).
SELECT 1;

-- name: audit_heads
SELECT chain, rows, last_id, last_hash FROM audit_chains ORDER BY chain;

-- name: audit_head
SELECT chain, rows, last_id, last_hash FROM audit_chains WHERE chain = :chain;

-- name: audit_row_tenants
SELECT DISTINCT coalesce(tenant, '') FROM audit;

-- name: audit_chain_rows
-- A chain's rows in id order, after `after`.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant = :tenant AND id > :after ORDER BY id LIMIT :limit;

-- name: audit_chain_rows_untenanted
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE (tenant IS NULL OR tenant = '') AND id > :after ORDER BY id LIMIT :limit;

-- name: audit_unchained
-- Rows written before the chain existed (migration audit_chain), in id order.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit WHERE hash IS NULL AND id > :after ORDER BY id LIMIT :limit;

-- name: audit_chain_legacy
UPDATE audit SET seq = :seq, prev_hash = :prev_hash, hash = :hash WHERE id = :id AND hash IS NULL;

-- name: audit_chain_set_head
INSERT INTO audit_chains (chain, rows, last_id, last_hash) VALUES (:chain, :rows, :last_id, :last_hash)
ON CONFLICT (chain) DO UPDATE SET rows = excluded.rows, last_id = excluded.last_id, last_hash = excluded.last_hash;

-- name: active_runs_count
SELECT COUNT(*) FROM runs WHERE tenant = :tenant AND status NOT IN ('completed', 'failed', 'cancelled');

-- name: runs_by_status
SELECT tenant, status, COUNT(*) FROM runs GROUP BY tenant, status;

-- name: queue_stats
SELECT tenant, activity, COUNT(*), MIN(available_at) FROM tasks WHERE status = 'ready' GROUP BY tenant, activity;

-- name: timer_lag
SELECT tenant, MIN(fire_at), COUNT(*) FROM timers WHERE status = 'scheduled' AND fire_at <= :now GROUP BY tenant;

-- name: runs_at_step
SELECT tenant, definition, current_step, wait_kind, COUNT(*) FROM runs
WHERE status NOT IN ('completed', 'failed', 'cancelled')
GROUP BY tenant, definition, current_step, wait_kind;

-- name: approvals_waiting
SELECT tenant, COUNT(*), MIN(created_at) FROM approval_requests WHERE status = 'pending' GROUP BY tenant;

-- name: lease_stats
SELECT tenant, COUNT(*), SUM(CASE WHEN lease_expires_at <= :soon THEN 1 ELSE 0 END),
       SUM(CASE WHEN lease_expires_at <= :now THEN 1 ELSE 0 END)
FROM tasks WHERE status = 'leased' GROUP BY tenant;

-- name: approval_request_insert
INSERT INTO approval_requests (request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status,
                               expires_at, created_at)
VALUES (:request_id, :tenant, :run_id, :step, :users, :groups, :initiator, :allow_initiator, 'pending',
        :expires_at, :created_at);

-- name: approval_request_users
UPDATE approval_requests SET users = :users WHERE request_id = :request_id;

-- name: approval_request_get
SELECT request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status, expires_at, created_at
FROM approval_requests WHERE request_id = :request_id;

-- name: approval_request_close
UPDATE approval_requests SET status = :status WHERE request_id = :request_id AND status = 'pending';

-- name: approval_requests_pending
SELECT request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status, expires_at, created_at
FROM approval_requests WHERE tenant = :tenant AND status = 'pending' ORDER BY created_at;

-- name: approval_decision_insert
INSERT INTO approval_decisions (request_id, approver, decision, link_id, at)
VALUES (:request_id, :approver, :decision, :link_id, :at);

-- name: approval_decision_get
SELECT decision, link_id, at FROM approval_decisions WHERE request_id = :request_id AND approver = :approver;

-- name: link_insert
INSERT INTO approval_links (link_id, token_hash, tenant, run_id, step, request_id, approver, status, expires_at,
                            created_at)
VALUES (:link_id, :token_hash, :tenant, :run_id, :step, :request_id, :approver, 'pending', :expires_at,
        :created_at);

-- name: link_by_hash
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE token_hash = :token_hash;

-- name: link_by_id
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE link_id = :link_id;

-- name: links_of_request
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE request_id = :request_id ORDER BY created_at;

-- name: link_consume
UPDATE approval_links SET status = 'used', used_at = :used_at, decision = :decision
WHERE token_hash = :token_hash AND status = 'pending';

-- name: links_revoke
UPDATE approval_links SET status = 'revoked'
WHERE request_id = :request_id AND status = 'pending'
  AND (:approver IS NULL OR approver = :approver) AND (:link_id IS NULL OR link_id = :link_id);

-- name: notification_insert
INSERT INTO notifications (tenant, run_id, request_id, approver, status, available_at, created_at)
VALUES (:tenant, :run_id, :request_id, :approver, 'ready', :now, :now);

-- name: notifications_ready
SELECT id, tenant, run_id, request_id, approver, attempts FROM notifications
WHERE (status = 'ready' AND available_at <= :now) OR (status = 'leased' AND lease_expires_at <= :now)
ORDER BY id LIMIT :limit;

-- name: notification_lease
UPDATE notifications SET status = 'leased', lease_expires_at = :until, attempts = attempts + 1 WHERE id = :id;

-- name: notification_finish
UPDATE notifications SET status = :status, last_error = :error, available_at = :available_at WHERE id = :id;

-- name: users_in_groups
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants FROM users
WHERE tenant = :tenant;

-- name: ready_tenants
WITH RECURSIVE t(tenant) AS (
    SELECT MIN(tenant) FROM tasks WHERE status = 'ready'
    UNION ALL
    SELECT (SELECT MIN(tenant) FROM tasks WHERE status = 'ready' AND tenant > t.tenant) FROM t
    WHERE t.tenant IS NOT NULL
)
SELECT tenant FROM t WHERE tenant IS NOT NULL;

-- name: ready_ids
SELECT task_id FROM tasks
WHERE status = 'ready' AND tenant = :tenant AND queue = :queue AND available_at <= :now
  AND activity IN (SELECT value FROM json_each(:activities))
  AND (:served IS NULL OR definition || ':' || version IN (SELECT value FROM json_each(:served)))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = tasks.run_id AND r.damaged IS NOT NULL)
ORDER BY priority DESC, available_at LIMIT :limit;

-- name: leased_count
SELECT COUNT(*) FROM tasks WHERE status = 'leased' AND tenant = :tenant;

-- name: timer_status
SELECT status FROM timers WHERE run_id = :run_id AND key = :key AND generation = :generation;

-- name: task_dead
UPDATE tasks SET status = 'dead', dead_reason = :reason WHERE task_id = :task_id AND status = 'ready';

-- name: stale_ready
SELECT task_id, run_id, tenant, activity, available_at FROM tasks
WHERE status = 'ready' AND available_at <= :before ORDER BY available_at LIMIT :limit;

-- name: dead_tasks
SELECT task_id, run_id, step, attempt, activity, dead_reason, created_at FROM tasks
WHERE status = 'dead' AND tenant = :tenant ORDER BY created_at DESC LIMIT :limit;

-- name: task_set_lease
UPDATE tasks SET lease_expires_at = MIN(:until, deadline) WHERE task_id = :task_id;

-- name: scheduled_timers
SELECT COUNT(*) FROM timers WHERE tenant = :tenant AND status = 'scheduled';

-- name: user_end_sessions
UPDATE users SET generation = generation + 1 WHERE tenant = :tenant AND name = :name
RETURNING generation;

-- name: sessions_of_user_delete
DELETE FROM sessions WHERE tenant = :tenant AND user = :name;

-- name: login_counters_prune
-- A bounded number per attempt, skipping rows another login holds: pruning never waits or deadlocks.
DELETE FROM login_counters WHERE key IN (
    SELECT key FROM login_counters WHERE expires_at < :now ORDER BY expires_at LIMIT 100
);

-- name: login_counter_ensure
INSERT INTO login_counters (key, attempts, window_start, locked_until, lockouts, expires_at)
VALUES (:key, 0, :now, NULL, 0, :now) ON CONFLICT (key) DO NOTHING;

-- name: login_counter_get
SELECT key, attempts, window_start, locked_until, lockouts FROM login_counters WHERE key = :key;

-- name: login_counter_save
UPDATE login_counters SET attempts = :attempts, window_start = :window_start,
       locked_until = :locked_until, lockouts = :lockouts, expires_at = :expires_at
WHERE key = :key;

-- name: login_counter_delete
DELETE FROM login_counters WHERE key = :key;

-- Retention (sqltx/retention.py): legal holds, tombstones, the purge's candidates and deletes.

-- name: retention_lock_run
SELECT tenant, status FROM runs WHERE run_id = :run_id;

-- name: retention_lock_tenant
SELECT name FROM tenants WHERE name = :name;

-- name: retention_share_tenant
SELECT name FROM tenants WHERE name = :name;

-- name: hold_insert
INSERT INTO holds (tenant, run_id, reason, held_by, held_at)
VALUES (:tenant, :run_id, :reason, :held_by, :held_at) RETURNING id;

-- name: hold_active
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE tenant = :tenant AND COALESCE(run_id, '') = COALESCE(:run_id, '') AND released_at IS NULL;

-- name: hold_release
UPDATE holds SET released_by = :released_by, released_at = :released_at, release_reason = :release_reason
WHERE id = :id AND released_at IS NULL;

-- name: holds_list
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE (:tenant IS NULL OR tenant = :tenant) AND (:active = 0 OR released_at IS NULL)
ORDER BY id DESC LIMIT :limit;

-- name: holds_of_run
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE run_id = :run_id ORDER BY id;

-- name: run_holds_count
SELECT COUNT(*) FROM holds WHERE tenant = :tenant AND run_id IS NOT NULL AND released_at IS NULL;

-- name: purge_candidates
SELECT f.run_id FROM finished_runs f
WHERE f.tenant = :tenant AND f.finished_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL)
ORDER BY f.finished_at, f.run_id LIMIT :limit;

-- name: purge_due_count
SELECT COUNT(*) FROM finished_runs f
WHERE f.tenant = :tenant AND f.finished_at <= :cutoff
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL);

-- name: purge_next_due
SELECT MIN(f.finished_at) FROM finished_runs f
WHERE f.tenant = :tenant AND f.finished_at > :cutoff
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL);

-- name: finished_count
SELECT COUNT(*) FROM finished_runs WHERE tenant = :tenant;

-- name: purge_run_row
SELECT r.tenant, r.definition, r.version, r.status, r.created_at, f.finished_at, r.seq, r.last_hash
FROM runs r JOIN finished_runs f ON f.run_id = r.run_id WHERE r.run_id = :run_id;

-- name: tombstone_insert
INSERT INTO tombstones (run_id, tenant, definition, version, status, started_at, finished_at, events,
                        last_hash, purged_at, purged_by, reason, state)
VALUES (:run_id, :tenant, :definition, :version, :status, :started_at, :finished_at, :events,
        :last_hash, :purged_at, :purged_by, :reason, 'purging');

-- name: finished_run_delete
DELETE FROM finished_runs WHERE run_id = :run_id;

-- name: run_delete
DELETE FROM runs WHERE run_id = :run_id;

-- name: tombstone_get
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones WHERE run_id = :run_id;

-- name: tombstones_list
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones
WHERE (:tenant IS NULL OR tenant = :tenant) AND run_id > :after ORDER BY run_id LIMIT :limit;

-- name: tombstones_purging
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones
WHERE state = 'purging' AND run_id >= :from ORDER BY run_id LIMIT :limit;

-- name: tombstone_counts
SELECT state, COUNT(*) FROM tombstones WHERE tenant = :tenant GROUP BY state;

-- name: tombstone_done
UPDATE tombstones SET state = 'purged', done_at = :done_at WHERE run_id = :run_id AND state = 'purging';

-- name: purge_events
DELETE FROM events WHERE run_id = :run_id
  AND seq IN (SELECT seq FROM events WHERE run_id = :run_id ORDER BY seq LIMIT :limit);

-- name: purge_tasks
-- Every task row of the run: the closed ones through their index by run; then any never closed (a ready
-- or leased row the run no longer refers to), looked for among the open rows, through their indexes.
DELETE FROM tasks WHERE rowid IN (
    SELECT rowid FROM tasks WHERE run_id = :run_id AND status NOT IN ('ready', 'leased')
    UNION ALL SELECT rowid FROM tasks WHERE status = 'ready' AND run_id = :run_id
    UNION ALL SELECT rowid FROM tasks WHERE status = 'leased' AND run_id = :run_id
    LIMIT :limit);

-- name: purge_timers
DELETE FROM timers WHERE rowid IN (SELECT rowid FROM timers WHERE run_id = :run_id LIMIT :limit);

-- name: purge_approval_decisions
DELETE FROM approval_decisions WHERE rowid IN (
    SELECT d.rowid FROM approval_decisions d JOIN approval_requests a ON a.request_id = d.request_id
    WHERE a.run_id = :run_id LIMIT :limit);

-- name: purge_approval_links
DELETE FROM approval_links WHERE rowid IN (SELECT rowid FROM approval_links WHERE run_id = :run_id LIMIT :limit);

-- name: purge_approval_requests
DELETE FROM approval_requests WHERE rowid IN (
    SELECT rowid FROM approval_requests WHERE run_id = :run_id LIMIT :limit);

-- name: purge_notifications
DELETE FROM notifications WHERE rowid IN (SELECT rowid FROM notifications WHERE run_id = :run_id LIMIT :limit);

-- name: purge_holds
DELETE FROM holds WHERE id IN (
    SELECT id FROM holds WHERE run_id = :run_id AND released_at IS NOT NULL LIMIT :limit);

-- name: purge_run_keys
DELETE FROM run_keys WHERE run_id = :run_id;

-- name: tombstones_with_rows
SELECT t.run_id, t.state FROM tombstones t
WHERE (:tenant IS NULL OR t.tenant = :tenant)
  AND (EXISTS (SELECT 1 FROM runs r WHERE r.run_id = t.run_id)
       OR (t.state = 'purged' AND EXISTS (SELECT 1 FROM events e WHERE e.run_id = t.run_id)))
ORDER BY t.run_id LIMIT :limit;

-- name: tenant_keys_of
SELECT tenant, version, wrapped, provider, created_at, retired_at FROM tenant_keys
WHERE tenant = :tenant ORDER BY version;

-- name: tenant_key_insert
INSERT INTO tenant_keys (tenant, version, wrapped, provider, created_at, retired_at)
VALUES (:tenant, :version, :wrapped, :provider, :created_at, NULL) ON CONFLICT (tenant, version) DO NOTHING;

-- name: tenant_keys_retire
UPDATE tenant_keys SET retired_at = :at WHERE tenant = :tenant AND version < :below AND retired_at IS NULL;

-- name: tenant_key_delete_unused
DELETE FROM tenant_keys WHERE tenant = :tenant AND version = :version AND retired_at IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM run_keys WHERE tenant = :tenant AND key_version = :version);

-- name: tenant_keys_delete_all
DELETE FROM tenant_keys WHERE tenant = :tenant;

-- name: tenant_keys_rotating
SELECT tenant, MAX(version) FROM tenant_keys GROUP BY tenant HAVING COUNT(*) > 1 ORDER BY tenant;

-- name: run_key_get
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r LEFT JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.run_id = :run_id;

-- name: run_key_insert
INSERT INTO run_keys (run_id, tenant, key_version, wrapped) VALUES (:run_id, :tenant, :key_version, :wrapped);

-- name: run_key_forget
INSERT INTO run_keys (run_id, tenant, key_version, wrapped, forgotten_at)
VALUES (:run_id, :tenant, NULL, NULL, :at)
ON CONFLICT (run_id) DO UPDATE SET key_version = NULL, wrapped = NULL, forgotten_at = excluded.forgotten_at;

-- name: run_keys_forget_tenant
UPDATE run_keys SET key_version = NULL, wrapped = NULL, forgotten_at = :at
WHERE tenant = :tenant AND forgotten_at IS NULL;

-- name: run_keys_stale
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.tenant = :tenant AND r.key_version < :newest ORDER BY r.run_id LIMIT :limit;

-- name: run_key_rewrap
UPDATE run_keys SET key_version = :new_version, wrapped = :wrapped
WHERE run_id = :run_id AND key_version = :old_version;

-- name: run_key_counts
SELECT key_version, COUNT(*) FROM run_keys WHERE tenant = :tenant GROUP BY key_version ORDER BY key_version;

-- name: run_keys_forgotten_count
SELECT COUNT(*) FROM run_keys WHERE tenant = :tenant AND forgotten_at IS NOT NULL;

-- name: run_keys_get_many
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r LEFT JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.run_id IN (SELECT value FROM json_each(:run_ids));

-- Schedules (issue 18): see migrations/0011_schedules.sql.

-- name: schedule_insert
INSERT INTO schedules (id, tenant, name, definition, version, cron, timezone, input, overlap,
    catch_up, catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
    slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by)
VALUES (:id, :tenant, :name, :definition, :version, :cron, :timezone, :input, :overlap, :catch_up, :catch_up_limit, :status, :paused_reason, :next_at, :generation, :last_slot, :last_run, :runs_started, :slots_skipped, :slots_missed, :created_at, :created_by, :updated_at, :updated_by, :paused_at, :paused_by);

-- name: schedule_get
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE tenant = :tenant AND name = :name;

-- name: schedule_lock
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE tenant = :tenant AND name = :name;

-- name: schedules_of
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules WHERE tenant = :tenant ORDER BY name;

-- name: schedules_count
SELECT COUNT(*) FROM schedules WHERE tenant = :tenant;

-- name: schedules_due
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE status = 'active' AND next_at <= :now ORDER BY next_at LIMIT :limit;

-- name: schedule_update
UPDATE schedules SET name = :name,
    definition = :definition,
    version = :version,
    cron = :cron,
    timezone = :timezone,
    input = :input,
    overlap = :overlap,
    catch_up = :catch_up,
    catch_up_limit = :catch_up_limit,
    status = :status,
    paused_reason = :paused_reason,
    next_at = :next_at,
    generation = :generation,
    last_slot = :last_slot,
    last_run = :last_run,
    runs_started = :runs_started,
    slots_skipped = :slots_skipped,
    slots_missed = :slots_missed,
    updated_at = :updated_at,
    updated_by = :updated_by,
    paused_at = :paused_at,
    paused_by = :paused_by
WHERE id = :id AND generation = :expected;

-- name: schedule_delete
DELETE FROM schedules WHERE id = :id;

-- name: schedule_slots_delete
DELETE FROM schedule_slots WHERE schedule_id = :id;

-- name: schedule_slot_insert
INSERT INTO schedule_slots (schedule_id, slot_at, until_at, count, outcome, started_run, reason, recorded_at)
VALUES (:schedule_id, :slot_at, :until_at, :count, :outcome, :started_run, :reason, :recorded_at);

-- name: schedule_slots_prune
DELETE FROM schedule_slots WHERE schedule_id = :schedule_id AND id <= (
    SELECT id FROM schedule_slots WHERE schedule_id = :schedule_id
    ORDER BY id DESC LIMIT 1 OFFSET :keep);

-- name: schedule_slots_of
SELECT slot_at, outcome, started_run, reason, until_at, count, recorded_at, id FROM schedule_slots
WHERE schedule_id = :schedule_id ORDER BY id DESC LIMIT :limit;

-- name: child_insert
INSERT INTO child_runs (child_run_id, run_id, tenant, step, definition, version, input, start_key, depth,
                        status, available_at, created_at, updated_at)
VALUES (:child_run_id, :run_id, :tenant, :step, :definition, :version, :input, :start_key, :depth,
        'requested', :now, :now, :now)
ON CONFLICT (child_run_id) DO NOTHING;

-- name: child_cancel
UPDATE child_runs SET cancel_reason = :reason, available_at = :now, updated_at = :now
WHERE child_run_id = :child_run_id AND cancel_reason IS NULL;

-- name: child_end
UPDATE child_runs SET status = 'ended', child_status = :child_status, result = :result,
                      available_at = :now, updated_at = :now
WHERE child_run_id = :child_run_id AND status IN ('requested', 'started');

-- name: children_due
SELECT child_run_id, run_id, tenant, step, definition, version, input, start_key, depth, status,
       cancel_reason, cancel_sent, child_status, result, attempts FROM child_runs
WHERE available_at <= :now
  AND (status IN ('requested', 'ended') OR (status = 'started' AND cancel_reason IS NOT NULL AND cancel_sent = 0))
ORDER BY available_at LIMIT :limit;

-- name: child_row
SELECT child_run_id, run_id, tenant, step, definition, version, input, start_key, depth, status,
       cancel_reason, cancel_sent, child_status, result, attempts FROM child_runs
WHERE child_run_id = :child_run_id;

-- name: child_mark
UPDATE child_runs SET status = :status, child_status = COALESCE(:child_status, child_status),
                      result = COALESCE(:result, result), last_error = :error,
                      attempts = attempts + :tried, available_at = :available_at, updated_at = :now
WHERE child_run_id = :child_run_id;

-- name: child_cancel_sent
UPDATE child_runs SET cancel_sent = 1, updated_at = :now WHERE child_run_id = :child_run_id;

-- name: purge_child_runs
DELETE FROM child_runs WHERE rowid IN (SELECT rowid FROM child_runs WHERE run_id = :run_id LIMIT :limit);

-- name: inbox_get
SELECT tenant, event_id, name, key, payload, status, delivered_to, received_at, buffer_until
FROM event_inbox WHERE tenant = :tenant AND event_id = :event_id;

-- name: inbox_insert
INSERT INTO event_inbox (tenant, event_id, name, key, payload, status, delivered_to, received_at,
                         buffer_until, updated_at)
VALUES (:tenant, :event_id, :name, :key, :payload, 'delivering', '[]', :now, NULL, :now)
ON CONFLICT (tenant, event_id) DO NOTHING;

-- name: inbox_delivered_to
UPDATE event_inbox SET delivered_to = :delivered_to, updated_at = :now
WHERE tenant = :tenant AND event_id = :event_id;

-- name: inbox_status
UPDATE event_inbox SET status = :status, buffer_until = :buffer_until, updated_at = :now
WHERE tenant = :tenant AND event_id = :event_id AND status = :was;

-- name: inbox_buffered_count
SELECT COUNT(*) FROM event_inbox WHERE tenant = :tenant AND status = 'buffered' AND buffer_until > :now;

-- name: inbox_expire
UPDATE event_inbox SET status = 'expired', updated_at = :now
WHERE status = 'buffered' AND buffer_until <= :now;

-- name: waits_for
SELECT run_id, step, tenant, name, key, generation, expires_at FROM event_waits
WHERE tenant = :tenant AND name = :name AND key = :key ORDER BY created_at, run_id, step;

-- name: waits_buffered
SELECT w.run_id, w.step, w.tenant, w.name, w.key, w.generation, w.expires_at, i.event_id
FROM event_waits w JOIN event_inbox i
  ON i.tenant = w.tenant AND i.name = w.name AND i.key = w.key
WHERE i.status = 'buffered' AND i.buffer_until > :now
ORDER BY i.received_at, i.event_id, w.created_at, w.run_id LIMIT :limit;

-- name: wait_insert
INSERT INTO event_waits (run_id, step, tenant, name, key, generation, expires_at, created_at)
VALUES (:run_id, :step, :tenant, :name, :key, :generation, :expires_at, :now)
ON CONFLICT (run_id, step) DO UPDATE SET name = excluded.name, key = excluded.key,
    generation = excluded.generation, expires_at = excluded.expires_at, created_at = excluded.created_at;

-- name: wait_delete
DELETE FROM event_waits WHERE run_id = :run_id AND step = :step;

-- name: callbacks_set_status
UPDATE event_callbacks SET status = :status WHERE run_id = :run_id AND step = :step AND status = 'open';

-- name: callback_insert
INSERT INTO event_callbacks (token_hash, callback_id, tenant, run_id, step, generation, expires_at, status,
                             used_at, created_at)
VALUES (:token_hash, :callback_id, :tenant, :run_id, :step, :generation, :expires_at, 'open', NULL, :now);

-- name: callback_get
SELECT token_hash, callback_id, tenant, run_id, step, generation, expires_at, status, used_at
FROM event_callbacks WHERE token_hash = :token_hash;

-- name: callbacks_of_run
SELECT token_hash, callback_id, tenant, run_id, step, generation, expires_at, status, used_at
FROM event_callbacks WHERE run_id = :run_id ORDER BY created_at, callback_id;

-- name: callback_use
UPDATE event_callbacks SET status = 'used', used_at = :now WHERE token_hash = :token_hash AND status = 'open';

-- name: integration_get
SELECT secret FROM integrations WHERE tenant = :tenant AND name = :name;

-- name: integration_put
INSERT INTO integrations (tenant, name, secret, created_at, updated_at)
VALUES (:tenant, :name, :secret, :now, :now)
ON CONFLICT (tenant, name) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at;

-- name: integration_names
SELECT name, created_at, updated_at FROM integrations WHERE tenant = :tenant ORDER BY name;

-- name: purge_event_waits
DELETE FROM event_waits WHERE rowid IN (SELECT rowid FROM event_waits WHERE run_id = :run_id LIMIT :limit);

-- name: purge_event_callbacks
DELETE FROM event_callbacks WHERE rowid IN (
    SELECT rowid FROM event_callbacks WHERE run_id = :run_id LIMIT :limit);

-- name: purge_event_inbox
-- The events a purged run received stay (their ids answer replays), without naming the run.
UPDATE event_inbox SET delivered_to = REPLACE(delivered_to, '"' || :run_id || '"', '"purged"')
WHERE delivered_to LIKE '%' || :run_id || '%';

-- name: inbox_stalled
SELECT tenant, event_id, name, key, payload, status, delivered_to, received_at, buffer_until
FROM event_inbox WHERE status = 'delivering' AND updated_at <= :before ORDER BY updated_at LIMIT :limit;

-- --- run webhooks (sqltx/webhooks.py) ----------------------------------------------------------------

-- name: webhook_sub_insert
INSERT INTO webhook_subscriptions (id, tenant, url, events, secret, enabled, created_by, created_at)
VALUES (:id, :tenant, :url, :events, :secret, 1, :created_by, :now);

-- name: webhook_subs_list
SELECT id, tenant, url, events, secret, enabled, created_by, created_at FROM webhook_subscriptions
WHERE tenant = :tenant ORDER BY created_at, id;

-- name: webhook_sub_get
SELECT id, tenant, url, events, secret, enabled, created_by, created_at FROM webhook_subscriptions
WHERE tenant = :tenant AND id = :id;

-- name: webhook_sub_enable
UPDATE webhook_subscriptions SET enabled = :enabled WHERE tenant = :tenant AND id = :id;

-- name: webhook_deliveries_insert
INSERT INTO webhook_deliveries (id, subscription, tenant, run_id, seq, event, body, status, available_at,
                                created_at)
SELECT 'msg_' || s.id || '_' || :suffix, s.id, s.tenant, :run_id, :seq, :event, :body, 'pending', :now, :now
FROM webhook_subscriptions s
WHERE s.tenant = :tenant AND s.enabled = 1 AND s.events LIKE :pattern
ON CONFLICT (id) DO NOTHING;

-- name: webhook_due
SELECT d.id, d.subscription, d.tenant, d.run_id, d.seq, d.event, d.body, d.attempts, s.url, s.secret
FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription
WHERE d.status = 'pending' AND d.available_at <= :now
  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                  WHERE e.run_id = d.run_id AND e.subscription = d.subscription
                    AND e.status = 'pending' AND e.seq < d.seq)
ORDER BY d.available_at, d.run_id, d.seq LIMIT :limit;

-- name: webhook_claim
UPDATE webhook_deliveries SET attempts = attempts + 1, available_at = :until
WHERE id = :id AND status = 'pending' AND available_at <= :now;

-- name: webhook_mark
UPDATE webhook_deliveries SET status = :status, last_status = :last_status, last_error = :error,
                              available_at = :available_at, delivered_at = :delivered_at
WHERE id = :id;

-- name: webhook_deliveries_list
SELECT id, subscription, tenant, run_id, seq, event, body, status, attempts, last_status, last_error,
       available_at, created_at, delivered_at FROM webhook_deliveries
WHERE tenant = :tenant AND subscription = :subscription ORDER BY created_at DESC, id DESC LIMIT :limit;

-- name: webhook_delivery_get
SELECT id, subscription, tenant, run_id, seq, event, body, status, attempts, last_status, last_error,
       available_at, created_at, delivered_at FROM webhook_deliveries
WHERE tenant = :tenant AND subscription = :subscription AND id = :id;

-- name: webhook_replay
UPDATE webhook_deliveries SET status = 'pending', available_at = :now, delivered_at = NULL
WHERE tenant = :tenant AND subscription = :subscription AND id = :id;

-- name: purge_webhook_deliveries
DELETE FROM webhook_deliveries WHERE rowid IN (
    SELECT rowid FROM webhook_deliveries WHERE run_id = :run_id LIMIT :limit);
-- Secrets and egress policies (issue 19): see migrations/0014_secrets_egress.sql.

-- name: secret_versions
SELECT tenant, name, version, key_id, sealed, created_at, created_by FROM secrets
WHERE tenant = :tenant AND name = :name ORDER BY version;

-- name: secrets_of
SELECT tenant, name, version, key_id, sealed, created_at, created_by FROM secrets
WHERE tenant = :tenant ORDER BY name, version;

-- name: secret_insert
INSERT INTO secrets (tenant, name, version, key_id, sealed, created_at, created_by)
VALUES (:tenant, :name, :version, :key_id, :sealed, :created_at, :created_by);

-- name: secret_delete_all
DELETE FROM secrets WHERE tenant = :tenant AND name = :name;

-- name: secret_delete_version
DELETE FROM secrets WHERE tenant = :tenant AND name = :name AND version = :version;

-- name: egress_get
SELECT tenant, policy, updated_at, updated_by FROM egress_policies WHERE tenant = :tenant;

-- name: egress_set
INSERT INTO egress_policies (tenant, policy, updated_at, updated_by)
VALUES (:tenant, :policy, :updated_at, :updated_by)
ON CONFLICT (tenant) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by;

-- Migrations that need approval (sqltx/migrations.py).
-- name: migration_request_insert
INSERT INTO migration_requests (request_id, tenant, definition, from_version, to_version, mapping, reason,
    requested_by, policy, bulk, status, created_at, expires_at)
VALUES (:request_id, :tenant, :definition, :from_version, :to_version, :mapping, :reason, :requested_by,
    :policy, :bulk, 'pending', :created_at, :expires_at);

-- name: migration_run_insert
-- Nothing when the run is in another open request already (the partial unique index): the caller refuses.
INSERT INTO migration_request_runs (request_id, run_id, tenant, open) VALUES (:request_id, :run_id, :tenant, 1)
ON CONFLICT DO NOTHING;

-- name: migration_open_for_run
SELECT request_id FROM migration_request_runs WHERE run_id = :run_id AND open = 1;

-- name: migration_request_get
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = :tenant AND request_id = :request_id;

-- name: migration_request_lock
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = :tenant AND request_id = :request_id;

-- name: migration_requests_list
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = :tenant AND (:status IS NULL OR status = :status)
ORDER BY created_at DESC, request_id LIMIT :limit;

-- name: migration_runs_of
SELECT request_id, run_id, outcome, detail, at FROM migration_request_runs WHERE request_id = :request_id
ORDER BY run_id;

-- name: migration_run_lock
SELECT request_id, run_id, outcome, detail, at FROM migration_request_runs
WHERE request_id = :request_id AND run_id = :run_id;

-- name: migration_run_outcome
UPDATE migration_request_runs SET outcome = :outcome, detail = :detail, at = :at, open = NULL
WHERE request_id = :request_id AND run_id = :run_id AND outcome IS NULL;

-- name: migration_runs_close
UPDATE migration_request_runs SET outcome = :outcome, at = :at, open = NULL
WHERE request_id = :request_id AND outcome IS NULL;

-- name: migration_decisions_of
SELECT approver, decision, comment, at, roles, groups_ FROM migration_decisions WHERE request_id = :request_id
ORDER BY at, approver;

-- name: migration_decision_insert
INSERT INTO migration_decisions (request_id, approver, decision, comment, at, roles, groups_)
VALUES (:request_id, :approver, :decision, :comment, :at, :roles, :groups) ON CONFLICT DO NOTHING;

-- name: migration_request_status
UPDATE migration_requests SET status = :status, decided_at = COALESCE(:decided_at, decided_at),
    applied_at = COALESCE(:applied_at, applied_at)
WHERE request_id = :request_id AND status = :from_status;

-- name: migration_due
-- Pending requests past their expiry, and approved ones whose runs a pass still has to migrate.
SELECT tenant, request_id FROM migration_requests
WHERE (status = 'pending' AND expires_at <= :now) OR status = 'approved'
ORDER BY created_at, request_id LIMIT :limit;

-- name: purge_migration_request_runs
DELETE FROM migration_request_runs WHERE rowid IN (
    SELECT rowid FROM migration_request_runs WHERE run_id = :run_id LIMIT :limit);

-- name: purge_migration_decisions
-- A request's decisions and the request itself go with the purge of its last run (sqltx/retention.py).
DELETE FROM migration_decisions WHERE request_id IN (
    SELECT m.request_id FROM migration_request_runs m WHERE m.run_id = :run_id
    AND NOT EXISTS (SELECT 1 FROM migration_request_runs o WHERE o.request_id = m.request_id AND o.run_id <> :run_id)
    LIMIT :limit);

-- name: purge_migration_requests
DELETE FROM migration_requests WHERE request_id IN (
    SELECT m.request_id FROM migration_request_runs m WHERE m.run_id = :run_id
    AND NOT EXISTS (SELECT 1 FROM migration_request_runs o WHERE o.request_id = m.request_id AND o.run_id <> :run_id)
    LIMIT :limit);

-- name: runs_search
-- The UI's runs list (store/port/search.py): newest first below a cursor; each filter is off when NULL.
SELECT snapshot FROM runs
WHERE tenant = :tenant AND run_id < :before
  AND (:status IS NULL OR status = :status)
  AND (:definition IS NULL OR definition = :definition)
  AND (:version IS NULL OR version = :version)
  AND (:low IS NULL OR (run_id >= :low AND run_id < :high))
  AND (:start_key IS NULL OR start_key = :start_key)
  AND (:since IS NULL OR created_at >= :since)
  AND (:until IS NULL OR created_at < :until)
ORDER BY run_id DESC LIMIT :limit;

-- name: runs_search_input
-- runs_search with an input field equal to a value (text, or a number or boolean as JSON writes it); a
-- sealed value is an object and never matches. Its own statement, so no other search parses snapshots.
SELECT snapshot FROM runs
WHERE tenant = :tenant AND run_id < :before
  AND (:status IS NULL OR status = :status)
  AND (:definition IS NULL OR definition = :definition)
  AND (:version IS NULL OR version = :version)
  AND (:low IS NULL OR (run_id >= :low AND run_id < :high))
  AND (:start_key IS NULL OR start_key = :start_key)
  AND (:since IS NULL OR created_at >= :since)
  AND (:until IS NULL OR created_at < :until)
  AND (CASE json_type(snapshot, :path)
         WHEN 'text' THEN json_extract(snapshot, :path)
         WHEN 'integer' THEN CAST(json_extract(snapshot, :path) AS TEXT)
         WHEN 'real' THEN CAST(json_extract(snapshot, :path) AS TEXT)
         WHEN 'true' THEN 'true'
         WHEN 'false' THEN 'false'
       END) = :value
ORDER BY run_id DESC LIMIT :limit;

-- name: run_counts
SELECT version, status, COUNT(*) FROM runs WHERE tenant = :tenant AND definition = :definition
GROUP BY version, status ORDER BY version, status;
