-- A key's and a plan's trail are read by index (AuditTrail), not by
-- scanning the log; plan ids are empty on most events, so that index is
-- partial.
CREATE INDEX airlock_audit_key ON airlock_audit (key, id);
CREATE INDEX airlock_audit_plan ON airlock_audit (plan_id, id) WHERE plan_id <> '';
