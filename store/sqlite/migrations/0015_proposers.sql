-- Plans made before 0014 have no proposer (separation of duties and a
-- task's withdrawal skip them). Their planned audit event names the
-- proposing agent, so it is filled from there, once; a plan whose event
-- names nobody (system) or was purged keeps none. The audit log is only
-- read.
UPDATE airlock_plans SET proposed_by = a.actor
FROM (SELECT plan_id, actor FROM airlock_audit WHERE id IN (
        SELECT MIN(id) FROM airlock_audit
        WHERE kind = 'planned' AND plan_id <> '' AND actor NOT IN ('', 'system')
        GROUP BY plan_id)) AS a
WHERE airlock_plans.id = a.plan_id AND airlock_plans.proposed_by = '';
