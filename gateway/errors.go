package gateway

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/airlockhq/airlock"
)

// status maps error codes to HTTP statuses, in one place.
func status(code airlock.Code) int {
	switch code {
	case airlock.CodeInvalidArgument, airlock.CodeMissingField:
		return http.StatusBadRequest
	case airlock.CodeUnauthenticated:
		return http.StatusUnauthorized
	case airlock.CodeForbidden, airlock.CodeNotCallable:
		return http.StatusForbidden
	case airlock.CodeUnknownTool, airlock.CodeNotFound:
		return http.StatusNotFound
	case airlock.CodeConflict, airlock.CodeLeaseLost:
		return http.StatusConflict
	case airlock.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case airlock.CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case airlock.CodeArgumentsMismatch:
		return http.StatusUnprocessableEntity
	case airlock.CodeBudgetExceeded, airlock.CodeTooManyAttempts:
		return http.StatusTooManyRequests
	case airlock.CodeNotSent, airlock.CodeUpstream:
		return http.StatusBadGateway
	case airlock.CodeStoreUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// errorBody is {"error": {"code", "message", "field"}}.
type errorBody struct {
	Error *airlock.Error `json:"error"`
}

// asError turns any error into an *airlock.Error fit to show a caller:
// errors without a code become "internal" with a generic message.
func asError(err error) *airlock.Error {
	var e *airlock.Error
	if errors.As(err, &e) && e.Code != airlock.CodeInternal && e.Message != "" {
		return &airlock.Error{Code: e.Code, Message: e.Message, Field: e.Field}
	}
	if errors.As(err, &e) && e.Message == "" {
		return &airlock.Error{Code: e.Code, Message: string(e.Code), Field: e.Field}
	}
	return &airlock.Error{Code: airlock.CodeInternal, Message: "internal error; the operator's log has the details"}
}

func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	e := asError(err)
	if e.Code == airlock.CodeInternal || e.Code == airlock.CodeStoreUnavailable {
		log.Error("airlock: request failed", "err", err)
	}
	writeJSON(w, status(e.Code), errorBody{e})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
