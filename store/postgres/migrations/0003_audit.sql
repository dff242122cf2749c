-- The audit log. Events are written unsealed (seq NULL) with the change they
-- describe; the sealer numbers and chains them.
CREATE TABLE airlock_audit (
    id            bigserial   PRIMARY KEY,
    seq           bigint,
    at            timestamptz NOT NULL,
    kind          text        NOT NULL,
    run_id        text        NOT NULL DEFAULT '',
    key           text        NOT NULL DEFAULT '',
    tool          text        NOT NULL DEFAULT '',
    args          text,
    result        text,
    error         text        NOT NULL DEFAULT '',
    actor         text        NOT NULL DEFAULT '',
    plan_id       text        NOT NULL DEFAULT '',
    rule          text        NOT NULL DEFAULT '',
    decision_hash text        NOT NULL DEFAULT '',
    prev_hash     text,
    hash          text
);

-- Sealed events by sequence; unsealed ones by the partial index. No index
-- on time: the report finds the first event of its period by id (AuditSince).
CREATE UNIQUE INDEX airlock_audit_seq ON airlock_audit (seq) WHERE seq IS NOT NULL;
CREATE INDEX airlock_audit_unsealed ON airlock_audit (id) WHERE seq IS NULL;
