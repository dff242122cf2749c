-- One row that /readyz writes (ProbeWrite): ready means a claim could be
-- committed now, not only that the file opens — a full disk or a read-only
-- file fails this write as it would fail a claim.
CREATE TABLE airlock_ready (
    id integer PRIMARY KEY CHECK (id = 1),
    at integer NOT NULL
);
