-- Encryption at rest (app/keys): each tenant's data key by version, wrapped by the key provider (the
-- key-encryption key lives outside the database: a key file, an environment variable or a KMS), and each
-- run's data key, wrapped by one version of its tenant's key. No clear key is ever stored. Rotation adds
-- a version and re-wraps run keys (only these rows change; events and snapshots never do); a version no
-- run key uses any more is deleted. Forgetting a run deletes its key; shredding a tenant deletes all.
CREATE TABLE tenant_keys (
    tenant      TEXT    NOT NULL,
    version     INTEGER NOT NULL,
    wrapped     TEXT    NOT NULL,           -- base64(nonce || AES-256-GCM ciphertext+tag) by the provider
    provider    TEXT    NOT NULL,           -- which provider and key wrapped it, e.g. local:<fingerprint>
    created_at  TEXT    NOT NULL,
    retired_at  TEXT,                       -- a newer version exists: wraps no new run key
    PRIMARY KEY (tenant, version)
);

-- The foreign key keeps a version from being deleted while a run key is still wrapped under it. A
-- forgotten run keeps its row without a key (forgotten_at set): its values stay unreadable, and a value
-- it records later is sealed under a key nobody keeps.
CREATE TABLE run_keys (
    run_id       TEXT    PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    key_version  INTEGER,                   -- NULL once forgotten
    wrapped      TEXT,                      -- base64(nonce || ciphertext+tag) under that version; NULL once forgotten
    forgotten_at TEXT,
    FOREIGN KEY (tenant, key_version) REFERENCES tenant_keys (tenant, version)
);
CREATE INDEX run_keys_by_version ON run_keys (tenant, key_version);

-- Per-user grants beyond roles (read_sensitive), as a JSON list; none by default.
ALTER TABLE users ADD COLUMN grants TEXT NOT NULL DEFAULT '[]';
