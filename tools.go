package airlock

import (
	"cmp"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"
)

// ToolKind says what a tool does to the world.
type ToolKind string

// Tool kinds.
const (
	KindRead         ToolKind = "read"         // no side effect
	KindWrite        ToolKind = "write"        // a side effect that can be undone or is harmless to repeat under a key
	KindIrreversible ToolKind = "irreversible" // money, mail, deletion, external systems: plan → approve → commit
)

// SideEffecting reports whether calls of this kind go through the guard.
func (k ToolKind) SideEffecting() bool { return k == KindWrite || k == KindIrreversible }

// Defaults for tool settings left out of the manifest.
const (
	DefaultGrace      = 10 * time.Minute
	DefaultTimeout    = 30 * time.Second
	DefaultRepeatWait = 15 * time.Second
)

// Catalog is the domain part of the manifest (docs/configuration.md, "The
// manifest"): the tools agents may call and the calendar their business-day
// windows count in. The server's configuration around it — auth, upstreams,
// limits, notify, retention — is package manifest's Manifest, which embeds
// a Catalog.
type Catalog struct {
	Calendar Calendar `yaml:"calendar" json:"calendar"`
	Tools    []*Tool  `yaml:"tools" json:"tools"`

	// Source is the file the catalog came from, for messages; set by the loader.
	Source string `yaml:"-" json:"-"`
	// Files reads files the tools name (rule tests), relative to the
	// manifest's directory; set by the loader, nil for a catalog built in code.
	Files fs.FS `yaml:"-" json:"-"`

	byName map[string]*Tool
}

// ToolCheck checks one tool against what lies outside the catalog (the
// manifest's upstreams); it returns the tool's problems, with path the
// tool's place ("tools[3]").
type ToolCheck func(t *Tool, path string) []Problem

// Validate reports every problem with the calendar and the tools, each
// with its path.
func (m *Catalog) Validate() error { return m.ValidateWith(nil) }

// ValidateWith is Validate with check run on every tool as well.
func (m *Catalog) ValidateWith(check ToolCheck) error {
	v := &validator{}
	m.Calendar.validate(v)
	if len(m.Tools) == 0 {
		v.add("tools", "at least one tool is required")
	}
	seen := map[string]int{}
	usesBusinessDay := false
	for i, t := range m.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t == nil {
			v.add(p, "empty tool entry")
			continue
		}
		if j, dup := seen[t.Name]; dup && t.Name != "" {
			v.add(p+".name", "tool %q is declared twice (first at tools[%d])", t.Name, j)
		}
		seen[t.Name] = i
		t.validate(v, p, m)
		if check != nil {
			v.problems = append(v.problems, check(t, p)...)
		}
		if t.Window != nil && t.Window.Kind == WindowBusinessDay {
			usesBusinessDay = true
		}
	}
	if usesBusinessDay && m.Calendar.Timezone.Name == "" {
		v.add("calendar.timezone", "required: a tool uses the business_day window (for example America/New_York)")
	}
	return v.err()
}

// Calendar defines business days for business_day windows.
type Calendar struct {
	Timezone Timezone `yaml:"timezone" json:"timezone"`
	// Cutoff: a call at or after it belongs to the next business day.
	// Default: none (the day ends at midnight).
	Cutoff   *ClockTime `yaml:"cutoff" json:"cutoff,omitempty"`
	Holidays []Date     `yaml:"holidays" json:"holidays,omitempty"`
}

// DefaultCacheBytes bounds the record cache by bytes (Config.CacheBytes).
const DefaultCacheBytes = 64 << 20

// Roles.
const (
	RoleAgent    = "agent"
	RoleApprover = "approver"
	RoleAdmin    = "admin"
	// RoleSystem is airlock acting by itself (reconciliation); no token
	// can hold it.
	RoleSystem = "system"
)

// RoleRank orders the roles for "the highest wins": agent < approver <
// admin; any other string is 0.
func RoleRank(role string) int {
	switch role {
	case RoleAgent:
		return 1
	case RoleApprover:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// Tool is one operation an agent may call.
type Tool struct {
	Name        string         `yaml:"name" json:"name"`
	Kind        ToolKind       `yaml:"kind" json:"kind"`
	Description string         `yaml:"description" json:"description,omitempty"`
	InputSchema map[string]any `yaml:"input_schema" json:"input_schema,omitempty"`
	NaturalKey  []KeyField     `yaml:"natural_key" json:"natural_key,omitempty"`
	Window      *Window        `yaml:"window" json:"window,omitempty"`
	// Grace: a repeat from the same run this long after a window boundary
	// matches the previous window's record. Default 10m.
	Grace *Duration `yaml:"grace" json:"grace,omitempty"`
	// Timeout: the upstream call limit. Default 30s.
	Timeout *Duration `yaml:"timeout" json:"timeout,omitempty"`
	// RespondWithin: answer in_progress after this long while the call goes
	// on. Default: wait for the outcome (bounded by Timeout).
	RespondWithin *Duration `yaml:"respond_within" json:"respond_within,omitempty"`
	// RepeatWait: how long a repeat waits for a running first call. Default 15s.
	RepeatWait *Duration `yaml:"repeat_wait" json:"repeat_wait,omitempty"`
	// OnMismatch: what a repeat with other arguments gets. Default replay.
	OnMismatch     MismatchPolicy `yaml:"on_mismatch" json:"on_mismatch,omitempty"`
	MaxCallsPerRun int            `yaml:"max_calls_per_run" json:"max_calls_per_run,omitempty"` // 0: no limit
	ReconcileWith  string         `yaml:"reconcile_with" json:"reconcile_with,omitempty"`
	// Reconcile says how reconcile_with's answer tells whether in-doubt work
	// happened, so that the reaper settles such records by itself. Default:
	// none (a person reads the answer and settles).
	Reconcile *Reconcile    `yaml:"reconcile" json:"reconcile,omitempty"`
	Upstream  *ToolUpstream `yaml:"upstream" json:"upstream,omitempty"`
	Answers   Answers       `yaml:"answers" json:"answers"`
	Approval  *Approval     `yaml:"approval" json:"approval,omitempty"`
	// Display says which values are money and which argument is the
	// agent's note, for the people who read plans. Default: none.
	Display *Display `yaml:"display" json:"display,omitempty"`

	// HonorsKey is set by Prepare from the upstream's honors_idempotency_key:
	// an outcome-unknown call may be re-driven with the same key.
	HonorsKey bool `yaml:"-" json:"-"`
}

// Reconcile holds CEL conditions over the reconcile_with tool's answer
// (result), the in-doubt call's arguments (args) and the tool's name (tool).
// When HappenedWhen holds, the record is settled as happened, with the
// answer as its result; when NotHappenedWhen holds, it is settled as not
// happened and its key is freed. When neither holds (or the read tool
// fails), the record stays in doubt and is asked about again later.
type Reconcile struct {
	HappenedWhen    string `yaml:"happened_when" json:"happened_when"`
	NotHappenedWhen string `yaml:"not_happened_when" json:"not_happened_when,omitempty"`
}

// MismatchPolicy is what a repeat with the same key and other arguments gets.
type MismatchPolicy string

// Mismatch policies.
const (
	MismatchReplay MismatchPolicy = "replay" // the first result, repeat: true, and a conflict naming the fields
	MismatchReject MismatchPolicy = "reject" // a clear refusal
)

// KeyField is one natural-key field: a path into the arguments and the
// normalizers applied, in order, before it goes into the key.
type KeyField struct {
	Field     string   `yaml:"field" json:"field"`
	Normalize []string `yaml:"normalize" json:"normalize,omitempty"`
}

// ToolUpstream names the upstream that executes a tool: a path for HTTP
// upstreams, a tool name for MCP upstreams; or, with Caller, none: the
// caller runs the work itself, as a function in its own process, through
// the claims API (docs/gateway.md, "The claims API").
type ToolUpstream struct {
	Name   string `yaml:"name" json:"name,omitempty"`
	Path   string `yaml:"path" json:"path,omitempty"`
	Tool   string `yaml:"tool" json:"tool,omitempty"`
	Caller bool   `yaml:"caller" json:"caller,omitempty"`
	// HonorsIdempotencyKey, for a tool run by its caller: the caller passes
	// airlock's key to a service that runs a key once, so a claim whose
	// holder vanished may be taken over and run again with the same key
	// (rather than left in doubt).
	HonorsIdempotencyKey bool `yaml:"honors_idempotency_key" json:"honors_idempotency_key,omitempty"`
	// Workers, for an irreversible tool run by its caller: the principals
	// whose commit workers (POST /v1/commits/next) carry out its approved
	// plans, whoever proposed them. Default: none — a plan is given only to
	// a worker of the principal that proposed it (docs/gateway.md, "Commit
	// workers").
	Workers []string `yaml:"workers" json:"workers,omitempty"`
}

// CommitWorkers are the principals named in t's upstream.workers.
func (t *Tool) CommitWorkers() []string {
	if t.Upstream == nil {
		return nil
	}
	return t.Upstream.Workers
}

// RunByCaller reports whether the tool's work is run by its caller through
// the claims API; such a tool is never callable through the gateway.
func (t *Tool) RunByCaller() bool { return t.Upstream != nil && t.Upstream.Caller }

// CallerTakesOver reports whether a claim of the tool whose holder vanished
// is taken over by the next caller with the same key (a tool run by its
// caller that honours keys) rather than left in doubt.
func (t *Tool) CallerTakesOver() bool { return t.RunByCaller() && t.HonorsKey }

// Answers are the three questions every side-effecting tool must answer.
type Answers struct {
	Undo     string `yaml:"undo" json:"undo,omitempty"`
	Approver string `yaml:"approver" json:"approver,omitempty"`
	OnRepeat string `yaml:"on_repeat" json:"on_repeat,omitempty"`
}

// Approval is the plan → approve → commit configuration of an irreversible tool.
type Approval struct {
	Lookup *Lookup `yaml:"lookup" json:"lookup,omitempty"`
	Rules  []Rule  `yaml:"rules" json:"rules"`
	// Approvers are who may decide the tool's plans: principals' qualified
	// names (a static token's name, oidc:EMAIL, jwt:ISSUER#SUBJECT) and
	// group:NAME for a group or role an OIDC or JWT principal holds.
	// Default: any approver or admin.
	Approvers []string `yaml:"approvers" json:"approvers,omitempty"`
	// AllowSelfApproval, when set, lets the principal that proposed a plan
	// approve it; its text is the reason, shown by tools list. Default:
	// separation of duties (the proposer may not approve).
	AllowSelfApproval string    `yaml:"allow_self_approval" json:"allow_self_approval,omitempty"`
	ExpiresAfter      *Duration `yaml:"expires_after" json:"expires_after,omitempty"`
	WaitForCommit     *Duration `yaml:"wait_for_commit" json:"wait_for_commit,omitempty"`
	Tests             string    `yaml:"tests" json:"tests,omitempty"`
}

// ExpiresAfterOr is how long a plan waits for a person before it expires:
// expires_after, default 24h.
func (a *Approval) ExpiresAfterOr() time.Duration {
	if a != nil && a.ExpiresAfter != nil && a.ExpiresAfter.IsSet() {
		return a.ExpiresAfter.Duration
	}
	return 24 * time.Hour
}

// Lookup names the read tool whose result becomes the facts, and how its
// arguments are taken from the plan's arguments (CEL expressions).
type Lookup struct {
	Tool string            `yaml:"tool" json:"tool"`
	Args map[string]string `yaml:"args" json:"args,omitempty"`
}

// Rule is a named approval rule; the first whose When holds decides.
type Rule struct {
	Name   string `yaml:"name" json:"name"`
	When   string `yaml:"when" json:"when"`
	Decide string `yaml:"decide" json:"decide"`
	// Approvals is how many distinct people must approve a plan this rule
	// leaves to people (decide: human). Default 1; from 1 to 10.
	Approvals int `yaml:"approvals" json:"approvals,omitempty"`
}

// MaxApprovals bounds a rule's approvals.
const MaxApprovals = 10

// DecisionPolicy is the approval's rule of who decides.
func (a *Approval) DecisionPolicy() DecisionPolicy {
	if a == nil {
		return DecisionPolicy{}
	}
	return DecisionPolicy{SelfApproval: strings.TrimSpace(a.AllowSelfApproval) != "", Approvers: a.Approvers}
}

// Tool returns the tool with that name, or nil. It needs Prepare.
func (m *Catalog) Tool(name string) *Tool {
	if m.byName == nil {
		return nil
	}
	return m.byName[name]
}

// ToolNames returns the tools' names in manifest order.
func (m *Catalog) ToolNames() []string {
	names := make([]string, len(m.Tools))
	for i, t := range m.Tools {
		names[i] = t.Name
	}
	return names
}

// Prepare applies defaults, indexes the tools and validates. Call it once
// after building a catalog in code (the manifest's loader prepares its
// own: manifest.Manifest.Prepare).
func (m *Catalog) Prepare() error {
	m.ApplyDefaults()
	return m.Validate()
}

// ApplyDefaults indexes the tools by name and fills in what they left out.
func (m *Catalog) ApplyDefaults() {
	m.byName = make(map[string]*Tool, len(m.Tools))
	for _, t := range m.Tools {
		if t == nil {
			continue
		}
		if _, dup := m.byName[t.Name]; !dup {
			m.byName[t.Name] = t
		}
		if t.OnMismatch == "" {
			t.OnMismatch = MismatchReplay
		}
	}
}

// GraceOr returns the tool's grace, DefaultGrace when unset.
func (t *Tool) GraceOr() time.Duration { return durOr(t.Grace, DefaultGrace) }

// TimeoutOr returns the tool's timeout, DefaultTimeout when unset.
func (t *Tool) TimeoutOr() time.Duration { return durOr(t.Timeout, DefaultTimeout) }

// RepeatWaitOr returns the tool's repeat_wait, DefaultRepeatWait when unset.
func (t *Tool) RepeatWaitOr() time.Duration { return durOr(t.RepeatWait, DefaultRepeatWait) }

// RespondWithinOr returns respond_within, 0 (wait for the outcome) when unset.
func (t *Tool) RespondWithinOr() time.Duration { return durOr(t.RespondWithin, 0) }

func durOr(d *Duration, def time.Duration) time.Duration {
	if d == nil || !d.IsSet() {
		return def
	}
	return d.Duration
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// ValidToolName reports whether name may name a tool: a letter, then
// letters, digits, _ . or - (at most 64).
func ValidToolName(name string) bool { return toolNameRE.MatchString(name) }

func (c *Calendar) validate(v *validator) {
	if c.Timezone.Name != "" && c.Timezone.err != nil {
		v.add("calendar.timezone", "%v", c.Timezone.err)
	}
	if c.Cutoff != nil && c.Cutoff.err != nil {
		v.add("calendar.cutoff", "%v", c.Cutoff.err)
	}
	for i, d := range c.Holidays {
		if d.err != nil {
			v.add(fmt.Sprintf("calendar.holidays[%d]", i), "%v", d.err)
		}
	}
}

func (t *Tool) validate(v *validator, p string, m *Catalog) {
	if !toolNameRE.MatchString(t.Name) {
		v.add(p+".name", "%q is not a tool name: want a letter, then letters, digits, _ . or - (at most 64)", t.Name)
	}
	name := t.Name
	switch t.Kind {
	case KindRead, KindWrite, KindIrreversible:
	case "":
		v.add(p+".kind", "tool %s: required: read, write or irreversible", name)
	default:
		v.add(p+".kind", "tool %s: %q is not a kind: want read, write or irreversible", name, t.Kind)
	}
	if t.InputSchema != nil {
		if typ, _ := t.InputSchema["type"].(string); typ != "object" {
			v.add(p+".input_schema.type", "tool %s: the input schema must be {type: object, ...}", name)
		}
		if t.Kind == KindWrite || t.Kind == KindIrreversible {
			// Such a tool takes only the arguments it declares
			// (docs/gateway.md, "Declared arguments only").
			if ap, ok := t.InputSchema["additionalProperties"]; ok && ap != false {
				v.add(p+".input_schema.additionalProperties", "tool %s: a tool that changes something takes only the arguments it declares: declare each in properties instead", name)
			}
			if path, a, b := foldedPropertyNames(t.InputSchema, ""); a != "" {
				v.add(p+".input_schema", "tool %s: properties %q and %q of %s differ only by case: a service that matches names without regard to case could read one for the other; give them distinct names", name, a, b, path)
			}
			if path, kw := uncheckableSchema(t.InputSchema, ""); kw != "" {
				v.add(p+".input_schema", "tool %s: %s uses %s, which airlock cannot follow member by member to take only the declared arguments: declare the object's properties (and an array's items) directly", name, cmp.Or(path, "the schema"), kw)
			}
		}
	}
	for _, d := range []struct {
		field string
		d     *Duration
	}{{"grace", t.Grace}, {"timeout", t.Timeout}, {"respond_within", t.RespondWithin}, {"repeat_wait", t.RepeatWait}} {
		if d.d != nil && d.d.problem() != nil {
			v.add(p+"."+d.field, "tool %s: %v", name, d.d.problem())
		}
	}
	if t.Window != nil && t.Window.err != nil {
		v.add(p+".window", "tool %s: %v", name, t.Window.err)
	}
	switch t.OnMismatch {
	case MismatchReplay, MismatchReject, "":
	default:
		v.add(p+".on_mismatch", "tool %s: %q is not allowed: want replay or reject", name, t.OnMismatch)
	}
	if t.MaxCallsPerRun < 0 {
		v.add(p+".max_calls_per_run", "tool %s: must be 0 (no limit) or more", name)
	}
	if t.Display != nil {
		t.Display.validate(v, p+".display", t)
	}
	if !t.Kind.SideEffecting() {
		if len(t.NaturalKey) > 0 {
			v.add(p+".natural_key", "tool %s: a read tool has no key; make it write or irreversible to guard it", name)
		}
		if t.Approval != nil {
			v.add(p+".approval", "tool %s: only irreversible tools have an approval", name)
		}
		return
	}
	// The three questions (docs/concepts.md, "The three questions").
	for _, q := range []struct{ field, question, answer string }{
		{"undo", "can it be undone", t.Answers.Undo},
		{"approver", "who approves it", t.Answers.Approver},
		{"on_repeat", "what happens if it repeats", t.Answers.OnRepeat},
	} {
		if strings.TrimSpace(q.answer) == "" {
			v.add(p+".answers."+q.field, "tool %s: missing answer to %q (answers.%s); without the three answers a tool can only be read", name, q.question, q.field)
		}
	}
	if len(t.NaturalKey) == 0 {
		v.add(p+".natural_key", "tool %s: required for %s tools: the argument fields that make one piece of work unique", name, t.Kind)
	}
	seenField := map[string]bool{}
	for i, kf := range t.NaturalKey {
		fp := fmt.Sprintf("%s.natural_key[%d]", p, i)
		if kf.Field == "" {
			v.add(fp+".field", "tool %s: required: a path into the arguments such as record_id or payee.account", name)
			continue
		}
		if seenField[kf.Field] {
			v.add(fp+".field", "tool %s: field %q is listed twice", name, kf.Field)
		}
		seenField[kf.Field] = true
		if !schemaHasPath(t.InputSchema, kf.Field) {
			v.add(fp+".field", "tool %s: natural-key field %q is not in the input schema's properties", name, kf.Field)
		}
		for j, n := range kf.Normalize {
			if _, ok := normalizers[n]; !ok {
				v.add(fmt.Sprintf("%s.normalize[%d]", fp, j), "tool %s: %q is not a normalizer: want one of %s", name, n, strings.Join(NormalizerNames(), ", "))
			}
		}
	}
	if t.Window == nil {
		v.add(p+".window", "tool %s: required for %s tools: business_day, run, forever or a duration such as 24h", name, t.Kind)
	}
	if t.Reconcile != nil {
		switch {
		case t.ReconcileWith == "":
			v.add(p+".reconcile", "tool %s: reconcile needs reconcile_with: the read tool whose answer it reads", name)
		case strings.TrimSpace(t.Reconcile.HappenedWhen) == "":
			v.add(p+".reconcile.happened_when", "tool %s: required: a CEL condition over result that holds when the work happened", name)
		}
	}
	if t.ReconcileWith != "" {
		if r := m.Tool(t.ReconcileWith); r == nil {
			v.add(p+".reconcile_with", "tool %s: no tool named %q", name, t.ReconcileWith)
		} else if r.Kind != KindRead {
			v.add(p+".reconcile_with", "tool %s: %q must be a read tool", name, t.ReconcileWith)
		}
	}
	switch {
	case t.Kind == KindIrreversible && t.Approval == nil:
		v.add(p+".approval", "tool %s: required for irreversible tools: the rules that decide auto or human approval", name)
	case t.Kind == KindWrite && t.Approval != nil:
		v.add(p+".approval", "tool %s: only irreversible tools have an approval", name)
	case t.Approval != nil:
		t.Approval.validate(v, p+".approval", name, m)
	}
}

func (a *Approval) validate(v *validator, p, name string, m *Catalog) {
	if a.Lookup != nil {
		if r := m.Tool(a.Lookup.Tool); r == nil {
			v.add(p+".lookup.tool", "tool %s: no tool named %q", name, a.Lookup.Tool)
		} else if r.Kind != KindRead {
			v.add(p+".lookup.tool", "tool %s: %q must be a read tool (facts come from the system of record)", name, a.Lookup.Tool)
		}
	}
	if len(a.Rules) == 0 {
		v.add(p+".rules", "tool %s: at least one rule is required", name)
	}
	seen := map[string]bool{}
	for i, r := range a.Rules {
		rp := fmt.Sprintf("%s.rules[%d]", p, i)
		if r.Name == "" {
			v.add(rp+".name", "tool %s: every rule needs a name", name)
		} else if seen[r.Name] {
			v.add(rp+".name", "tool %s: rule %q is declared twice", name, r.Name)
		}
		seen[r.Name] = true
		if strings.TrimSpace(r.When) == "" {
			v.add(rp+".when", "tool %s: rule %q: required: a CEL condition", name, r.Name)
		}
		if r.Decide != "auto" && r.Decide != "human" {
			v.add(rp+".decide", "tool %s: rule %q: %q is not a decision: want auto or human", name, r.Name, r.Decide)
		}
		switch {
		case r.Approvals != 0 && r.Decide == "auto":
			v.add(rp+".approvals", "tool %s: rule %q: approvals is for rules that decide: human", name, r.Name)
		case r.Approvals < 0 || r.Approvals > MaxApprovals:
			v.add(rp+".approvals", "tool %s: rule %q: must be from 1 to %d, not %d", name, r.Name, MaxApprovals, r.Approvals)
		}
	}
	seenApprover := map[string]bool{}
	for i, who := range a.Approvers {
		ap := fmt.Sprintf("%s.approvers[%d]", p, i)
		switch g, isGroup := strings.CutPrefix(who, "group:"); {
		case strings.TrimSpace(who) == "" || (isGroup && strings.TrimSpace(g) == ""):
			v.add(ap, "tool %s: an approver is a principal's name (alice, oidc:alice@example.com, jwt:ISSUER#SUBJECT) or group:NAME, not %q", name, who)
		case seenApprover[who]:
			v.add(ap, "tool %s: approver %q is listed twice", name, who)
		}
		seenApprover[who] = true
	}
	// A rule asking for more distinct people than the list can ever name
	// leaves its plans waiting until they expire: refused at load. (A
	// group can hold any number of people.)
	if len(a.Approvers) > 0 && !slices.ContainsFunc(a.Approvers, func(who string) bool { return strings.HasPrefix(who, "group:") }) {
		for i, r := range a.Rules {
			if r.Decide == "human" && r.Approvals > len(seenApprover) {
				v.add(fmt.Sprintf("%s.rules[%d].approvals", p, i), "tool %s: rule %q asks for %d distinct approvers, but approval.approvers names only %d (%s) and no group: its plans could never be approved",
					name, r.Name, r.Approvals, len(seenApprover), strings.Join(a.Approvers, ", "))
			}
		}
	}
	for _, d := range []struct {
		field string
		d     *Duration
	}{{"expires_after", a.ExpiresAfter}, {"wait_for_commit", a.WaitForCommit}} {
		if d.d != nil && d.d.problem() != nil {
			v.add(p+"."+d.field, "tool %s: %v", name, d.d.problem())
		}
	}
}

// foldedPropertyNames finds two property names of one object in schema
// (at any depth) that are equal under Unicode case folding; the object's
// path ("" for the top level) and the two names, or "".
func foldedPropertyNames(schema map[string]any, path string) (where, a, b string) {
	props, _ := schema["properties"].(map[string]any)
	names := slices.Sorted(maps.Keys(props))
	for i, n := range names {
		for _, m := range names[i+1:] {
			if FoldName(n) == FoldName(m) {
				return cmp.Or(path, "the arguments"), n, m
			}
		}
		if sub, ok := props[n].(map[string]any); ok {
			if w, x, y := foldedPropertyNames(sub, strings.TrimPrefix(path+"."+n, ".")); x != "" {
				return w, x, y
			}
			if items, ok := sub["items"].(map[string]any); ok {
				if w, x, y := foldedPropertyNames(items, strings.TrimPrefix(path+"."+n+"[]", ".")); x != "" {
					return w, x, y
				}
			}
		}
	}
	return "", "", ""
}

// schemaHasPath reports whether a dotted path names a property of a JSON
// schema (through nested objects' properties and arrays' items).
func schemaHasPath(schema map[string]any, path string) bool {
	_, ok := schemaAt(schema, path)
	return ok
}

// schemaAt is the schema of the property a dotted path names.
func schemaAt(schema map[string]any, path string) (map[string]any, bool) {
	cur := schema
	for _, seg := range strings.Split(path, ".") {
		if cur == nil {
			return nil, false
		}
		if items, ok := cur["items"].(map[string]any); ok && isIndex(seg) {
			cur = items
			continue
		}
		props, _ := cur["properties"].(map[string]any)
		next, ok := props[seg].(map[string]any)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

// Warnings are what a valid catalog may still get wrong: natural-key fields
// whose type the input schema leaves open. Such a field may arrive as text
// one time and as a number the next ("1.0" and 1.0), and text is keyed as
// written while a number is keyed by its value: give the field one type.
func (m *Catalog) Warnings() []Problem {
	var out []Problem
	for i, t := range m.Tools {
		if t == nil || !t.Kind.SideEffecting() {
			continue
		}
		for j, kf := range t.NaturalKey {
			prop, ok := schemaAt(t.InputSchema, kf.Field)
			if !ok {
				continue // a problem Validate reports
			}
			types := schemaTypes(prop["type"])
			path := fmt.Sprintf("tools[%d].natural_key[%d].field", i, j)
			switch {
			case len(types) == 0:
				out = append(out, Problem{Path: path, Message: fmt.Sprintf(
					"tool %s: natural-key field %q has no type in the input schema: give it \"type\": \"string\" or \"number\", so that every call sends it one way (text is keyed as written, a number by its value)", t.Name, kf.Field)})
			case len(types) > 1:
				out = append(out, Problem{Path: path, Message: fmt.Sprintf(
					"tool %s: natural-key field %q may be any of %s: give it one type, so that every call sends it one way (text is keyed as written, a number by its value)", t.Name, kf.Field, strings.Join(types, ", "))})
			case types[0] != "string" && types[0] != "number" && types[0] != "integer":
				out = append(out, Problem{Path: path, Message: fmt.Sprintf(
					"tool %s: natural-key field %q is of type %s: a key field must be a string or a number, and a call that sends %s is refused", t.Name, kf.Field, types[0], types[0])})
			}
		}
	}
	return out
}

// schemaTypes reads a JSON schema "type": one name or a list; "null" does
// not count, since a null key field is refused anyway.
func schemaTypes(v any) []string {
	var names []string
	switch x := v.(type) {
	case string:
		names = []string{x}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				names = append(names, s)
			}
		}
	}
	out := names[:0]
	for _, n := range names {
		if n != "null" {
			out = append(out, n)
		}
	}
	return out
}

func isIndex(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

type validator struct{ problems []Problem }

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: slices.Clone(v.problems)}
}

// ToolInfo is a tool as the registry shows it: what it is, its key, its
// window and its three answers (the page "Things you cannot undo").
type ToolInfo struct {
	Name        string   `json:"name"`
	Kind        ToolKind `json:"kind"`
	Description string   `json:"description,omitempty"`
	NaturalKey  []string `json:"natural_key,omitempty"`
	Window      string   `json:"window,omitempty"`
	Undo        string   `json:"undo,omitempty"`
	Approver    string   `json:"approver,omitempty"`
	OnRepeat    string   `json:"on_repeat,omitempty"`
	OnMismatch  string   `json:"on_mismatch,omitempty"`
	Rules       []Rule   `json:"rules,omitempty"`
	// Approvers are who may decide its plans (empty: any approver).
	Approvers []string `json:"approvers,omitempty"`
	// SeparationOfDuties is on unless the manifest allows self-approval,
	// for irreversible tools; SelfApprovalReason then says why.
	SeparationOfDuties bool   `json:"separation_of_duties,omitempty"`
	SelfApprovalReason string `json:"self_approval_reason,omitempty"`
}

// Info describes the tool for the registry.
func (t *Tool) Info() ToolInfo {
	ti := ToolInfo{Name: t.Name, Kind: t.Kind, Description: t.Description}
	if !t.Kind.SideEffecting() {
		return ti
	}
	for _, kf := range t.NaturalKey {
		f := kf.Field
		if len(kf.Normalize) > 0 {
			f += " (" + strings.Join(kf.Normalize, ", ") + ")"
		}
		ti.NaturalKey = append(ti.NaturalKey, f)
	}
	if t.Window != nil {
		ti.Window = t.Window.String()
	}
	ti.Undo, ti.Approver, ti.OnRepeat = t.Answers.Undo, t.Answers.Approver, t.Answers.OnRepeat
	ti.OnMismatch = string(t.OnMismatch)
	if t.Approval != nil {
		ti.Rules = t.Approval.Rules
		ti.Approvers = t.Approval.Approvers
		ti.SelfApprovalReason = strings.TrimSpace(t.Approval.AllowSelfApproval)
		ti.SeparationOfDuties = ti.SelfApprovalReason == ""
	}
	return ti
}

// uncheckableKeywords are the schema keywords under which airlock cannot
// tell which arguments a side-effecting tool declares.
var uncheckableKeywords = []string{"$ref", "$dynamicRef", "anyOf", "oneOf", "allOf", "not", "if", "then", "else",
	"prefixItems", "patternProperties", "dependentSchemas", "unevaluatedProperties", "unevaluatedItems", "additionalItems"}

// uncheckableSchema is the first place (its path, and the keyword) in
// schema that declares arguments in a way the declared-arguments check
// cannot follow; "" when there is none.
func uncheckableSchema(schema map[string]any, path string) (string, string) {
	for _, kw := range uncheckableKeywords {
		if _, ok := schema[kw]; ok {
			return path, kw
		}
	}
	if items, ok := schema["items"]; ok {
		sub, isSchema := items.(map[string]any)
		if !isSchema {
			return path, "items as a list"
		}
		if w, kw := uncheckableSchema(sub, strings.TrimPrefix(path+"[]", ".")); kw != "" {
			return w, kw
		}
	}
	props, _ := schema["properties"].(map[string]any)
	for _, n := range slices.Sorted(maps.Keys(props)) {
		if sub, ok := props[n].(map[string]any); ok {
			if w, kw := uncheckableSchema(sub, strings.TrimPrefix(path+"."+n, ".")); kw != "" {
				return w, kw
			}
		}
	}
	return "", ""
}
