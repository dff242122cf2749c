package ui

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/auth/oidc"
)

// The flow's cookie travels to the provider and back: SameSite=Lax, since
// the callback is a top-level navigation from the provider's site and a
// Strict cookie would not be sent with it. Its path is the flow's own.
const flowCookie = "airlock_oidc"

func (u *UI) ssoStart(w http.ResponseWriter, r *http.Request) {
	to, f, err := u.cfg.SSO.Start(r.Context())
	if err != nil {
		u.log.Error("airlock ui: starting a single sign-on", "err", err)
		u.render(w, r, http.StatusBadGateway, "signin", "Sign in", nil, "The identity provider cannot be reached; try again, or sign in with a token.")
		return
	}
	// The flow names the browser's session, if it has one, for the
	// callback to end: the callback comes from the provider's site, and
	// the session's SameSite=Strict cookie does not come with it. A
	// sign-in the provider now refuses must not leave the old one behind.
	old := ""
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		old = sessionKey(c.Value)
	}
	value := f.State + "." + f.Nonce + "." + f.Verifier + "." + old
	mac, err := u.mac(r.Context(), "oidc-flow", value)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: value + "." + mac, Path: "/ui/oidc/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: u.secure(r), MaxAge: 600})
	http.Redirect(w, r, to, http.StatusFound)
}

// flowOf is the flow of the request's cookie, when a replica made it, and
// the id of the session the browser had when it started ("" for none).
func (u *UI) flowOf(r *http.Request) (f oidc.Flow, old string, ok bool) {
	c, err := r.Cookie(flowCookie)
	if err != nil {
		return oidc.Flow{}, "", false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 5 {
		return oidc.Flow{}, "", false
	}
	want, err := u.mac(r.Context(), "oidc-flow", strings.Join(parts[:4], "."))
	if err != nil || !hmac.Equal([]byte(parts[4]), []byte(want)) {
		return oidc.Flow{}, "", false
	}
	return oidc.Flow{State: parts[0], Nonce: parts[1], Verifier: parts[2]}, parts[3], true
}

func (u *UI) ssoCallback(w http.ResponseWriter, r *http.Request) {
	// The flow is used once, whatever happens next.
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: "/ui/oidc/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: u.secure(r)})
	q := r.URL.Query()
	f, old, ok := u.flowOf(r)
	if e := q.Get("error"); e != "" {
		// A link can carry any error text: the page says what it knows in
		// its own words, naming the error only when it is one RFC 6749 and
		// OpenID Connect define, and logs the provider's description.
		msg := "The identity provider did not sign you in."
		if slices.Contains(oauthErrors, e) {
			msg = "The identity provider did not sign you in (" + e + ")."
		}
		u.log.Warn("airlock ui: the identity provider did not sign in", "error", airlock.Shorten(e, 100), "description", airlock.Shorten(q.Get("error_description"), 500))
		// A renewal the provider refuses ends the session it renewed.
		if ok && old != "" {
			if err := u.cfg.Store.DeleteSession(r.Context(), old); err != nil {
				u.fail(w, r, err)
				return
			}
		}
		u.render(w, r, http.StatusUnauthorized, "signin", "Sign in", nil, msg)
		return
	}
	if !ok || q.Get("state") == "" || !hmac.Equal([]byte(q.Get("state")), []byte(f.State)) || q.Get("code") == "" {
		u.render(w, r, http.StatusBadRequest, "signin", "Sign in", nil, "This sign-in expired or was started in another browser. Try again.")
		return
	}
	addr := u.clientAddr(r)
	if u.throttled(w, r, addr) {
		return
	}
	id, err := u.cfg.SSO.Finish(r.Context(), f, q.Get("code"))
	if errors.Is(err, oidc.ErrRefused) {
		u.cfg.Throttle.Fail(addr, "signin")
		u.log.Warn("airlock ui: single sign-on refused", "err", err)
		// A renewal refused (the person left the approvers' group, say)
		// ends the session it was renewing.
		if old != "" {
			if err := u.cfg.Store.DeleteSession(r.Context(), old); err != nil {
				u.fail(w, r, err)
				return
			}
		}
		u.render(w, r, http.StatusForbidden, "signin", "Sign in", nil, strings.TrimPrefix(err.Error(), oidc.ErrRefused.Error()+": ")+".")
		return
	}
	if err != nil {
		u.log.Error("airlock ui: finishing a single sign-on", "err", err)
		u.render(w, r, http.StatusBadGateway, "signin", "Sign in", nil, "The sign-in could not be completed with the identity provider; try again.")
		return
	}
	if old != "" {
		if err := u.cfg.Store.DeleteSession(r.Context(), old); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	if !u.startSession(w, r, Principal{Name: id.Name, Role: id.Role, Groups: id.Groups}, id.Subject) {
		return
	}
	u.log.Info("airlock ui: signed in", "name", id.Name, "role", id.Role, "subject", id.Subject)
	// A page, not a redirect: this answer ends a navigation that came from
	// the provider's site, and a browser does not send a SameSite=Strict
	// cookie along a redirect chain that crossed sites. The page's own
	// navigation to the queue is same-site.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = fmt.Fprintf(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/ui/"><title>Signed in</title></head><body><p>Signed in as %s. <a href="/ui/">Continue to the queue</a>.</p></body></html>`,
		template.HTMLEscapeString(id.Name))
}

// oauthErrors are the error codes an authorization response may carry
// (RFC 6749 4.1.2.1, OpenID Connect Core 3.1.2.6).
var oauthErrors = []string{"invalid_request", "unauthorized_client", "access_denied", "unsupported_response_type", "invalid_scope",
	"server_error", "temporarily_unavailable", "interaction_required", "login_required", "account_selection_required",
	"consent_required", "invalid_request_uri", "invalid_request_object", "request_not_supported", "request_uri_not_supported",
	"registration_not_supported"}
