package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestREADMETour runs the tour's first item as written: `airlock serve`
// with no flags in a new directory (the ports the README names: 8420, and
// 9000 for the example's payments service), then its two shell blocks with
// the agent token serve printed. The note is written once and the repeat
// answers with the first result; the large withdrawal waits for a person.
// Not parallel: it holds the example's ports.
func TestREADMETour(t *testing.T) {
	if testing.Short() {
		t.Skip("serves the example")
	}
	for _, addr := range []string{"127.0.0.1:8420", "127.0.0.1:9000"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			if os.Getenv("AIRLOCK_TEST_REQUIRE_TOUR") == "1" {
				t.Fatalf("%s is taken, and the tour serves there (AIRLOCK_TEST_REQUIRE_TOUR=1)", addr)
			}
			t.Skipf("%s is taken; the tour serves there", addr)
		}
		ln.Close()
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, tour, found := strings.Cut(string(readme), "0. **Run it.**")
	tour, _, found2 := strings.Cut(tour, "\n1. ")
	if !found || !found2 {
		t.Fatal("the README's tour has no item 0 followed by item 1")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(tour, -1)
	if len(blocks) != 2 || !strings.Contains(tour, "`go run ./cmd/airlock serve`") {
		t.Fatalf("the tour's item 0 has %d shell blocks; want 2, after go run ./cmd/airlock serve", len(blocks))
	}

	serve := exec.Command(bin(t, "airlock"), "serve")
	serve.Dir = t.TempDir()
	out := &lockedBuffer{}
	serve.Stdout, serve.Stderr = out, out
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	token := regexp.MustCompile(`agent:\s+(agent_[0-9a-f]+)`)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "listening on") || token.FindStringSubmatch(out.String()) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	agent := token.FindStringSubmatch(out.String())[1]
	shell := func(block string) string {
		t.Helper()
		script := strings.Replace(block, "TOKEN=agent_...", "TOKEN="+agent, 1)
		got, err := exec.Command("bash", "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, got)
		}
		return string(got)
	}
	lines := strings.Fields(shell(blocks[0][1])) // one JSON value a line, blank lines between
	if len(lines) != 3 || !strings.Contains(lines[0], `"repeat":false`) || !strings.Contains(lines[1], `"repeat":true`) ||
		!strings.Contains(lines[2], `"WD-24817":["checked"]`) {
		t.Fatalf("calling add_note twice, then the stats:\n%s", strings.Join(lines, "\n"))
	}
	var first, second map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	_ = json.Unmarshal([]byte(lines[1]), &second)
	if fmt.Sprint(first["result"]) != fmt.Sprint(second["result"]) || first["result"] == nil {
		t.Fatalf("the repeat's result %v is not the first's %v", second["result"], first["result"])
	}
	// The second block runs in the same terminal: $TOKEN is still set.
	if got := shell("TOKEN=agent_...\n" + blocks[1][1]); !strings.Contains(got, `"status":"planned"`) || !strings.Contains(got, `"awaiting_approval"`) {
		t.Fatalf("proposing the large withdrawal:\n%s", got)
	}
}
