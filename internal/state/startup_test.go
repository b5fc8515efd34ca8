package state

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuslice/gpuslice/internal/api"
)

// rawExec runs statements on the database file with a plain connection.
func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	for _, q := range stmts {
		if _, err := raw.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// A page in the middle of the file, a leaf of the claims table's b-tree,
// overwritten with garbage: OpenSQLite refuses the database as damaged,
// where before quick_check it opened and failed only the reads that touched
// the page.
func TestSQLiteRefusesCorruptedPage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSQLite(t, path)
	populate(t, s)
	for b := 0; b < 10; b++ {
		update(t, s, func(tx Tx) error {
			for i := 0; i < 50; i++ {
				c := sampleClaim(fmt.Sprintf("bulk-%d-%d", b, i), "acme", api.Pending)
				if err := tx.CreateClaim(&c); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Every page into the main file (not the WAL), then find the claims
	// table's pages from its root: the root is an interior page (0x05)
	// whose child pointers name the leaves.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var busy, logFrames, checkpointed int
	if err := raw.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &checkpointed); err != nil || busy != 0 {
		t.Fatalf("checkpoint: busy=%d %v", busy, err)
	}
	var pageSize, root int64
	if err := raw.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRow("SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = 'claims'").Scan(&root); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(len(data)) / pageSize
	rootPage := data[(root-1)*pageSize : root*pageSize]
	if rootPage[0] != 0x05 {
		t.Fatalf("claims root page %d has type %#x, want an interior table page (0x05): too few rows?", root, rootPage[0])
	}
	// Cell pointers follow the 12-byte interior header; each cell starts
	// with the 4-byte child page number. Take the middle child.
	cells := int64(rootPage[3])<<8 | int64(rootPage[4])
	ptr := 12 + 2*(cells/2)
	cell := int64(rootPage[ptr])<<8 | int64(rootPage[ptr+1])
	leaf := int64(rootPage[cell])<<24 | int64(rootPage[cell+1])<<16 | int64(rootPage[cell+2])<<8 | int64(rootPage[cell+3])
	if leaf <= 1 || leaf > pages || data[(leaf-1)*pageSize] != 0x0d {
		t.Fatalf("child %d of the claims root is not a table leaf page (file has %d pages)", leaf, pages)
	}
	garbage := make([]byte, pageSize)
	for i := range garbage {
		garbage[i] = byte(i*131 + 7)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(garbage, (leaf-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("overwrote page %d of %d (a leaf of the claims table, root %d)", leaf, pages, root)

	// Without a check the file still opens and most of it reads: only a
	// scan of the claims table fails.
	raw, err = sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var v, n int
	if err := raw.QueryRow("SELECT version FROM schema_version").Scan(&v); err != nil {
		t.Fatalf("reading schema_version of the damaged file: %v", err)
	}
	if err := raw.QueryRow("SELECT count(*) FROM claims WHERE length(data) > 0").Scan(&n); err == nil {
		t.Fatalf("a scan of the claims table read past the garbage page (%d rows)", n)
	}
	raw.Close()

	for _, opts := range []SQLiteOptions{{}, {MustExist: true}} {
		s, err := OpenSQLite(path, opts)
		if err == nil {
			s.Close()
			t.Fatalf("OpenSQLite(%+v) opened a database with a garbage page", opts)
		}
		if !errors.Is(err, ErrDamaged) {
			t.Errorf("OpenSQLite(%+v): %v, want ErrDamaged", opts, err)
		}
		t.Logf("OpenSQLite(%+v): %v", opts, err)
		for _, want := range []string{path, "damaged", "restore it from a backup"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
}

// A file that is not a SQLite database at all is damaged too.
func TestSQLiteRefusesGarbageFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not a database. ", 512)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLite(path, SQLiteOptions{})
	if err == nil {
		s.Close()
		t.Fatal("OpenSQLite opened a file of garbage")
	}
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) {
		t.Errorf("OpenSQLite: %v, want ErrDamaged naming %s", err, path)
	}
}

func TestSQLiteMustExistRefusesMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	_, err := OpenSQLite(path, SQLiteOptions{MustExist: true})
	if !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), path+" does not exist") {
		t.Fatalf("OpenSQLite(MustExist) of a missing file: %v, want ErrNoSchema saying it does not exist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused database was created: %v", err)
	}
}

func TestSQLiteMustExistRefusesEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := OpenSQLite(path, SQLiteOptions{MustExist: true})
	if !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "empty (0 bytes)") {
		t.Fatalf("OpenSQLite(MustExist) of an empty file: %v, want ErrNoSchema saying it is empty", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("the refused database was written to: %v, %v", fi, err)
	}
	// Without MustExist an empty file is a new database, as before.
	s := openSQLite(t, path)
	populate(t, s)
	s.Close()
}

func TestSQLiteMustExistRefusesDatabaseWithoutSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	rawExec(t, path, "CREATE TABLE something_else (x INTEGER)")
	_, err := OpenSQLite(path, SQLiteOptions{MustExist: true})
	if !errors.Is(err, ErrNoSchema) || !strings.Contains(err.Error(), "no schema_version table") {
		t.Fatalf("OpenSQLite(MustExist) of a database without a schema: %v, want ErrNoSchema", err)
	}
	var n int
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'schema_version'").Scan(&n); err != nil || n != 0 {
		t.Errorf("the refused database was migrated: %d schema_version tables (%v)", n, err)
	}
}

func TestSQLiteMustExistOpensExistingDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := openSQLite(t, path)
	populate(t, s)
	s.Close()
	s, err := OpenSQLite(path, SQLiteOptions{MustExist: true})
	if err != nil {
		t.Fatalf("OpenSQLite(MustExist) of a good database: %v", err)
	}
	defer s.Close()
	view(t, s, func(tx Tx) error {
		_, err := tx.GetClaim("c-1")
		return err
	})
}
