-- Plans of irreversible tools, unique on the tool's key.
CREATE TABLE airlock_plans (
    id              text        NOT NULL PRIMARY KEY,
    key             text        NOT NULL UNIQUE,
    tool            text        NOT NULL,
    status          text        NOT NULL,
    rule            text        NOT NULL DEFAULT '',
    decision        text        NOT NULL,
    evaluation      text,
    args            text        NOT NULL,
    facts           text,
    facts_error     text        NOT NULL DEFAULT '',
    decision_hash   text        NOT NULL,
    run_id          text        NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_by      text        NOT NULL DEFAULT '',
    decision_reason text        NOT NULL DEFAULT '',
    decided_at      timestamptz,
    result          text,
    error           text        NOT NULL DEFAULT ''
);

CREATE INDEX airlock_plans_status ON airlock_plans (status, created_at);
CREATE INDEX airlock_plans_run ON airlock_plans (run_id, tool);
