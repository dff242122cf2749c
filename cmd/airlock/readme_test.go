package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMECommands runs the README's airlock command lines as written
// (from the repository's root, as the tour says), with the built binary
// for `go run ./cmd/airlock`: each exits 0. Only the bench's scratch
// database moves into the test's directory.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the bench")
	}
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	airlockBin := bin(t, "airlock")
	scratch := filepath.Join(t.TempDir(), "airlock-bench.db")
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	var lines []string
	for _, b := range blocks {
		joined := strings.ReplaceAll(b[1], "\\\n", " ")
		for _, line := range strings.Split(joined, "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "go run ./cmd/airlock ") {
				lines = append(lines, line)
			}
		}
	}
	if len(lines) < 4 {
		t.Fatalf("found %d airlock command lines in the README; the tour has at least 4", len(lines))
	}
	for _, line := range lines {
		words, err := shellWords(strings.TrimPrefix(line, "go run ./cmd/airlock "))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if words[0] == "serve" || words[0] == "mcp" {
			continue // servers: the e2e tests run them
		}
		for i, w := range words {
			words[i] = strings.ReplaceAll(w, "/tmp/airlock-bench.db", scratch)
		}
		cmd := exec.Command(airlockBin, words...)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("README: %s: %v\n%s", line, err, out)
		}
	}
}

// shellWords splits a command line as a POSIX shell would for the README's
// lines: words, 'single' and "double" quotes, a # comment; no expansions.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '#' && !inWord:
			return words, nil // a comment to the end of the line
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\'' || c == '"':
			end := strings.IndexByte(s[i+1:], c)
			if end < 0 {
				return nil, os.ErrInvalid
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
