package jwt

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// RefetchEvery bounds how often an issuer's keys are fetched again for a
// token that names a key id not among them (the issuer rotated its keys):
// at most once per RefetchEvery per issuer, so that tokens with made-up
// key ids cannot make airlock fetch the keys for every request. A key
// published meanwhile is found at the next fetch after the interval.
const RefetchEvery = 30 * time.Second

// maxJWKSBytes bounds an issuer's key set document.
const maxJWKSBytes = 1 << 20

// keySet is an issuer's published keys (its JWKS), fetched on first use and
// again, at most once per RefetchEvery, when a token names a key id it
// does not hold. A known key id whose signature fails is refused without a
// fetch: that token is forged, not signed by a new key.
type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time // zero until a fetch succeeded
}

// errSignature is a signature that no key of the issuer verifies.
var errSignature = fmt.Errorf("%w: the signature does not verify", ErrRefused)

// verify returns the payload jws signs, verified by one of the issuer's
// keys; errSignature when none verifies, another error when the keys
// could not be fetched.
func (k *keySet) verify(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	kid := ""
	if len(jws.Signatures) > 0 {
		kid = jws.Signatures[0].Header.KeyID
	}
	keys, err := k.current(ctx)
	if err != nil {
		return nil, err
	}
	p, known := tryKeys(jws, keys, kid)
	switch {
	case p != nil:
		return p, nil
	case known:
		return nil, errSignature // a known key did not sign it: forged, nothing to fetch
	}
	// An unknown key id: perhaps a rotation.
	keys, fresh, err := k.refetch(ctx)
	if err != nil {
		return nil, err
	}
	if fresh {
		if p, _ := tryKeys(jws, keys, kid); p != nil {
			return p, nil
		}
	}
	return nil, errSignature
}

// tryKeys verifies jws with the keys that match kid (all of them when the
// token names none); known says a key with that id exists.
func tryKeys(jws *jose.JSONWebSignature, keys []jose.JSONWebKey, kid string) (payload []byte, known bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		known = kid != ""
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, true
		}
	}
	return nil, known
}

// current returns the keys, fetching them the first time.
func (k *keySet) current(ctx context.Context) ([]jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.fetched.IsZero() {
		return k.keys, nil
	}
	return k.fetchLocked(ctx)
}

// refetch fetches the keys again unless they were fetched less than
// RefetchEvery ago; fresh says it did.
func (k *keySet) refetch(ctx context.Context) (keys []jose.JSONWebKey, fresh bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.now().Sub(k.fetched) < RefetchEvery {
		return k.keys, false, nil
	}
	keys, err = k.fetchLocked(ctx)
	return keys, err == nil, err
}

func (k *keySet) fetchLocked(ctx context.Context) ([]jose.JSONWebKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, fmt.Errorf("jwt: fetching keys from %s: %w", k.url, err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwt: fetching keys from %s: %w", k.url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("jwt: fetching keys from %s: %w", k.url, err)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("jwt: fetching keys from %s: %s", k.url, resp.Status)
	case len(body) > maxJWKSBytes:
		return nil, fmt.Errorf("jwt: the key set at %s is larger than %d bytes", k.url, maxJWKSBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("jwt: the key set at %s is not a JWKS: %w", k.url, err)
	}
	k.keys, k.fetched = set.Keys, k.now()
	return k.keys, nil
}
