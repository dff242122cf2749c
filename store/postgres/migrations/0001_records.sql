-- Records of side-effecting calls, unique on key.
CREATE TABLE airlock_records (
    key         text        NOT NULL PRIMARY KEY,
    tool        text        NOT NULL,
    run_id      text        NOT NULL DEFAULT '',
    window_id   text        NOT NULL,
    state       text        NOT NULL CHECK (state IN ('running', 'succeeded', 'failed', 'in_doubt')),
    args        text        NOT NULL,
    args_hash   text        NOT NULL,
    result      text,
    note        text        NOT NULL DEFAULT '',
    owner       text        NOT NULL DEFAULT '',
    lease_until timestamptz NOT NULL,
    attempts    integer     NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    expires_at  timestamptz,
    -- waiters: a repeat in some process waits for this record; only then
    -- does its completion NOTIFY (NOTIFY serialises commits, so it is not
    -- paid by calls nobody waits for).
    waiters     boolean     NOT NULL DEFAULT false
);

CREATE INDEX airlock_records_running ON airlock_records (lease_until) WHERE state = 'running';
CREATE INDEX airlock_records_expires ON airlock_records (expires_at) WHERE state IN ('succeeded', 'failed');
CREATE INDEX airlock_records_run ON airlock_records (run_id, tool) WHERE run_id <> '';
