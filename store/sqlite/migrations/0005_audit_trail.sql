-- A key's and a plan's trail are read by index (AuditTrail), not by
-- scanning the log. The key index holds sealed events only, so that the
-- sealer, not the call that writes the event, pays for it (a full index
-- on the key cost new calls 20 % on SQLite); unsealed events are few and
-- found by airlock_audit_unsealed. Plan ids are empty on most events, so
-- that index is partial too.
CREATE INDEX airlock_audit_key ON airlock_audit (key, id) WHERE seq IS NOT NULL;
CREATE INDEX airlock_audit_plan ON airlock_audit (plan_id, id) WHERE plan_id <> '';
