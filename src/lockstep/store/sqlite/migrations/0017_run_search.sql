-- The UI's runs search (store/port/search.py): by start time, and a definition's runs by version and
-- status (the definition page's counts), each within a tenant.
CREATE INDEX runs_by_tenant_created ON runs (tenant, created_at);
CREATE INDEX runs_by_tenant_definition ON runs (tenant, definition, version, status);
