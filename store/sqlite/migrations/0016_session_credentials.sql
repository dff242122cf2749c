-- A page session is bound to what opened it (docs/hardening.md, "page
-- sessions"): credential names the token (a fingerprint of its hash),
-- renew_at is when the identity provider must confirm the person again
-- (Unix microseconds). A session from before has neither: a token's ends
-- at its next request, a provider's is renewed through the provider.
ALTER TABLE airlock_sessions ADD COLUMN credential text NOT NULL DEFAULT '';
ALTER TABLE airlock_sessions ADD COLUMN renew_at integer NOT NULL DEFAULT 0;
