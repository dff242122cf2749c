-- The plans awaiting a person, by tool and age: the queue's depth and its
-- oldest wait (WaitingPlans, read by every replica's gauge and the report)
-- come from this index alone instead of visiting every waiting plan's row.
CREATE INDEX airlock_plans_waiting ON airlock_plans (tool, created_at) WHERE status = 'awaiting_approval';
