package app_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/upstream"
)

const issuedManifest = `version: 1
tools:
  - name: lookup
    kind: read
    input_schema: {type: object, properties: {id: {type: string}}}
  - name: note
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    natural_key: [{field: id}]
    window: forever
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per id"}
auth:
  resource: "RESOURCE"
  issuers:
    - issuer: "ISSUER"
      role: agent
`

// issuedSetup serves airlock as an OAuth protected resource whose tokens
// the provider started here issues (its access tokens name its client id
// as their audience, so the client id is airlock's resource URL).
func issuedSetup(t *testing.T) (idp *mockoidc.MockOIDC, base string) {
	idp, base, _ = issuedApp(t)
	return idp, base
}

func issuedApp(t *testing.T, tokens ...string) (idp *mockoidc.MockOIDC, base string, a *app.App) {
	t.Helper()
	idp, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base = "http://" + ln.Addr().String()
	idp.ClientID = base + "/mcp"
	idpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := idp.Start(idpLn, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })
	src := issuedManifest
	if len(tokens) > 0 {
		src += "  tokens:\n" + strings.Join(tokens, "")
	}
	m, err := manifest.Parse([]byte(strings.NewReplacer("RESOURCE", base+"/mcp", "ISSUER", idp.Issuer()).Replace(src)), "issued.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lookup := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"found":true}`)}
	})
	toks, err := gateway.TokensFromManifest(m.Auth.Tokens)
	if err != nil {
		t.Fatal(err)
	}
	a, err = app.New(context.Background(), &app.Config{Manifest: m, Funcs: map[string]upstream.Caller{"lookup": lookup, "note": lookup}, Tokens: toks,
		DSN: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(a.Gateway.Handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = a.Close(ctx)
	})
	return idp, base, a
}

// A call over MCP with an issued token is recorded in the audit log under
// the name the token gives (its subject), as the session's principal.
func TestIssuedTokenNamesTheActorOverMCP(t *testing.T) {
	t.Parallel()
	idp, base, a := issuedApp(t)
	tok, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc-7", "aud": base + "/mcp", "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer(tok)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"id": "n-1"}}); err != nil || res.IsError {
		t.Fatalf("note: %+v %v", res, err)
	}
	a.Guard.Wait()
	if _, err := audit.SealPending(ctx, a.Store); err != nil {
		t.Fatal(err)
	}
	events, err := a.Store.AuditLog(ctx, &airlock.AuditLogParams{After: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var actors []string
	for _, e := range events {
		if e.Tool == "note" && (e.Kind == airlock.EventClaimed || e.Kind == airlock.EventCompleted) {
			actors = append(actors, e.Actor)
		}
	}
	want := airlock.JWTPrincipal(idp.Issuer(), "svc-7")
	if len(actors) != 2 || actors[0] != want || actors[1] != want {
		t.Fatalf("the call's claimed and completed events name %q; want %s", actors, want)
	}
}

// An MCP client that implements the MCP authorization specification (the
// official Go SDK's) is given no token: it follows the 401 to airlock's
// protected resource metadata, from there to the provider, obtains a token
// (authorization code with PKCE) and calls a tool with it.
func TestMCPClientFindsTheIssuerAndCalls(t *testing.T) {
	t.Parallel()
	idp, base := issuedSetup(t)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var authorized int
	h, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		PreregisteredClient: &oauthex.ClientCredentials{ClientID: idp.ClientID, ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: idp.ClientSecret}},
		RedirectURL:         "http://127.0.0.1:1/callback",
		ScopeFilter:         func([]string) []string { return []string{"openid"} },
		// The person's browser: the provider signs the queued user in at
		// once and redirects back with the code.
		AuthorizationCodeFetcher: func(ctx context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			authorized++
			idp.QueueUser(&mockoidc.MockUser{Subject: "svc-reports", Email: "reports@x.example"})
			resp, err := noRedirect.Get(args.URL)
			if err != nil {
				return nil, err
			}
			resp.Body.Close()
			back, err := url.Parse(resp.Header.Get("Location"))
			if err != nil || back.Query().Get("code") == "" {
				return nil, fmt.Errorf("the provider sent back %q", resp.Header.Get("Location"))
			}
			return &auth.AuthorizationResult{Code: back.Query().Get("code"), State: back.Query().Get("state")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "oauth-agent", Version: "v1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: base + "/mcp", OAuthHandler: h}, nil)
	if err != nil {
		t.Fatalf("connect (the client follows the metadata): %v", err)
	}
	defer s.Close()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{"id": "1"}})
	if err != nil || res.IsError {
		t.Fatalf("call with the issued token: %+v %v", res, err)
	}
	if authorized != 1 {
		t.Fatalf("the client authorized %d times, want once", authorized)
	}
}

// The 401 names where the metadata is and why a token was refused; the
// metadata names the resource and its issuer; expired, wrong-audience,
// wrong-issuer and unsigned tokens are refused with their reason.
func TestIssuedTokensRefusedWithAReason(t *testing.T) {
	t.Parallel()
	idp, base := issuedSetup(t)
	call := func(token string) (int, string, string) {
		req, _ := http.NewRequest("POST", base+"/v1/calls", strings.NewReader(`{"tool":"lookup","args":{"id":"1"}}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
	}
	metaURL := base + "/.well-known/oauth-protected-resource/mcp"
	st, challenge, _ := call("")
	if st != 401 || challenge != fmt.Sprintf(`Bearer realm="airlock", resource_metadata=%q`, metaURL) {
		t.Fatalf("no token: %d %q", st, challenge)
	}
	for _, u := range []string{metaURL, base + "/.well-known/oauth-protected-resource"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var meta oauthex.ProtectedResourceMetadata
		_ = json.NewDecoder(resp.Body).Decode(&meta)
		resp.Body.Close()
		if resp.StatusCode != 200 || meta.Resource != base+"/mcp" || len(meta.AuthorizationServers) != 1 || meta.AuthorizationServers[0] != idp.Issuer() {
			t.Fatalf("%s: %d %+v", u, resp.StatusCode, meta)
		}
	}
	now := time.Now()
	sign := func(edit func(gojwt.MapClaims)) string {
		c := gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc-1", "aud": base + "/mcp", "exp": now.Add(time.Minute).Unix()}
		if edit != nil {
			edit(c)
		}
		s, err := idp.Keypair.SignJWT(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if st, _, body := call(sign(nil)); st != 200 {
		t.Fatalf("a good token: %d %s", st, body)
	}
	none, _ := gojwt.NewWithClaims(gojwt.SigningMethodNone, gojwt.MapClaims{"iss": idp.Issuer(), "sub": "svc-1", "aud": base + "/mcp",
		"exp": now.Add(time.Minute).Unix()}).SignedString(gojwt.UnsafeAllowNoneSignatureType)
	for _, tc := range []struct{ name, token, reason string }{
		{"expired", sign(func(c gojwt.MapClaims) { c["exp"] = now.Add(-10 * time.Minute).Unix() }), "the token expired at"},
		{"wrong audience", sign(func(c gojwt.MapClaims) { c["aud"] = "https://other.example.com/mcp" }), "is not " + base + "/mcp"},
		{"wrong issuer", sign(func(c gojwt.MapClaims) { c["iss"] = "https://evil.example.com" }), "is not one airlock accepts"},
		{"unsigned", none, "unsigned token"},
	} {
		st, challenge, body := call(tc.token)
		if st != 401 || !strings.Contains(body, tc.reason) || !strings.Contains(challenge, `error="invalid_token"`) ||
			!strings.Contains(challenge, "resource_metadata=") || !strings.Contains(challenge, tc.reason) {
			t.Errorf("%s: %d %q %s", tc.name, st, challenge, body)
		}
	}
}

// TestJWTSubjectIsNotAStaticToken: a JWT whose subject is a static token's
// name is another principal: it cannot use the MCP session the static
// token opened, and it is audited under its qualified name.
func TestJWTSubjectIsNotAStaticToken(t *testing.T) {
	t.Parallel()
	idp, base, _ := issuedApp(t, "    - {name: agent-1, role: agent, sha256: \""+hexSHA256("static-secret")+"\"}\n")
	tok, err := idp.Keypair.SignJWT(gojwt.MapClaims{"iss": idp.Issuer(), "sub": "agent-1", "aud": base + "/mcp", "exp": time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	post := func(bearerToken, session, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+bearerToken)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	init := post("static-secret", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := init.Header.Get("Mcp-Session-Id")
	if init.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize with the static token: %d, session %q", init.StatusCode, session)
	}
	if resp := post(tok, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the JWT with sub=agent-1 on the static agent-1's session: %d, want 403", resp.StatusCode)
	}
	if resp := post("static-secret", session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("the static token on its own session: %d", resp.StatusCode)
	}
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
