package airlock

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Display says how people read a tool's plans and calls: which values are
// money, and which argument is the agent's own note about the work
// (docs/configuration.md, "display"). It changes nothing airlock does,
// only what the page, the CLI, notices and the demo show.
type Display struct {
	// Money are the amounts in a currency's minor units, shown as "2,500.00
	// USD" beside the raw value. Default: none.
	Money []MoneyField `yaml:"money" json:"money,omitempty"`
	// Note is the argument (args.PATH) in which the agent says why; the
	// queue shows it beside the work. Default: none.
	Note string `yaml:"note" json:"note,omitempty"`
}

// MoneyField is one amount: where it is and in which currency.
type MoneyField struct {
	// Amount is args.PATH or facts.PATH: an integer in the currency's minor
	// units (cents for USD, yen for JPY, fils for KWD).
	Amount string `yaml:"amount" json:"amount"`
	// Currency is args.PATH or facts.PATH of an ISO 4217 code, or the code
	// itself ("USD").
	Currency string `yaml:"currency" json:"currency"`
}

// maxMoneyFields bounds display.money: a tool's amounts, not a ledger.
const maxMoneyFields = 16

var (
	currencyCodeRE = regexp.MustCompile(`^[A-Z]{3}$`)
	asciiCodeRE    = regexp.MustCompile(`^[A-Za-z]{3}$`)
)

// Money is the tool's money values in a plan's arguments and facts, each
// formatted: "args.amount_minor" → "2,500.00 USD". An amount that is not
// an integer, or whose currency is not a three-letter code, is left out:
// the raw value is shown as it is.
func (t *Tool) Money(args, facts json.RawMessage) map[string]string {
	if t == nil || t.Display == nil || len(t.Display.Money) == 0 {
		return nil
	}
	parsed := map[string]map[string]any{}
	value := func(ref string) (any, bool) {
		src, path, ok := strings.Cut(ref, ".")
		if !ok || (src != "args" && src != "facts") {
			return nil, false
		}
		m, seen := parsed[src]
		if !seen {
			raw := args
			if src == "facts" {
				raw = facts
			}
			m, _ = ParseArgs(raw)
			parsed[src] = m
		}
		if m == nil {
			return nil, false
		}
		return LookupPath(m, path)
	}
	out := map[string]string{}
	for _, f := range t.Display.Money {
		v, ok := value(f.Amount)
		n, isNum := v.(json.Number)
		if !ok || !isNum {
			continue
		}
		minor, err := n.Int64()
		if err != nil {
			continue // not an integer of minor units
		}
		code := f.Currency
		if strings.HasPrefix(code, "args.") || strings.HasPrefix(code, "facts.") {
			c, _ := value(code)
			code, _ = c.(string)
			code = strings.TrimSpace(code)
			if !asciiCodeRE.MatchString(code) {
				continue // ToUpper would make "uſd" USD
			}
			code = strings.ToUpper(code)
		}
		if _, known := MinorUnitDigits(code); !known || !currencyCodeRE.MatchString(code) {
			continue // not a currency: its minor unit is unknown, the raw value shows
		}
		out[f.Amount] = FormatMoney(minor, code)
	}
	return out
}

// AgentNote is the agent's note about the work (display.note) in a plan's
// arguments, or "" when the tool names none or the call gave none.
func (t *Tool) AgentNote(args json.RawMessage) string {
	if t == nil || t.Display == nil || t.Display.Note == "" {
		return ""
	}
	m, err := ParseArgs(args)
	if err != nil {
		return ""
	}
	v, ok := LookupPath(m, strings.TrimPrefix(t.Display.Note, "args."))
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func (d *Display) validate(v *validator, p string, t *Tool) {
	name := t.Name
	if !t.Kind.SideEffecting() {
		v.add(p, "tool %s: display is for tools that change something (their plans and calls are what people read)", name)
		return
	}
	// ref checks a reference into the arguments (declared in the input
	// schema, of one of types when given) or the facts (which need a
	// lookup).
	ref := func(fp, r string, factsToo bool, types ...string) {
		src, path, _ := strings.Cut(r, ".")
		switch {
		case src == "args" && path != "":
			sch, ok := schemaAt(t.InputSchema, path)
			typ, _ := sch["type"].(string)
			switch {
			case !ok:
				v.add(fp, "tool %s: %q is not in the input schema's properties", name, path)
			case len(types) > 0 && !slices.Contains(types, typ):
				v.add(fp, "tool %s: %q is %s in the input schema; want %s", name, path, cmp.Or(typ, "of no type"), strings.Join(types, " or "))
			}
		case src == "facts" && path != "" && factsToo:
			if t.Approval == nil || t.Approval.Lookup == nil {
				v.add(fp, "tool %s: %q reads the facts, but the tool has no approval.lookup to fetch them", name, r)
			}
		default:
			want := "args.PATH or facts.PATH"
			if !factsToo {
				want = "args.PATH"
			}
			v.add(fp, "tool %s: %q is not a reference: want %s", name, r, want)
		}
	}
	if len(d.Money) > maxMoneyFields {
		v.add(p+".money", "tool %s: %d amounts; at most %d", name, len(d.Money), maxMoneyFields)
	}
	seen := map[string]int{}
	for i, f := range d.Money {
		fp := fmt.Sprintf("%s.money[%d]", p, i)
		if j, dup := seen[f.Amount]; dup && f.Amount != "" {
			v.add(fp+".amount", "tool %s: %q is already money[%d]: an amount has one currency", name, f.Amount, j)
		}
		seen[f.Amount] = i
		if f.Amount == "" {
			v.add(fp+".amount", "tool %s: required: args.PATH or facts.PATH of an integer in minor units", name)
		} else {
			ref(fp+".amount", f.Amount, true, "integer")
		}
		switch {
		case f.Currency == "":
			v.add(fp+".currency", "tool %s: required: args.PATH or facts.PATH of an ISO 4217 code, or the code itself such as USD", name)
		case currencyCodeRE.MatchString(f.Currency):
			if _, known := MinorUnitDigits(f.Currency); !known {
				v.add(fp+".currency", "tool %s: %q is not an ISO 4217 currency", name, f.Currency)
			}
		case strings.HasPrefix(f.Currency, "args.") || strings.HasPrefix(f.Currency, "facts."):
			ref(fp+".currency", f.Currency, true, "string")
		default:
			v.add(fp+".currency", "tool %s: %q is neither an ISO 4217 code (three capital letters, such as USD) nor args.PATH or facts.PATH", name, f.Currency)
		}
	}
	if d.Note != "" {
		ref(p+".note", d.Note, false, "string")
	}
}
