-- MCP tasks (docs/gateway.md, "Tasks"): one per principal and the work it
-- follows (a record's key or a plan's id, in subject), so that a repeat of
-- the same work names the same task. Its status is read from the record or
-- plan. Times are Unix microseconds; expires_at 0 is kept.
CREATE TABLE airlock_tasks (
    id         text    PRIMARY KEY,
    principal  text    NOT NULL,
    subject    text    NOT NULL,
    tool       text    NOT NULL,
    repeat     integer NOT NULL DEFAULT 0,
    created_at integer NOT NULL,
    expires_at integer NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX airlock_tasks_subject ON airlock_tasks (principal, subject);
CREATE INDEX airlock_tasks_listed ON airlock_tasks (principal, created_at, id);
CREATE INDEX airlock_tasks_expires ON airlock_tasks (expires_at) WHERE expires_at > 0;
