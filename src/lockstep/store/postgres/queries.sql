-- Named queries for the PostgreSQL adapter (psycopg named parameters). Each block starts with `-- name: NAME`.

-- name: definition_latest
SELECT version, digest, document FROM definitions
WHERE tenant = %(tenant)s AND name = %(name)s ORDER BY version DESC LIMIT 1;

-- name: definition_by_version
SELECT version, digest, document FROM definitions
WHERE tenant = %(tenant)s AND name = %(name)s AND version = %(version)s;

-- name: definition_by_digest
SELECT version, digest, document FROM definitions
WHERE tenant = %(tenant)s AND name = %(name)s AND digest = %(digest)s;

-- name: definition_insert
INSERT INTO definitions (tenant, name, version, digest, document, created_at)
VALUES (%(tenant)s, %(name)s, %(version)s, %(digest)s, %(document)s, %(created_at)s);

-- name: definitions_list
SELECT name, version, digest, created_at FROM definitions
WHERE tenant = %(tenant)s ORDER BY name, version;

-- name: run_load
SELECT tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = %(run_id)s;

-- name: run_load_for_update
SELECT tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = %(run_id)s FOR UPDATE;

-- name: runs_load_for_update
SELECT run_id, tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = ANY(%(run_ids)s)
ORDER BY run_id FOR UPDATE;

-- name: runs_load_skip_locked_many
SELECT run_id, tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = ANY(%(run_ids)s)
ORDER BY run_id FOR UPDATE SKIP LOCKED;

-- name: runs_to_scrub
-- The next unmarked runs after a cursor, in run-id order (the primary key): the scrub's round robin.
SELECT run_id, tenant FROM runs WHERE run_id > %(after)s AND damaged IS NULL ORDER BY run_id
LIMIT %(limit)s;

-- name: run_mark_damaged
UPDATE runs SET damaged = %(damaged)s WHERE run_id = %(run_id)s AND damaged IS NULL;

-- name: run_by_key
SELECT run_id, request_digest FROM runs WHERE tenant = %(tenant)s AND start_key = %(start_key)s;

-- name: runs_with_prefix
-- A range on the primary key (run ids are lowercase hex): the ids in [prefix, prefix + "g").
SELECT run_id FROM runs WHERE run_id >= %(low)s AND run_id < %(high)s AND tenant = %(tenant)s
ORDER BY run_id LIMIT %(limit)s;

-- name: run_insert
INSERT INTO runs (run_id, tenant, definition, version, status, seq, current_step, snapshot, last_hash,
                  start_key, request_digest, created_at, updated_at, wait_kind)
VALUES (%(run_id)s, %(tenant)s, %(definition)s, %(version)s, %(status)s, %(seq)s, %(current_step)s, %(snapshot)s, %(last_hash)s,
        %(start_key)s, %(request_digest)s, %(created_at)s, %(updated_at)s, %(wait_kind)s);

-- name: run_update
UPDATE runs SET status = %(status)s, seq = %(seq)s, current_step = %(current_step)s, snapshot = %(snapshot)s,
                last_hash = %(last_hash)s, updated_at = %(updated_at)s, wait_kind = %(wait_kind)s
WHERE run_id = %(run_id)s AND seq = %(expected_seq)s;

-- name: runs_list
SELECT snapshot FROM runs
WHERE tenant = %(tenant)s AND (CAST(%(status)s AS TEXT) IS NULL OR status = %(status)s)
  AND (CAST(%(definition)s AS TEXT) IS NULL OR definition = %(definition)s) AND run_id > %(after)s
ORDER BY run_id LIMIT %(limit)s;

-- name: runs_list_desc
SELECT snapshot FROM runs
WHERE tenant = %(tenant)s AND (CAST(%(status)s AS TEXT) IS NULL OR status = %(status)s)
  AND (CAST(%(definition)s AS TEXT) IS NULL OR definition = %(definition)s) AND run_id < %(before)s
ORDER BY run_id DESC LIMIT %(limit)s;

-- name: runs_all_ids
SELECT run_id FROM runs WHERE (CAST(%(tenant)s AS TEXT) IS NULL OR tenant = %(tenant)s) ORDER BY run_id;

-- name: event_insert
INSERT INTO events (run_id, seq, type, at, v, data, hash)
VALUES (%(run_id)s, %(seq)s, %(type)s, %(at)s, %(v)s, %(data)s, %(hash)s);

-- name: events_of_run
SELECT seq, type, at, v, data, hash FROM events WHERE run_id = %(run_id)s ORDER BY seq;

-- name: task_insert
INSERT INTO tasks (task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key,
                   definition, version, delivery, timeout_ms, priority, status, available_at, created_at)
VALUES (%(task_id)s, %(tenant)s, %(run_id)s, %(step)s, %(attempt)s, %(kind)s, %(activity)s, %(queue)s, %(input)s, %(idempotency_key)s,
        %(definition)s, %(version)s, %(delivery)s, %(timeout_ms)s, %(priority)s, 'ready', %(now)s, %(now)s);

-- name: task_insert_leased
INSERT INTO tasks (task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key,
                   definition, version, delivery, timeout_ms, priority, status, available_at, created_at,
                   fencing, lease_owner, lease_expires_at, deadline)
VALUES (%(task_id)s, %(tenant)s, %(run_id)s, %(step)s, %(attempt)s, %(kind)s, %(activity)s, %(queue)s, %(input)s, %(idempotency_key)s,
        %(definition)s, %(version)s, %(delivery)s, %(timeout_ms)s, %(priority)s, 'leased', %(now)s, %(now)s,
        %(fencing)s, %(worker)s, %(lease_expires_at)s, %(deadline)s);

-- name: task_lease
UPDATE tasks SET status = 'leased', fencing = %(fencing)s, lease_owner = %(worker)s,
                 lease_expires_at = %(lease_expires_at)s, deadline = %(deadline)s
WHERE task_id = %(task_id)s AND status = 'ready';

-- name: task_close
UPDATE tasks SET status = %(status)s WHERE task_id = %(task_id)s AND status IN ('ready', 'leased');

-- name: task_get
SELECT task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key, definition,
       version, delivery, timeout_ms, status, fencing, lease_owner, lease_expires_at, deadline
FROM tasks WHERE task_id = %(task_id)s;

-- name: tasks_get_many
SELECT task_id, tenant, run_id, step, attempt, kind, activity, queue, input, idempotency_key, definition,
       version, delivery, timeout_ms, status, fencing, lease_owner, lease_expires_at, deadline
FROM tasks WHERE task_id = ANY(%(task_ids)s);

-- name: task_heartbeat
UPDATE tasks SET lease_expires_at = LEAST(%(lease_until)s, deadline)
WHERE task_id = %(task_id)s AND fencing = %(fencing)s AND status = 'leased';

-- name: leases_abandon
UPDATE tasks SET lease_expires_at = %(now)s
WHERE status = 'leased' AND lease_owner = %(owner)s AND lease_expires_at > %(now)s
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s);

-- name: timer_insert
INSERT INTO timers (run_id, key, generation, tenant, fire_at, status)
VALUES (%(run_id)s, %(key)s, %(generation)s, %(tenant)s, %(fire_at)s, 'scheduled');

-- name: timer_close
UPDATE timers SET status = %(status)s
WHERE run_id = %(run_id)s AND key = %(key)s AND generation = %(generation)s AND status = 'scheduled';

-- name: timers_due
SELECT run_id, key, generation FROM timers
WHERE status = 'scheduled' AND fire_at <= %(now)s
  AND (CAST(%(partitions)s AS INTEGER[]) IS NULL OR part = ANY(%(partitions)s))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = timers.run_id AND r.damaged IS NOT NULL)
ORDER BY fire_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: leases_expired
SELECT task_id, run_id, attempt, fencing, lease_owner, deadline FROM tasks
WHERE status = 'leased' AND lease_expires_at <= %(now)s
  AND (CAST(%(partitions)s AS INTEGER[]) IS NULL OR part = ANY(%(partitions)s))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = tasks.run_id AND r.damaged IS NOT NULL)
ORDER BY lease_expires_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

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
SELECT name, settings, bucket_tokens, bucket_at_ms, created_at FROM tenants WHERE name = %(name)s;

-- name: tenant_insert
INSERT INTO tenants (name, settings, created_at) VALUES (%(name)s, %(settings)s, %(created_at)s);

-- name: tenant_insert_default
-- The default tenant's row, made by its first audited action (sqltx/audit.py); two at once: one row.
INSERT INTO tenants (name, settings, created_at) VALUES (%(name)s, '{}', %(created_at)s) ON CONFLICT (name) DO NOTHING;

-- name: tenant_update_settings
UPDATE tenants SET settings = %(settings)s WHERE name = %(name)s;

-- name: tenant_update_bucket
UPDATE tenants SET bucket_tokens = %(tokens)s, bucket_at_ms = %(at_ms)s WHERE name = %(name)s;

-- name: tenants_list
SELECT name, settings, bucket_tokens, bucket_at_ms, created_at FROM tenants ORDER BY name;

-- name: user_get
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: user_by_key
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE key_hash = %(key_hash)s;

-- name: user_insert
INSERT INTO users (tenant, name, roles, groups, key_hash, password_hash, disabled, created_at)
VALUES (%(tenant)s, %(name)s, %(roles)s, %(groups)s, %(key_hash)s, NULL, 0, %(created_at)s);

-- name: user_update
UPDATE users SET roles = %(roles)s, groups = %(groups)s, key_hash = %(key_hash)s, password_hash = %(password_hash)s,
                 disabled = %(disabled)s, email = %(email)s, grants = %(grants)s
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: users_list
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants
FROM users WHERE tenant = %(tenant)s ORDER BY name;

-- name: session_insert
INSERT INTO sessions (id_hash, tenant, "user", csrf, created_at, expires_at, generation)
VALUES (%(id_hash)s, %(tenant)s, %(user)s, %(csrf)s, %(created_at)s, %(expires_at)s, %(generation)s);

-- name: session_get
SELECT tenant, "user", csrf, expires_at, generation FROM sessions WHERE id_hash = %(id_hash)s;

-- name: session_delete
DELETE FROM sessions WHERE id_hash = %(id_hash)s OR expires_at < %(now)s;

-- name: audit_tenant_exists
SELECT 1 FROM tenants WHERE name = %(name)s;

-- name: audit_chain_lock
-- The chain's head, created at GENESIS if it is new, and locked to the end of the transaction (an
-- upsert's DO UPDATE locks the row): one writer per chain at a time, in commit order.
INSERT INTO audit_chains (chain, rows, last_id, last_hash) VALUES (%(chain)s, 0, NULL, %(genesis)s)
ON CONFLICT (chain) DO UPDATE SET chain = excluded.chain
RETURNING rows, last_hash;

-- name: audit_insert
INSERT INTO audit (at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash)
VALUES (%(at)s, %(tenant)s, %(actor)s, %(action)s, %(target)s, %(outcome)s, %(detail)s, %(seq)s, %(prev_hash)s, %(hash)s);

-- name: audit_chain_advance
UPDATE audit_chains SET rows = %(seq)s, last_id = currval(pg_get_serial_sequence('audit', 'id')), last_hash = %(hash)s
WHERE chain = %(chain)s;

-- name: audit_page
-- One page of a tenant's rows, newest first, below the cursor `before` (an id), with the filters set.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant = %(tenant)s AND id < %(before)s
  AND (%(actor)s::text IS NULL OR actor = %(actor)s)
  AND (%(action)s::text IS NULL OR action = %(action)s)
  AND (%(prefix_lo)s::text IS NULL OR (action >= %(prefix_lo)s AND action < %(prefix_hi)s))
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s)
  AND (%(since)s::text IS NULL OR at >= %(since)s)
  AND (%(until)s::text IS NULL OR at < %(until)s)
ORDER BY id DESC LIMIT %(limit)s;

-- name: audit_page_untenanted
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant IS NULL AND id < %(before)s
  AND (%(actor)s::text IS NULL OR actor = %(actor)s)
  AND (%(action)s::text IS NULL OR action = %(action)s)
  AND (%(prefix_lo)s::text IS NULL OR (action >= %(prefix_lo)s AND action < %(prefix_hi)s))
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s)
  AND (%(since)s::text IS NULL OR at >= %(since)s)
  AND (%(until)s::text IS NULL OR at < %(until)s)
ORDER BY id DESC LIMIT %(limit)s;

-- name: audit_snapshot
-- Called first in a read (reads run in autocommit): a transaction of its own, so that every later read
-- sees the same snapshot (SQLite's reads do); the read's end rolls it back.
BEGIN ISOLATION LEVEL REPEATABLE READ;

-- name: audit_heads
SELECT chain, rows, last_id, last_hash FROM audit_chains ORDER BY chain;

-- name: audit_head
SELECT chain, rows, last_id, last_hash FROM audit_chains WHERE chain = %(chain)s;

-- name: audit_row_tenants
SELECT DISTINCT coalesce(tenant, '') FROM audit;

-- name: audit_chain_rows
-- A chain's rows in id order, after `after`.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE tenant = %(tenant)s AND id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: audit_chain_rows_untenanted
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit
WHERE (tenant IS NULL OR tenant = '') AND id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: audit_unchained
-- Rows written before the chain existed (migration audit_chain), in id order.
SELECT id, at, tenant, actor, action, target, outcome, detail, seq, prev_hash, hash FROM audit WHERE hash IS NULL AND id > %(after)s ORDER BY id LIMIT %(limit)s;

-- name: audit_chain_legacy
UPDATE audit SET seq = %(seq)s, prev_hash = %(prev_hash)s, hash = %(hash)s WHERE id = %(id)s AND hash IS NULL;

-- name: audit_chain_set_head
INSERT INTO audit_chains (chain, rows, last_id, last_hash) VALUES (%(chain)s, %(rows)s, %(last_id)s, %(last_hash)s)
ON CONFLICT (chain) DO UPDATE SET rows = excluded.rows, last_id = excluded.last_id, last_hash = excluded.last_hash;

-- name: active_runs_count
SELECT COUNT(*) FROM runs WHERE tenant = %(tenant)s AND status NOT IN ('completed', 'failed', 'cancelled');

-- name: runs_by_status
SELECT tenant, status, COUNT(*) FROM runs GROUP BY tenant, status;

-- name: queue_stats
SELECT tenant, activity, COUNT(*), MIN(available_at) FROM tasks WHERE status = 'ready' GROUP BY tenant, activity;

-- name: timer_lag
SELECT tenant, MIN(fire_at), COUNT(*) FROM timers WHERE status = 'scheduled' AND fire_at <= %(now)s GROUP BY tenant;

-- name: runs_at_step
SELECT tenant, definition, current_step, wait_kind, COUNT(*) FROM runs
WHERE status NOT IN ('completed', 'failed', 'cancelled')
GROUP BY tenant, definition, current_step, wait_kind;

-- name: approvals_waiting
SELECT tenant, COUNT(*), MIN(created_at) FROM approval_requests WHERE status = 'pending' GROUP BY tenant;

-- name: lease_stats
SELECT tenant, COUNT(*), SUM(CASE WHEN lease_expires_at <= %(soon)s THEN 1 ELSE 0 END),
       SUM(CASE WHEN lease_expires_at <= %(now)s THEN 1 ELSE 0 END)
FROM tasks WHERE status = 'leased' GROUP BY tenant;

-- name: approval_request_insert
INSERT INTO approval_requests (request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status,
                               expires_at, created_at)
VALUES (%(request_id)s, %(tenant)s, %(run_id)s, %(step)s, %(users)s, %(groups)s, %(initiator)s, %(allow_initiator)s, 'pending',
        %(expires_at)s, %(created_at)s);

-- name: approval_request_users
UPDATE approval_requests SET users = %(users)s WHERE request_id = %(request_id)s;

-- name: approval_request_get
SELECT request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status, expires_at, created_at
FROM approval_requests WHERE request_id = %(request_id)s;

-- name: approval_request_close
UPDATE approval_requests SET status = %(status)s WHERE request_id = %(request_id)s AND status = 'pending';

-- name: approval_requests_pending
SELECT request_id, tenant, run_id, step, users, groups, initiator, allow_initiator, status, expires_at, created_at
FROM approval_requests WHERE tenant = %(tenant)s AND status = 'pending' ORDER BY created_at;

-- name: approval_decision_insert
INSERT INTO approval_decisions (request_id, approver, decision, link_id, at)
VALUES (%(request_id)s, %(approver)s, %(decision)s, %(link_id)s, %(at)s);

-- name: approval_decision_get
SELECT decision, link_id, at FROM approval_decisions WHERE request_id = %(request_id)s AND approver = %(approver)s;

-- name: link_insert
INSERT INTO approval_links (link_id, token_hash, tenant, run_id, step, request_id, approver, status, expires_at,
                            created_at)
VALUES (%(link_id)s, %(token_hash)s, %(tenant)s, %(run_id)s, %(step)s, %(request_id)s, %(approver)s, 'pending', %(expires_at)s,
        %(created_at)s);

-- name: link_by_hash
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE token_hash = %(token_hash)s;

-- name: link_by_id
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE link_id = %(link_id)s;

-- name: links_of_request
SELECT link_id, tenant, run_id, step, request_id, approver, status, expires_at, created_at, used_at, decision
FROM approval_links WHERE request_id = %(request_id)s ORDER BY created_at;

-- name: link_consume
UPDATE approval_links SET status = 'used', used_at = %(used_at)s, decision = %(decision)s
WHERE token_hash = %(token_hash)s AND status = 'pending';

-- name: links_revoke
UPDATE approval_links SET status = 'revoked'
WHERE request_id = %(request_id)s AND status = 'pending'
  AND (CAST(%(approver)s AS TEXT) IS NULL OR approver = %(approver)s) AND (CAST(%(link_id)s AS TEXT) IS NULL OR link_id = %(link_id)s);

-- name: notification_insert
INSERT INTO notifications (tenant, run_id, request_id, approver, status, available_at, created_at)
VALUES (%(tenant)s, %(run_id)s, %(request_id)s, %(approver)s, 'ready', %(now)s, %(now)s);

-- name: notifications_ready
SELECT id, tenant, run_id, request_id, approver, attempts FROM notifications
WHERE (status = 'ready' AND available_at <= %(now)s) OR (status = 'leased' AND lease_expires_at <= %(now)s)
ORDER BY id LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: notification_lease
UPDATE notifications SET status = 'leased', lease_expires_at = %(until)s, attempts = attempts + 1 WHERE id = %(id)s;

-- name: notification_finish
UPDATE notifications SET status = %(status)s, last_error = %(error)s, available_at = %(available_at)s WHERE id = %(id)s;

-- name: users_in_groups
SELECT tenant, name, roles, groups, key_hash, password_hash, disabled, created_at, email, generation, grants FROM users
WHERE tenant = %(tenant)s;

-- name: run_load_skip_locked
SELECT tenant, snapshot, last_hash, seq, damaged FROM runs WHERE run_id = %(run_id)s FOR UPDATE SKIP LOCKED;

-- name: run_exists
SELECT 1 FROM runs WHERE run_id = %(run_id)s;

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
WHERE status = 'ready' AND tenant = %(tenant)s AND queue = %(queue)s AND available_at <= %(now)s
  AND activity = ANY(%(activities)s)
  AND (CAST(%(served)s AS TEXT[]) IS NULL OR definition || ':' || version = ANY(%(served)s))
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = tasks.run_id AND r.damaged IS NOT NULL)
ORDER BY priority DESC, available_at LIMIT %(limit)s;

-- name: leased_count
SELECT COUNT(*) FROM tasks WHERE status = 'leased' AND tenant = %(tenant)s;

-- name: tenant_lock
SELECT name FROM tenants WHERE name = %(name)s FOR UPDATE;

-- name: timer_status
SELECT status FROM timers WHERE run_id = %(run_id)s AND key = %(key)s AND generation = %(generation)s;

-- name: task_dead
UPDATE tasks SET status = 'dead', dead_reason = %(reason)s WHERE task_id = %(task_id)s AND status = 'ready';

-- name: stale_ready
SELECT task_id, run_id, tenant, activity, available_at FROM tasks
WHERE status = 'ready' AND available_at <= %(before)s ORDER BY available_at LIMIT %(limit)s;

-- name: dead_tasks
SELECT task_id, run_id, step, attempt, activity, dead_reason, created_at FROM tasks
WHERE status = 'dead' AND tenant = %(tenant)s ORDER BY created_at DESC LIMIT %(limit)s;

-- name: partitions_renew
UPDATE scheduler_leases SET expires_at = %(until)s WHERE owner = %(owner)s RETURNING part;

-- name: member_renew
INSERT INTO scheduler_members (owner, expires_at) VALUES (%(owner)s, %(until)s)
ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at;

-- name: members_prune
DELETE FROM scheduler_members WHERE owner IN (
    SELECT owner FROM scheduler_members WHERE expires_at < %(now)s FOR UPDATE SKIP LOCKED);

-- name: partitions_live_owners
SELECT COUNT(*) FROM scheduler_members WHERE expires_at > %(now)s AND owner <> %(owner)s;

-- name: partitions_take
INSERT INTO scheduler_leases (part, owner, expires_at)
SELECT p, %(owner)s, %(until)s FROM generate_series(0, 63) AS p
WHERE p = ANY(%(wanted)s)
ON CONFLICT (part) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
WHERE scheduler_leases.expires_at < %(now)s
RETURNING part;

-- name: partitions_free
SELECT p FROM generate_series(0, 63) AS p
WHERE NOT EXISTS (SELECT 1 FROM scheduler_leases l WHERE l.part = p AND l.expires_at >= %(now)s);

-- name: partitions_release
DELETE FROM scheduler_leases WHERE owner = %(owner)s AND part = ANY(%(parts)s);

-- name: task_set_lease
UPDATE tasks SET lease_expires_at = LEAST(%(until)s, deadline) WHERE task_id = %(task_id)s;

-- name: scheduled_timers
SELECT COUNT(*) FROM timers WHERE tenant = %(tenant)s AND status = 'scheduled';

-- name: notify_tasks
NOTIFY lockstep_tasks;

-- name: notify_timers
NOTIFY lockstep_timers;

-- name: user_end_sessions
UPDATE users SET generation = generation + 1 WHERE tenant = %(tenant)s AND name = %(name)s
RETURNING generation;

-- name: sessions_of_user_delete
DELETE FROM sessions WHERE tenant = %(tenant)s AND "user" = %(name)s;

-- name: login_counters_prune
-- A bounded number per attempt, skipping rows another login holds: pruning never waits or deadlocks.
DELETE FROM login_counters WHERE key IN (
    SELECT key FROM login_counters WHERE expires_at < %(now)s ORDER BY expires_at LIMIT 100 FOR UPDATE SKIP LOCKED
);

-- name: login_counter_ensure
INSERT INTO login_counters (key, attempts, window_start, locked_until, lockouts, expires_at)
VALUES (%(key)s, 0, %(now)s, NULL, 0, %(now)s) ON CONFLICT (key) DO NOTHING;

-- name: login_counter_get
SELECT key, attempts, window_start, locked_until, lockouts FROM login_counters WHERE key = %(key)s FOR UPDATE;

-- name: login_counter_save
UPDATE login_counters SET attempts = %(attempts)s, window_start = %(window_start)s,
       locked_until = %(locked_until)s, lockouts = %(lockouts)s, expires_at = %(expires_at)s
WHERE key = %(key)s;

-- name: login_counter_delete
DELETE FROM login_counters WHERE key = %(key)s;

-- Retention (sqltx/retention.py): legal holds, tombstones, the purge's candidates and deletes. A hold
-- locks what it holds (the run row, or the tenant row FOR UPDATE); the purge locks each run it
-- tombstones (FOR UPDATE SKIP LOCKED) and shares the tenant row (FOR KEY SHARE: starts, which update
-- the tenant's bucket, never wait for it), so a hold and a purge of the same run never both commit.

-- name: retention_lock_run
SELECT tenant, status FROM runs WHERE run_id = %(run_id)s FOR UPDATE;

-- name: retention_lock_tenant
SELECT name FROM tenants WHERE name = %(name)s FOR UPDATE;

-- name: retention_share_tenant
SELECT name FROM tenants WHERE name = %(name)s FOR KEY SHARE;

-- name: hold_insert
INSERT INTO holds (tenant, run_id, reason, held_by, held_at)
VALUES (%(tenant)s, %(run_id)s, %(reason)s, %(held_by)s, %(held_at)s) RETURNING id;

-- name: hold_active
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE tenant = %(tenant)s AND COALESCE(run_id, '') = COALESCE(CAST(%(run_id)s AS TEXT), '')
  AND released_at IS NULL;

-- name: hold_release
UPDATE holds SET released_by = %(released_by)s, released_at = %(released_at)s, release_reason = %(release_reason)s
WHERE id = %(id)s AND released_at IS NULL;

-- name: holds_list
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE (CAST(%(tenant)s AS TEXT) IS NULL OR tenant = %(tenant)s) AND (%(active)s = 0 OR released_at IS NULL)
ORDER BY id DESC LIMIT %(limit)s;

-- name: holds_of_run
SELECT id, tenant, run_id, reason, held_by, held_at, released_by, released_at, release_reason FROM holds
WHERE run_id = %(run_id)s ORDER BY id;

-- name: run_holds_count
SELECT COUNT(*) FROM holds WHERE tenant = %(tenant)s AND run_id IS NOT NULL AND released_at IS NULL;

-- name: purge_candidates
SELECT f.run_id FROM finished_runs f
WHERE f.tenant = %(tenant)s AND f.finished_at <= %(cutoff)s
  AND (CAST(%(partitions)s AS INTEGER[]) IS NULL OR f.part = ANY(%(partitions)s))
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL)
ORDER BY f.finished_at, f.run_id LIMIT %(limit)s;

-- name: purge_due_count
SELECT COUNT(*) FROM finished_runs f
WHERE f.tenant = %(tenant)s AND f.finished_at <= %(cutoff)s
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL);

-- name: purge_next_due
SELECT MIN(f.finished_at) FROM finished_runs f
WHERE f.tenant = %(tenant)s AND f.finished_at > %(cutoff)s
  AND NOT EXISTS (SELECT 1 FROM holds h WHERE h.run_id = f.run_id AND h.released_at IS NULL);

-- name: finished_count
SELECT COUNT(*) FROM finished_runs WHERE tenant = %(tenant)s;

-- name: purge_run_row
SELECT r.tenant, r.definition, r.version, r.status, r.created_at, f.finished_at, r.seq, r.last_hash
FROM runs r JOIN finished_runs f ON f.run_id = r.run_id WHERE r.run_id = %(run_id)s
FOR UPDATE OF r SKIP LOCKED;

-- name: tombstone_insert
INSERT INTO tombstones (run_id, tenant, definition, version, status, started_at, finished_at, events,
                        last_hash, purged_at, purged_by, reason, state)
VALUES (%(run_id)s, %(tenant)s, %(definition)s, %(version)s, %(status)s, %(started_at)s, %(finished_at)s, %(events)s,
        %(last_hash)s, %(purged_at)s, %(purged_by)s, %(reason)s, 'purging');

-- name: finished_run_delete
DELETE FROM finished_runs WHERE run_id = %(run_id)s;

-- name: run_delete
DELETE FROM runs WHERE run_id = %(run_id)s;

-- name: tombstone_get
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones WHERE run_id = %(run_id)s;

-- name: tombstones_list
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones
WHERE (CAST(%(tenant)s AS TEXT) IS NULL OR tenant = %(tenant)s) AND run_id > %(after)s
ORDER BY run_id LIMIT %(limit)s;

-- name: tombstones_purging
SELECT run_id, tenant, definition, version, status, started_at, finished_at, events, last_hash,
       purged_at, purged_by, reason, state, done_at FROM tombstones
WHERE state = 'purging' AND run_id >= %(from)s
  AND (CAST(%(partitions)s AS INTEGER[]) IS NULL OR part = ANY(%(partitions)s))
ORDER BY run_id LIMIT %(limit)s;

-- name: tombstone_counts
SELECT state, COUNT(*) FROM tombstones WHERE tenant = %(tenant)s GROUP BY state;

-- name: tombstone_done
UPDATE tombstones SET state = 'purged', done_at = %(done_at)s WHERE run_id = %(run_id)s AND state = 'purging';

-- name: purge_events
DELETE FROM events WHERE run_id = %(run_id)s
  AND seq IN (SELECT seq FROM events WHERE run_id = %(run_id)s ORDER BY seq LIMIT %(limit)s);

-- name: purge_tasks
-- Every task row of the run: the closed ones through their index by run; then any never closed (a ready
-- or leased row the run no longer refers to), looked for among the open rows, through their indexes.
DELETE FROM tasks WHERE task_id IN (
    SELECT task_id FROM tasks WHERE run_id = %(run_id)s AND status NOT IN ('ready', 'leased')
    UNION ALL SELECT task_id FROM tasks WHERE status = 'ready' AND run_id = %(run_id)s
    UNION ALL SELECT task_id FROM tasks WHERE status = 'leased' AND run_id = %(run_id)s
    LIMIT %(limit)s);

-- name: purge_timers
DELETE FROM timers WHERE run_id = %(run_id)s
  AND ctid = ANY(ARRAY(SELECT ctid FROM timers WHERE run_id = %(run_id)s LIMIT %(limit)s));

-- name: purge_approval_decisions
DELETE FROM approval_decisions WHERE (request_id, approver) IN (
    SELECT d.request_id, d.approver FROM approval_decisions d JOIN approval_requests a ON a.request_id = d.request_id
    WHERE a.run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_approval_links
DELETE FROM approval_links WHERE link_id IN (
    SELECT link_id FROM approval_links WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_approval_requests
DELETE FROM approval_requests WHERE request_id IN (
    SELECT request_id FROM approval_requests WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_notifications
DELETE FROM notifications WHERE id IN (
    SELECT id FROM notifications WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_holds
DELETE FROM holds WHERE id IN (
    SELECT id FROM holds WHERE run_id = %(run_id)s AND released_at IS NOT NULL LIMIT %(limit)s);

-- name: purge_run_keys
DELETE FROM run_keys WHERE run_id = %(run_id)s;

-- name: tombstones_with_rows
SELECT t.run_id, t.state FROM tombstones t
WHERE (CAST(%(tenant)s AS TEXT) IS NULL OR t.tenant = %(tenant)s)
  AND (EXISTS (SELECT 1 FROM runs r WHERE r.run_id = t.run_id)
       OR (t.state = 'purged' AND EXISTS (SELECT 1 FROM events e WHERE e.run_id = t.run_id)))
ORDER BY t.run_id LIMIT %(limit)s;

-- name: event_partitions
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'events'::regclass ORDER BY c.relname;

-- name: drop_event_partition
SELECT lockstep_drop_event_partition(%(name)s);
-- name: tenant_keys_of
SELECT tenant, version, wrapped, provider, created_at, retired_at FROM tenant_keys
WHERE tenant = %(tenant)s ORDER BY version;

-- name: tenant_key_insert
INSERT INTO tenant_keys (tenant, version, wrapped, provider, created_at, retired_at)
VALUES (%(tenant)s, %(version)s, %(wrapped)s, %(provider)s, %(created_at)s, NULL) ON CONFLICT (tenant, version) DO NOTHING;

-- name: tenant_keys_retire
UPDATE tenant_keys SET retired_at = %(at)s WHERE tenant = %(tenant)s AND version < %(below)s AND retired_at IS NULL;

-- name: tenant_key_delete_unused
DELETE FROM tenant_keys WHERE tenant = %(tenant)s AND version = %(version)s AND retired_at IS NOT NULL
AND NOT EXISTS (SELECT 1 FROM run_keys WHERE tenant = %(tenant)s AND key_version = %(version)s);

-- name: tenant_keys_delete_all
DELETE FROM tenant_keys WHERE tenant = %(tenant)s;

-- name: tenant_keys_rotating
SELECT tenant, MAX(version) FROM tenant_keys GROUP BY tenant HAVING COUNT(*) > 1 ORDER BY tenant;

-- name: run_key_get
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r LEFT JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.run_id = %(run_id)s;

-- name: run_key_insert
INSERT INTO run_keys (run_id, tenant, key_version, wrapped) VALUES (%(run_id)s, %(tenant)s, %(key_version)s, %(wrapped)s);

-- name: run_key_forget
INSERT INTO run_keys (run_id, tenant, key_version, wrapped, forgotten_at)
VALUES (%(run_id)s, %(tenant)s, NULL, NULL, %(at)s)
ON CONFLICT (run_id) DO UPDATE SET key_version = NULL, wrapped = NULL, forgotten_at = excluded.forgotten_at;

-- name: run_keys_forget_tenant
UPDATE run_keys SET key_version = NULL, wrapped = NULL, forgotten_at = %(at)s
WHERE tenant = %(tenant)s AND forgotten_at IS NULL;

-- name: run_keys_stale
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.tenant = %(tenant)s AND r.key_version < %(newest)s ORDER BY r.run_id LIMIT %(limit)s
FOR UPDATE OF r SKIP LOCKED;

-- name: run_key_rewrap
UPDATE run_keys SET key_version = %(new_version)s, wrapped = %(wrapped)s
WHERE run_id = %(run_id)s AND key_version = %(old_version)s;

-- name: run_key_counts
SELECT key_version, COUNT(*) FROM run_keys WHERE tenant = %(tenant)s GROUP BY key_version ORDER BY key_version;

-- name: run_keys_forgotten_count
SELECT COUNT(*) FROM run_keys WHERE tenant = %(tenant)s AND forgotten_at IS NOT NULL;

-- name: run_keys_get_many
SELECT r.run_id, r.tenant, r.key_version, r.wrapped, r.forgotten_at,
       t.tenant, t.version, t.wrapped, t.provider, t.created_at, t.retired_at
FROM run_keys r LEFT JOIN tenant_keys t ON t.tenant = r.tenant AND t.version = r.key_version
WHERE r.run_id = ANY(%(run_ids)s);

-- Schedules (issue 18): see migrations/0008_schedules.sql.

-- name: schedule_insert
INSERT INTO schedules (id, tenant, name, definition, version, cron, timezone, input, overlap,
    catch_up, catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
    slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by)
VALUES (%(id)s, %(tenant)s, %(name)s, %(definition)s, %(version)s, %(cron)s, %(timezone)s, %(input)s, %(overlap)s, %(catch_up)s, %(catch_up_limit)s, %(status)s, %(paused_reason)s, %(next_at)s, %(generation)s, %(last_slot)s, %(last_run)s, %(runs_started)s, %(slots_skipped)s, %(slots_missed)s, %(created_at)s, %(created_by)s, %(updated_at)s, %(updated_by)s, %(paused_at)s, %(paused_by)s);

-- name: schedule_get
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: schedule_lock
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE tenant = %(tenant)s AND name = %(name)s FOR UPDATE;

-- name: schedules_of
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules WHERE tenant = %(tenant)s ORDER BY name;

-- name: schedules_count
SELECT COUNT(*) FROM schedules WHERE tenant = %(tenant)s;

-- name: schedules_due
SELECT id, tenant, name, definition, version, cron, timezone, input, overlap, catch_up,
       catch_up_limit, status, paused_reason, next_at, generation, last_slot, last_run, runs_started,
       slots_skipped, slots_missed, created_at, created_by, updated_at, updated_by, paused_at, paused_by FROM schedules
WHERE status = 'active' AND next_at <= %(now)s
  AND (CAST(%(partitions)s AS INTEGER[]) IS NULL OR part = ANY(%(partitions)s))
ORDER BY next_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: schedule_update
UPDATE schedules SET name = %(name)s,
    definition = %(definition)s,
    version = %(version)s,
    cron = %(cron)s,
    timezone = %(timezone)s,
    input = %(input)s,
    overlap = %(overlap)s,
    catch_up = %(catch_up)s,
    catch_up_limit = %(catch_up_limit)s,
    status = %(status)s,
    paused_reason = %(paused_reason)s,
    next_at = %(next_at)s,
    generation = %(generation)s,
    last_slot = %(last_slot)s,
    last_run = %(last_run)s,
    runs_started = %(runs_started)s,
    slots_skipped = %(slots_skipped)s,
    slots_missed = %(slots_missed)s,
    updated_at = %(updated_at)s,
    updated_by = %(updated_by)s,
    paused_at = %(paused_at)s,
    paused_by = %(paused_by)s
WHERE id = %(id)s AND generation = %(expected)s;

-- name: schedule_delete
DELETE FROM schedules WHERE id = %(id)s;

-- name: schedule_slots_delete
DELETE FROM schedule_slots WHERE schedule_id = %(id)s;

-- name: schedule_slot_insert
INSERT INTO schedule_slots (schedule_id, slot_at, until_at, count, outcome, started_run, reason, recorded_at)
VALUES (%(schedule_id)s, %(slot_at)s, %(until_at)s, %(count)s, %(outcome)s, %(started_run)s, %(reason)s, %(recorded_at)s);

-- name: schedule_slots_prune
DELETE FROM schedule_slots WHERE schedule_id = %(schedule_id)s AND id <= (
    SELECT id FROM schedule_slots WHERE schedule_id = %(schedule_id)s
    ORDER BY id DESC LIMIT 1 OFFSET %(keep)s);

-- name: schedule_slots_of
SELECT slot_at, outcome, started_run, reason, until_at, count, recorded_at, id FROM schedule_slots
WHERE schedule_id = %(schedule_id)s ORDER BY id DESC LIMIT %(limit)s;

-- name: child_insert
INSERT INTO child_runs (child_run_id, run_id, tenant, step, definition, version, input, start_key, depth,
                        status, available_at, created_at, updated_at)
VALUES (%(child_run_id)s, %(run_id)s, %(tenant)s, %(step)s, %(definition)s, %(version)s, %(input)s,
        %(start_key)s, %(depth)s, 'requested', %(now)s, %(now)s, %(now)s)
ON CONFLICT (child_run_id) DO NOTHING;

-- name: child_cancel
UPDATE child_runs SET cancel_reason = %(reason)s, available_at = %(now)s, updated_at = %(now)s
WHERE child_run_id = %(child_run_id)s AND cancel_reason IS NULL;

-- name: child_end
UPDATE child_runs SET status = 'ended', child_status = %(child_status)s, result = %(result)s,
                      available_at = %(now)s, updated_at = %(now)s
WHERE child_run_id = %(child_run_id)s AND status IN ('requested', 'started');

-- name: children_due
SELECT child_run_id, run_id, tenant, step, definition, version, input, start_key, depth, status,
       cancel_reason, cancel_sent, child_status, result, attempts FROM child_runs
WHERE available_at <= %(now)s
  AND (status IN ('requested', 'ended') OR (status = 'started' AND cancel_reason IS NOT NULL AND NOT cancel_sent))
ORDER BY available_at LIMIT %(limit)s FOR UPDATE SKIP LOCKED;

-- name: child_row
SELECT child_run_id, run_id, tenant, step, definition, version, input, start_key, depth, status,
       cancel_reason, cancel_sent, child_status, result, attempts FROM child_runs
WHERE child_run_id = %(child_run_id)s;

-- name: child_mark
UPDATE child_runs SET status = %(status)s, child_status = COALESCE(%(child_status)s, child_status),
                      result = COALESCE(%(result)s, result), last_error = %(error)s,
                      attempts = attempts + %(tried)s, available_at = %(available_at)s, updated_at = %(now)s
WHERE child_run_id = %(child_run_id)s;

-- name: child_cancel_sent
UPDATE child_runs SET cancel_sent = TRUE, updated_at = %(now)s WHERE child_run_id = %(child_run_id)s;

-- name: purge_child_runs
DELETE FROM child_runs WHERE child_run_id IN (
    SELECT child_run_id FROM child_runs WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: inbox_get
SELECT tenant, event_id, name, key, payload, status, delivered_to, received_at, buffer_until
FROM event_inbox WHERE tenant = %(tenant)s AND event_id = %(event_id)s FOR UPDATE;

-- name: inbox_insert
INSERT INTO event_inbox (tenant, event_id, name, key, payload, status, delivered_to, received_at,
                         buffer_until, updated_at)
VALUES (%(tenant)s, %(event_id)s, %(name)s, %(key)s, %(payload)s, 'delivering', '[]', %(now)s, NULL, %(now)s)
ON CONFLICT (tenant, event_id) DO NOTHING;

-- name: inbox_delivered_to
UPDATE event_inbox SET delivered_to = %(delivered_to)s, updated_at = %(now)s
WHERE tenant = %(tenant)s AND event_id = %(event_id)s;

-- name: inbox_status
UPDATE event_inbox SET status = %(status)s, buffer_until = %(buffer_until)s, updated_at = %(now)s
WHERE tenant = %(tenant)s AND event_id = %(event_id)s AND status = %(was)s;

-- name: inbox_buffered_count
SELECT COUNT(*) FROM event_inbox WHERE tenant = %(tenant)s AND status = 'buffered' AND buffer_until > %(now)s;

-- name: inbox_expire
UPDATE event_inbox SET status = 'expired', updated_at = %(now)s
WHERE status = 'buffered' AND buffer_until <= %(now)s;

-- name: waits_for
SELECT run_id, step, tenant, name, key, generation, expires_at FROM event_waits
WHERE tenant = %(tenant)s AND name = %(name)s AND key = %(key)s ORDER BY created_at, run_id, step;

-- name: waits_buffered
SELECT w.run_id, w.step, w.tenant, w.name, w.key, w.generation, w.expires_at, i.event_id
FROM event_waits w JOIN event_inbox i
  ON i.tenant = w.tenant AND i.name = w.name AND i.key = w.key
WHERE i.status = 'buffered' AND i.buffer_until > %(now)s
ORDER BY i.received_at, i.event_id, w.created_at, w.run_id LIMIT %(limit)s;

-- name: wait_insert
INSERT INTO event_waits (run_id, step, tenant, name, key, generation, expires_at, created_at)
VALUES (%(run_id)s, %(step)s, %(tenant)s, %(name)s, %(key)s, %(generation)s, %(expires_at)s, %(now)s)
ON CONFLICT (run_id, step) DO UPDATE SET name = excluded.name, key = excluded.key,
    generation = excluded.generation, expires_at = excluded.expires_at, created_at = excluded.created_at;

-- name: wait_delete
DELETE FROM event_waits WHERE run_id = %(run_id)s AND step = %(step)s;

-- name: callbacks_set_status
UPDATE event_callbacks SET status = %(status)s WHERE run_id = %(run_id)s AND step = %(step)s AND status = 'open';

-- name: callback_insert
INSERT INTO event_callbacks (token_hash, callback_id, tenant, run_id, step, generation, expires_at, status,
                             used_at, created_at)
VALUES (%(token_hash)s, %(callback_id)s, %(tenant)s, %(run_id)s, %(step)s, %(generation)s, %(expires_at)s, 'open', NULL, %(now)s);

-- name: callback_get
SELECT token_hash, callback_id, tenant, run_id, step, generation, expires_at, status, used_at
FROM event_callbacks WHERE token_hash = %(token_hash)s;

-- name: callbacks_of_run
SELECT token_hash, callback_id, tenant, run_id, step, generation, expires_at, status, used_at
FROM event_callbacks WHERE run_id = %(run_id)s ORDER BY created_at, callback_id;

-- name: callback_use
UPDATE event_callbacks SET status = 'used', used_at = %(now)s WHERE token_hash = %(token_hash)s AND status = 'open';

-- name: integration_get
SELECT secret FROM integrations WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: integration_put
INSERT INTO integrations (tenant, name, secret, created_at, updated_at)
VALUES (%(tenant)s, %(name)s, %(secret)s, %(now)s, %(now)s)
ON CONFLICT (tenant, name) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at;

-- name: integration_names
SELECT name, created_at, updated_at FROM integrations WHERE tenant = %(tenant)s ORDER BY name;

-- name: purge_event_waits
DELETE FROM event_waits WHERE (run_id, step) IN (
    SELECT run_id, step FROM event_waits WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_event_callbacks
DELETE FROM event_callbacks WHERE token_hash IN (
    SELECT token_hash FROM event_callbacks WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_event_inbox
-- The events a purged run received stay (their ids answer replays), without naming the run.
UPDATE event_inbox SET delivered_to = REPLACE(delivered_to, '"' || %(run_id)s || '"', '"purged"')
WHERE delivered_to LIKE '%%' || %(run_id)s || '%%';

-- name: inbox_stalled
SELECT tenant, event_id, name, key, payload, status, delivered_to, received_at, buffer_until
FROM event_inbox WHERE status = 'delivering' AND updated_at <= %(before)s ORDER BY updated_at LIMIT %(limit)s;

-- --- run webhooks (sqltx/webhooks.py) ----------------------------------------------------------------

-- name: webhook_sub_insert
INSERT INTO webhook_subscriptions (id, tenant, url, events, secret, enabled, created_by, created_at)
VALUES (%(id)s, %(tenant)s, %(url)s, %(events)s, %(secret)s, TRUE, %(created_by)s, %(now)s);

-- name: webhook_subs_list
SELECT id, tenant, url, events, secret, enabled, created_by, created_at FROM webhook_subscriptions
WHERE tenant = %(tenant)s ORDER BY created_at, id;

-- name: webhook_sub_get
SELECT id, tenant, url, events, secret, enabled, created_by, created_at FROM webhook_subscriptions
WHERE tenant = %(tenant)s AND id = %(id)s;

-- name: webhook_sub_enable
UPDATE webhook_subscriptions SET enabled = (%(enabled)s = 1) WHERE tenant = %(tenant)s AND id = %(id)s;

-- name: webhook_deliveries_insert
INSERT INTO webhook_deliveries (id, subscription, tenant, run_id, seq, event, body, status, available_at,
                                created_at)
SELECT 'msg_' || s.id || '_' || %(suffix)s::text, s.id, s.tenant, %(run_id)s, %(seq)s, %(event)s, %(body)s, 'pending', %(now)s, %(now)s
FROM webhook_subscriptions s
WHERE s.tenant = %(tenant)s AND s.enabled AND s.events LIKE %(pattern)s::text
ON CONFLICT (id) DO NOTHING;

-- name: webhook_due
SELECT d.id, d.subscription, d.tenant, d.run_id, d.seq, d.event, d.body, d.attempts, s.url, s.secret
FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription
WHERE d.status = 'pending' AND d.available_at <= %(now)s
  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries e
                  WHERE e.run_id = d.run_id AND e.subscription = d.subscription
                    AND e.status = 'pending' AND e.seq < d.seq)
ORDER BY d.available_at, d.run_id, d.seq LIMIT %(limit)s FOR UPDATE OF d SKIP LOCKED;

-- name: webhook_claim
UPDATE webhook_deliveries SET attempts = attempts + 1, available_at = %(until)s
WHERE id = %(id)s AND status = 'pending' AND available_at <= %(now)s;

-- name: webhook_mark
UPDATE webhook_deliveries SET status = %(status)s, last_status = %(last_status)s, last_error = %(error)s,
                              available_at = %(available_at)s, delivered_at = %(delivered_at)s
WHERE id = %(id)s;

-- name: webhook_deliveries_list
SELECT id, subscription, tenant, run_id, seq, event, body, status, attempts, last_status, last_error,
       available_at, created_at, delivered_at FROM webhook_deliveries
WHERE tenant = %(tenant)s AND subscription = %(subscription)s ORDER BY created_at DESC, id DESC LIMIT %(limit)s;

-- name: webhook_delivery_get
SELECT id, subscription, tenant, run_id, seq, event, body, status, attempts, last_status, last_error,
       available_at, created_at, delivered_at FROM webhook_deliveries
WHERE tenant = %(tenant)s AND subscription = %(subscription)s AND id = %(id)s;

-- name: webhook_replay
UPDATE webhook_deliveries SET status = 'pending', available_at = %(now)s, delivered_at = NULL
WHERE tenant = %(tenant)s AND subscription = %(subscription)s AND id = %(id)s;

-- name: purge_webhook_deliveries
DELETE FROM webhook_deliveries WHERE id IN (
    SELECT id FROM webhook_deliveries WHERE run_id = %(run_id)s LIMIT %(limit)s);
-- Secrets and egress policies (issue 19): see migrations/0011_secrets_egress.sql.

-- name: secret_versions
SELECT tenant, name, version, key_id, sealed, created_at, created_by FROM secrets
WHERE tenant = %(tenant)s AND name = %(name)s ORDER BY version;

-- name: secrets_of
SELECT tenant, name, version, key_id, sealed, created_at, created_by FROM secrets
WHERE tenant = %(tenant)s ORDER BY name, version;

-- name: secret_insert
INSERT INTO secrets (tenant, name, version, key_id, sealed, created_at, created_by)
VALUES (%(tenant)s, %(name)s, %(version)s, %(key_id)s, %(sealed)s, %(created_at)s, %(created_by)s);

-- name: secret_delete_all
DELETE FROM secrets WHERE tenant = %(tenant)s AND name = %(name)s;

-- name: secret_delete_version
DELETE FROM secrets WHERE tenant = %(tenant)s AND name = %(name)s AND version = %(version)s;

-- name: egress_get
SELECT tenant, policy, updated_at, updated_by FROM egress_policies WHERE tenant = %(tenant)s;

-- name: egress_set
INSERT INTO egress_policies (tenant, policy, updated_at, updated_by)
VALUES (%(tenant)s, %(policy)s, %(updated_at)s, %(updated_by)s)
ON CONFLICT (tenant) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at,
    updated_by = excluded.updated_by;

-- Migrations that need approval (sqltx/migrations.py).
-- name: migration_request_insert
INSERT INTO migration_requests (request_id, tenant, definition, from_version, to_version, mapping, reason,
    requested_by, policy, bulk, status, created_at, expires_at)
VALUES (%(request_id)s, %(tenant)s, %(definition)s, %(from_version)s, %(to_version)s, %(mapping)s, %(reason)s, %(requested_by)s,
    %(policy)s, %(bulk)s, 'pending', %(created_at)s, %(expires_at)s);

-- name: migration_run_insert
-- Nothing when the run is in another open request already (the partial unique index): the caller refuses.
INSERT INTO migration_request_runs (request_id, run_id, tenant, open) VALUES (%(request_id)s, %(run_id)s, %(tenant)s, 1)
ON CONFLICT DO NOTHING;

-- name: migration_open_for_run
SELECT request_id FROM migration_request_runs WHERE run_id = %(run_id)s AND open = 1;

-- name: migration_request_get
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = %(tenant)s AND request_id = %(request_id)s;

-- name: migration_request_lock
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = %(tenant)s AND request_id = %(request_id)s FOR UPDATE;

-- name: migration_requests_list
SELECT request_id, tenant, definition, from_version, to_version, mapping, reason, requested_by, policy, bulk,
    status, created_at, expires_at, decided_at, applied_at
FROM migration_requests WHERE tenant = %(tenant)s AND (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY created_at DESC, request_id LIMIT %(limit)s;

-- name: migration_runs_of
SELECT request_id, run_id, outcome, detail, at FROM migration_request_runs WHERE request_id = %(request_id)s
ORDER BY run_id;

-- name: migration_run_lock
SELECT request_id, run_id, outcome, detail, at FROM migration_request_runs
WHERE request_id = %(request_id)s AND run_id = %(run_id)s FOR UPDATE;

-- name: migration_run_outcome
UPDATE migration_request_runs SET outcome = %(outcome)s, detail = %(detail)s, at = %(at)s, open = NULL
WHERE request_id = %(request_id)s AND run_id = %(run_id)s AND outcome IS NULL;

-- name: migration_runs_close
UPDATE migration_request_runs SET outcome = %(outcome)s, at = %(at)s, open = NULL
WHERE request_id = %(request_id)s AND outcome IS NULL;

-- name: migration_decisions_of
SELECT approver, decision, comment, at, roles, groups_ FROM migration_decisions WHERE request_id = %(request_id)s
ORDER BY at, approver;

-- name: migration_decision_insert
INSERT INTO migration_decisions (request_id, approver, decision, comment, at, roles, groups_)
VALUES (%(request_id)s, %(approver)s, %(decision)s, %(comment)s, %(at)s, %(roles)s, %(groups)s) ON CONFLICT DO NOTHING;

-- name: migration_request_status
UPDATE migration_requests SET status = %(status)s, decided_at = COALESCE(%(decided_at)s, decided_at),
    applied_at = COALESCE(%(applied_at)s, applied_at)
WHERE request_id = %(request_id)s AND status = %(from_status)s;

-- name: migration_due
-- Pending requests past their expiry, and approved ones whose runs a pass still has to migrate.
SELECT tenant, request_id FROM migration_requests
WHERE (status = 'pending' AND expires_at <= %(now)s) OR status = 'approved'
ORDER BY created_at, request_id LIMIT %(limit)s;

-- name: purge_migration_request_runs
DELETE FROM migration_request_runs WHERE (request_id, run_id) IN (
    SELECT request_id, run_id FROM migration_request_runs WHERE run_id = %(run_id)s LIMIT %(limit)s);

-- name: purge_migration_decisions
-- A request's decisions and the request itself go with the purge of its last run (sqltx/retention.py).
DELETE FROM migration_decisions WHERE request_id IN (
    SELECT m.request_id FROM migration_request_runs m WHERE m.run_id = %(run_id)s
    AND NOT EXISTS (SELECT 1 FROM migration_request_runs o WHERE o.request_id = m.request_id AND o.run_id <> %(run_id)s)
    LIMIT %(limit)s);

-- name: purge_migration_requests
DELETE FROM migration_requests WHERE request_id IN (
    SELECT m.request_id FROM migration_request_runs m WHERE m.run_id = %(run_id)s
    AND NOT EXISTS (SELECT 1 FROM migration_request_runs o WHERE o.request_id = m.request_id AND o.run_id <> %(run_id)s)
    LIMIT %(limit)s);

-- name: runs_search
-- The UI's runs list (store/port/search.py): newest first below a cursor; each filter is off when NULL.
SELECT snapshot FROM runs
WHERE tenant = %(tenant)s AND run_id < %(before)s
  AND (CAST(%(status)s AS TEXT) IS NULL OR status = %(status)s)
  AND (CAST(%(definition)s AS TEXT) IS NULL OR definition = %(definition)s)
  AND (CAST(%(version)s AS INTEGER) IS NULL OR version = %(version)s)
  AND (CAST(%(low)s AS TEXT) IS NULL OR (run_id >= %(low)s AND run_id < %(high)s))
  AND (CAST(%(start_key)s AS TEXT) IS NULL OR start_key = %(start_key)s)
  AND (CAST(%(since)s AS TEXT) IS NULL OR created_at >= %(since)s)
  AND (CAST(%(until)s AS TEXT) IS NULL OR created_at < %(until)s)
ORDER BY run_id DESC LIMIT %(limit)s;

-- name: runs_search_input
-- runs_search with an input field equal to a value (text, or a number or boolean as JSON writes it); a
-- sealed value is an object and never matches. Its own statement, so no other search parses snapshots.
SELECT snapshot FROM runs
WHERE tenant = %(tenant)s AND run_id < %(before)s
  AND (CAST(%(status)s AS TEXT) IS NULL OR status = %(status)s)
  AND (CAST(%(definition)s AS TEXT) IS NULL OR definition = %(definition)s)
  AND (CAST(%(version)s AS INTEGER) IS NULL OR version = %(version)s)
  AND (CAST(%(low)s AS TEXT) IS NULL OR (run_id >= %(low)s AND run_id < %(high)s))
  AND (CAST(%(start_key)s AS TEXT) IS NULL OR start_key = %(start_key)s)
  AND (CAST(%(since)s AS TEXT) IS NULL OR created_at >= %(since)s)
  AND (CAST(%(until)s AS TEXT) IS NULL OR created_at < %(until)s)
  AND jsonb_typeof(CAST(snapshot AS jsonb) #> CAST(%(keys)s AS TEXT[])) IN ('string', 'number', 'boolean')
  AND CAST(snapshot AS jsonb) #>> CAST(%(keys)s AS TEXT[]) = %(value)s
ORDER BY run_id DESC LIMIT %(limit)s;

-- name: run_counts
SELECT version, status, COUNT(*) FROM runs WHERE tenant = %(tenant)s AND definition = %(definition)s
GROUP BY version, status ORDER BY version, status;
