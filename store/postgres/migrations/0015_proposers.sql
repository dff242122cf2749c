-- Plans made before 0014 have no proposer (separation of duties and a
-- task's withdrawal skip them). Their planned audit event names the
-- proposing agent, so it is filled from there, once; a plan whose event
-- names nobody (system) or was purged keeps none. The audit log is only
-- read.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM airlock_plans WHERE proposed_by = '') THEN
        UPDATE airlock_plans p SET proposed_by = a.actor
        FROM (SELECT DISTINCT ON (plan_id) plan_id, actor FROM airlock_audit
              WHERE kind = 'planned' AND plan_id <> '' AND actor NOT IN ('', 'system')
              ORDER BY plan_id, id) a
        WHERE p.id = a.plan_id AND p.proposed_by = '';
    END IF;
END
$$;
