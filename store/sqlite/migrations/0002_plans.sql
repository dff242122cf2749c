-- Plans of irreversible tools, unique on the tool's key. Times are Unix microseconds.
CREATE TABLE airlock_plans (
    id              TEXT    NOT NULL PRIMARY KEY,
    key             TEXT    NOT NULL UNIQUE,
    tool            TEXT    NOT NULL,
    status          TEXT    NOT NULL,
    rule            TEXT    NOT NULL DEFAULT '',
    decision        TEXT    NOT NULL,
    evaluation      TEXT,
    args            TEXT    NOT NULL,
    facts           TEXT,
    facts_error     TEXT    NOT NULL DEFAULT '',
    decision_hash   TEXT    NOT NULL,
    run_id          TEXT    NOT NULL DEFAULT '',
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    decided_by      TEXT    NOT NULL DEFAULT '',
    decision_reason TEXT    NOT NULL DEFAULT '',
    decided_at      INTEGER NOT NULL DEFAULT 0,
    result          TEXT,
    error           TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX airlock_plans_status ON airlock_plans (status, created_at);
CREATE INDEX airlock_plans_run ON airlock_plans (run_id, tool);
