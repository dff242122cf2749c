-- Audit retention deletes a prefix of the chain; the anchor keeps the
-- sequence number and hash of the last event deleted, so the chain stays
-- verifiable from the first event kept and the sealer continues it when
-- every sealed event has been purged. One row, written by PurgeAudit.
CREATE TABLE airlock_audit_anchor (
    id     integer     PRIMARY KEY CHECK (id = 1),
    seq    bigint      NOT NULL,
    hash   text        NOT NULL,
    at     timestamptz NOT NULL,
    purged bigint      NOT NULL
);
