-- The page's sessions, shared by every replica (a sign-in on one is known
-- to all; a sign-out ends it on all). id is the SHA-256 of the cookie's
-- value, never the value.
CREATE TABLE airlock_sessions (
    id         text        PRIMARY KEY,
    name       text        NOT NULL,
    role       text        NOT NULL,
    subject    text        NOT NULL DEFAULT '',
    csrf       text        NOT NULL,
    flash      text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX airlock_sessions_expires ON airlock_sessions (expires_at);

-- Secrets every replica must share (the key that binds the sign-in form's
-- token): the first replica to need one stores it.
CREATE TABLE airlock_secrets (
    name  text  PRIMARY KEY,
    value bytea NOT NULL
);
