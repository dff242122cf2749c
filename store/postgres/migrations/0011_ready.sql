-- One row that /readyz writes (ProbeWrite): ready means a claim could be
-- committed now, not only that the server answers — a full disk, a
-- read-only database or a standby fails this write as it would fail a claim.
CREATE TABLE airlock_ready (
    id integer PRIMARY KEY CHECK (id = 1),
    at timestamptz NOT NULL
);
