-- Who decides (docs/plans.md, "Who decides"): the principal that proposed a
-- plan (separation of duties), how many distinct approvals it needs, and
-- the approvals given so far (a JSON array of {by, reason, at}, changed
-- only under the plan's row lock).
ALTER TABLE airlock_plans ADD COLUMN proposed_by text NOT NULL DEFAULT '';
ALTER TABLE airlock_plans ADD COLUMN approvals_required integer NOT NULL DEFAULT 1;
ALTER TABLE airlock_plans ADD COLUMN approvals text NOT NULL DEFAULT '[]';
-- A page session keeps the person's groups (approval.approvers' group:NAME),
-- as a JSON array.
ALTER TABLE airlock_sessions ADD COLUMN groups text NOT NULL DEFAULT '[]';
