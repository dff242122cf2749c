-- The audit log. Events are written unsealed (seq NULL) with the change they
-- describe; the sealer numbers and chains them. Times are Unix microseconds.
CREATE TABLE airlock_audit (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    seq           INTEGER,
    at            INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    run_id        TEXT    NOT NULL DEFAULT '',
    key           TEXT    NOT NULL DEFAULT '',
    tool          TEXT    NOT NULL DEFAULT '',
    args          TEXT,
    result        TEXT,
    error         TEXT    NOT NULL DEFAULT '',
    actor         TEXT    NOT NULL DEFAULT '',
    plan_id       TEXT    NOT NULL DEFAULT '',
    rule          TEXT    NOT NULL DEFAULT '',
    decision_hash TEXT    NOT NULL DEFAULT '',
    prev_hash     TEXT,
    hash          TEXT
);

-- Sealed events by sequence; unsealed ones are found by the partial index.
-- (No index on time: the report reads from the first event of its period,
-- found by id; see AuditSince.)
CREATE UNIQUE INDEX airlock_audit_seq ON airlock_audit (seq) WHERE seq IS NOT NULL;
CREATE INDEX airlock_audit_unsealed ON airlock_audit (id) WHERE seq IS NULL;
