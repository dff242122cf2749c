package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// openAPIRouter loads docs/openapi.yaml once, checks it is a valid
// OpenAPI 3 document, and routes requests by its paths.
var openAPIRouter = sync.OnceValues(func() (routers.Router, error) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	doc.Servers = nil // any host: the servers in the tests listen on free ports
	return legacy.NewRouter(doc)
})

func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	if _, err := openAPIRouter(); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
}

// specChecked is an HTTP client whose every answer is checked against
// docs/openapi.yaml (its status, its content type, its body's schema); a
// request the document does not allow must not be answered 200.
func specChecked(t *testing.T) *http.Client {
	t.Helper()
	router, err := openAPIRouter()
	if err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var body []byte
		if req.Body != nil {
			body, _ = io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s is not in docs/openapi.yaml: %v", req.Method, req.URL.Path, err)
			return resp, nil
		}
		opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
		checked := req.Clone(context.Background())
		checked.Body = io.NopCloser(bytes.NewReader(body))
		in := &openapi3filter.RequestValidationInput{Request: checked, PathParams: params, Route: route, Options: opts}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && resp.StatusCode == http.StatusOK {
			t.Errorf("%s %s %s: answered 200, but docs/openapi.yaml does not allow the request: %v", req.Method, req.URL.Path, body, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(answer))
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
		out.SetBodyBytes(answer)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s %s %s: the answer %d %s does not match docs/openapi.yaml: %v", req.Method, req.URL.Path, body, resp.StatusCode, answer, err)
		}
		return resp, nil
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
