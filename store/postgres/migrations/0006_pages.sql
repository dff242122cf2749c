-- Every list of plans is a keyset page over (created_at, id) in either
-- order, filtered by status, tool, approver or a creation range; an index
-- serves each filter (airlock_plans_status from 0002 serves status).
CREATE INDEX airlock_plans_created ON airlock_plans (created_at, id);
CREATE INDEX airlock_plans_tool ON airlock_plans (tool, created_at, id);
CREATE INDEX airlock_plans_decided_by ON airlock_plans (decided_by, created_at, id);

-- The in-doubt list (the page, reconciliation) reads by this partial index
-- rather than scanning every record; records are in doubt rarely.
CREATE INDEX airlock_records_in_doubt ON airlock_records (updated_at, key) WHERE state = 'in_doubt';
