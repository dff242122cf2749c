package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
)

// Stamped at release: go build -ldflags "-X main.version=v0.3.0 -X
// main.commit=… -X main.date=…". Unstamped, they come from the module's
// build information (the version go install records, the VCS revision and
// time of a build from a clone).
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what `airlock version` prints.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
	// Schema is the schema version this binary's migrations reach, per
	// driver; Database that of --db, when given.
	Schema   map[string]int `json:"schema"`
	Database *int           `json:"database_schema,omitempty"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Schema: map[string]int{"sqlite": sqlite.LatestSchema(), "postgres": postgres.LatestSchema()}}
	if info, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" {
			b.Version = info.Main.Version // "(devel)" for a build from a clone
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				if b.Date == "" {
					b.Date = s.Value
				}
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	return b
}

func cmdVersion(e *env, args []string) int {
	fs := newFlags(e, "version")
	db := fs.String("db", "", "also the schema version of this database: sqlite:PATH or postgres://…")
	format := fs.String("format", "text", "text or json")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		return usageError(e, "version", "--format %q: want text or json", *format)
	}
	b := readBuildInfo()
	if *db != "" {
		have, err := databaseSchema(e.ctx, *db)
		if err != nil {
			return failCode(e, err)
		}
		b.Database = &have
	}
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(b)
		return 0
	}
	fmt.Fprintf(e.stdout, "airlock %s\n", b.Version)
	commitLine := b.Commit
	if commitLine == "" {
		commitLine = "unknown"
	}
	if b.Modified {
		commitLine += " (with uncommitted changes)"
	}
	fmt.Fprintf(e.stdout, "commit:   %s\n", commitLine)
	fmt.Fprintf(e.stdout, "built:    %s\n", orUnknown(b.Date))
	fmt.Fprintf(e.stdout, "go:       %s %s\n", b.GoVersion, b.Platform)
	fmt.Fprintf(e.stdout, "schema:   %d (sqlite), %d (postgres)\n", b.Schema["sqlite"], b.Schema["postgres"])
	if b.Database != nil {
		fmt.Fprintf(e.stdout, "database: schema %d (%s)\n", *b.Database, redactDSN(*db))
	}
	return 0
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// databaseSchema reads a database's schema version without changing it: a
// SQLite file that does not exist is an error, not a new database.
func databaseSchema(ctx context.Context, dsn string) (int, error) {
	kind, err := store.Kind(dsn)
	if err != nil {
		return 0, &usageErr{"--db: " + err.Error()}
	}
	if kind == "sqlite" {
		path := store.SQLitePath(dsn)
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return 0, &usageErr{fmt.Sprintf("--db: no database at %s", path)}
		}
		v, err := sqlite.SchemaVersionOf(ctx, path) // read-only: nothing written
		if err != nil {
			return 0, fmt.Errorf("--db %s: %w", path, err)
		}
		return v, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := store.Open(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	v, ok := s.(interface {
		SchemaVersion(context.Context) (int, error)
	})
	if !ok {
		return 0, fmt.Errorf("--db: this store does not report its schema version")
	}
	return v.SchemaVersion(ctx)
}
