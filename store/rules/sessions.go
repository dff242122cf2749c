package rules

import "encoding/json"

// GroupsJSON is how drivers store a session's groups: a JSON array.
func GroupsJSON(g []string) string {
	if len(g) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(g)
	return string(b)
}

// ParseGroups reads GroupsJSON; nil for none.
func ParseGroups(s string) []string {
	var g []string
	_ = json.Unmarshal([]byte(s), &g)
	if len(g) == 0 {
		return nil
	}
	return g
}
