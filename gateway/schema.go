package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/airlockhq/airlock"
)

// argsSchema validates a tool's arguments: first the common mistakes with
// messages that name the field (missing required field, wrong type,
// unknown field), then the whole JSON Schema.
type argsSchema struct {
	raw      map[string]any
	resolved *jsonschema.Resolved
	// covered: validate's own checks are the whole schema
	// (coveredBySchemaChecks), so the validator is not run.
	covered bool
	// alwaysFull runs the validator even so (tests compare the two).
	alwaysFull bool
	// declaredOnly refuses an argument the schema does not declare, at
	// any depth where it declares properties: a side-effecting tool's
	// upstream gets exactly what was keyed, looked up, checked by the rules
	// and shown (docs/gateway.md, "Declared arguments only").
	declaredOnly bool
}

func newArgsSchema(tool *airlock.Tool) (*argsSchema, error) {
	raw := tool.InputSchema
	if raw == nil {
		raw = map[string]any{"type": "object"}
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("tool %s: input_schema: %w", tool.Name, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input_schema: %w", tool.Name, err)
	}
	declaredOnly := tool.Kind == airlock.KindWrite || tool.Kind == airlock.KindIrreversible
	return &argsSchema{raw: raw, resolved: rs, covered: coveredBySchemaChecks(raw), declaredOnly: declaredOnly}, nil
}

// jsonSchemaJSON is the schema as JSON, for MCP tool lists.
func (a *argsSchema) jsonSchemaJSON() json.RawMessage {
	b, _ := json.Marshal(a.raw)
	return b
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil || !strings.ContainsAny(x.String(), ".eE") {
			return "integer"
		}
		return "number"
	case float64:
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func typeMatches(want, got string) bool {
	return want == got || (want == "number" && got == "integer")
}

var schemaPathRE = regexp.MustCompile(`/properties/([^/:\s]+)`)

// validate checks a call's parsed arguments.
func (a *argsSchema) validate(parsed *airlock.Args) error {
	args := parsed.Value()
	props, _ := a.raw["properties"].(map[string]any)
	if req, ok := a.raw["required"].([]any); ok {
		for _, r := range req {
			name, _ := r.(string)
			if v, present := args[name]; !present || v == nil {
				return airlock.FieldErrorf(airlock.CodeMissingField, name, "missing required field %q; nothing was executed", name)
			}
		}
	}
	if a.declaredOnly {
		if path := undeclared(a.raw, args, ""); path != "" {
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, path,
				"unknown field %q: a tool that changes something takes only the arguments its input_schema declares (the ones keyed, looked up, checked and shown), so that its service cannot read another in their place; nothing was executed", path)
		}
		// Free-form objects too: two names one lenient reader takes for
		// one (accountId, accountid) would let it read either.
		if field, x, y := airlock.FoldedNames(args, ""); x != "" {
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, field,
				"the members %q and %q differ only by case or by characters a reader may ignore: a service that matches names without regard to case could read one for the other; give one; nothing was executed", x, y)
		}
	}
	for name, v := range args {
		if a.checkField(props, name, v) != nil {
			// The first bad field by name, whatever the map's order.
			names := make([]string, 0, len(args))
			for k := range args {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, name := range names {
				if err := a.checkField(props, name, args[name]); err != nil {
					return err
				}
			}
		}
	}
	if hasNumberOutOfRange(args) {
		path, n, _ := numberOutOfRange(args, "")
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, path, "field %q: the number %s is out of range (a JSON number here must lie within ±1.8e308); nothing was executed", path, airlock.Shorten(n, 40))
	}
	if a.covered && !a.alwaysFull {
		return nil // the checks above are all the schema asks
	}
	// The full schema (enums, patterns, nested objects). jsonschema-go
	// wants plain JSON values, not json.Number, so it gets its own decoding
	// of the canonical bytes.
	var plain any
	if err := json.Unmarshal(parsed.JSON(), &plain); err != nil {
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, "args", "the arguments cannot be read as JSON values: %v; nothing was executed", err)
	}
	if err := a.resolved.Validate(plain); err != nil {
		field := ""
		if m := schemaPathRE.FindStringSubmatch(err.Error()); m != nil {
			field = m[1]
		}
		msg := strings.TrimPrefix(err.Error(), "validating root: ")
		return &airlock.Error{Code: airlock.CodeInvalidArgument, Field: field, Message: "the arguments do not match the tool's input schema: " + msg + "; nothing was executed"}
	}
	return nil
}

// undeclared is the path of the first member of v (by name, at any depth)
// that schema does not declare, where it declares properties; "" when
// there is none. An object schema without properties is free-form by its
// declaration, and so are its members.
func undeclared(schema map[string]any, v any, prefix string) string {
	switch x := v.(type) {
	case map[string]any:
		props, ok := schema["properties"].(map[string]any)
		if !ok {
			return ""
		}
		if allDeclared(props, x) {
			return "" // the common case, without sorting
		}
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			p, declared := props[k].(map[string]any)
			if !declared {
				return prefix + k
			}
			if path := undeclared(p, x[k], prefix+k+"."); path != "" {
				return path
			}
		}
	case []any:
		items, ok := schema["items"].(map[string]any)
		if !ok {
			return ""
		}
		for i, e := range x {
			if path := undeclared(items, e, prefix+strconv.Itoa(i)+"."); path != "" {
				return path
			}
		}
	}
	return ""
}

// allDeclared reports whether every member of x, at every depth, is
// declared by props.
func allDeclared(props, x map[string]any) bool {
	for k, v := range x {
		p, ok := props[k].(map[string]any)
		if !ok {
			return false
		}
		switch v.(type) {
		case map[string]any, []any:
			if undeclared(p, v, "") != "" {
				return false
			}
		}
	}
	return true
}

// checkField checks one argument against its property: known (where
// additionalProperties is false) and of its type.
func (a *argsSchema) checkField(props map[string]any, name string, v any) error {
	p, known := props[name].(map[string]any)
	if !known {
		if ap, ok := a.raw["additionalProperties"].(bool); ok && !ap {
			known := make([]string, 0, len(props))
			for k := range props {
				known = append(known, k)
			}
			sort.Strings(known)
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "unknown field %q: the fields are %s; nothing was executed", name, strings.Join(known, ", "))
		}
		return nil
	}
	if want, ok := p["type"].(string); ok {
		if got := jsonType(v); !typeMatches(want, got) {
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, name, "field %q must be %s, not %s; nothing was executed", name, article(want), article(got))
		}
	}
	return nil
}

// coveredBySchemaChecks reports whether validate's own checks (required
// fields present, no unknown field where additionalProperties is false,
// each property's single type) are all a schema asks, so that running the
// full JSON Schema validator would refuse nothing more: a schema of only
// those keywords and annotations. Anything else (enum, pattern, bounds,
// nested properties, items, combinators, formats, a list of types) is
// left to the validator.
func coveredBySchemaChecks(raw map[string]any) bool {
	for k, v := range raw {
		switch k {
		case "type":
			if v != "object" {
				return false
			}
		case "properties":
			props, ok := v.(map[string]any)
			if !ok {
				return false
			}
			for _, p := range props {
				if !coveredProperty(p) {
					return false
				}
			}
		case "required":
			list, ok := v.([]any)
			if !ok {
				return false
			}
			for _, r := range list {
				if _, ok := r.(string); !ok {
					return false
				}
			}
		case "additionalProperties":
			if _, ok := v.(bool); !ok {
				return false
			}
		case "$schema", "$comment", "title", "description":
		default:
			return false
		}
	}
	return true
}

func coveredProperty(p any) bool {
	m, ok := p.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range m {
		switch k {
		case "type":
			switch v {
			case "string", "number", "integer", "boolean", "null", "object", "array":
			default:
				return false
			}
		case "$comment", "title", "description", "examples", "default", "deprecated", "readOnly", "writeOnly":
		default:
			return false
		}
	}
	return true
}

func article(t string) string {
	switch t {
	case "array", "integer", "object":
		return "an " + t
	case "null":
		return "null"
	}
	return "a " + t
}

// hasNumberOutOfRange reports whether v holds a number no float64 holds
// (numberOutOfRange then names the first, in order).
func hasNumberOutOfRange(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, err := strconv.ParseFloat(x.String(), 64)
		return err != nil
	case map[string]any:
		for _, e := range x {
			if hasNumberOutOfRange(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasNumberOutOfRange(e) {
				return true
			}
		}
	}
	return false
}

// numberOutOfRange finds a number no float64 holds (1e999999999), which
// the schema validator would read as null: the call is refused naming the
// field (a dotted path, with array indexes) instead.
func numberOutOfRange(v any, path string) (string, string, bool) {
	switch x := v.(type) {
	case json.Number:
		if _, err := strconv.ParseFloat(x.String(), 64); err != nil {
			return path, x.String(), true
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if fp, n, ok := numberOutOfRange(x[k], p); ok {
				return fp, n, true
			}
		}
	case []any:
		for i, e := range x {
			if fp, n, ok := numberOutOfRange(e, path+"."+strconv.Itoa(i)); ok {
				return fp, n, true
			}
		}
	}
	return "", "", false
}
