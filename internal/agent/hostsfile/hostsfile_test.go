package hostsfile

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	bookstore = Entry{Hostname: "bookstore.default.mesh", IP: netip.MustParseAddr("127.77.0.3")}
	bookbuyer = Entry{Hostname: "bookbuyer.default.mesh", IP: netip.MustParseAddr("127.77.0.2")}
)

const base = "127.0.0.1\tlocalhost\n# a comment the operator wrote\n::1 localhost ip6-localhost\n"

func TestRender(t *testing.T) {
	block := BeginMarker + "\n127.77.0.2\tbookbuyer.default.mesh\n127.77.0.3\tbookstore.default.mesh\n" + EndMarker + "\n"
	tests := []struct {
		name    string
		in      string
		entries []Entry
		want    string
	}{
		{name: "append to a file without a block", in: base, entries: []Entry{bookstore, bookbuyer}, want: base + block},
		{name: "file without a final newline", in: "127.0.0.1 localhost", entries: []Entry{bookstore, bookbuyer}, want: "127.0.0.1 localhost\n" + block},
		{name: "empty file", in: "", entries: []Entry{bookbuyer, bookstore}, want: block},
		{name: "replace a block in place", in: "1.2.3.4 a\n" + BeginMarker + "\n127.77.0.9\told.default.mesh\n" + EndMarker + "\n5.6.7.8 b\n",
			entries: []Entry{bookstore, bookbuyer}, want: "1.2.3.4 a\n" + block + "5.6.7.8 b\n"},
		{name: "unchanged block", in: base + block, entries: []Entry{bookbuyer, bookstore}, want: base + block},
		{name: "remove the block when no entries", in: base + block + "9.9.9.9 after\n", entries: nil, want: base + "9.9.9.9 after\n"},
		{name: "no entries and no block", in: base, entries: nil, want: base},
		{name: "missing end marker: block ends at the first non-entry line",
			in:      base + BeginMarker + "\n127.77.0.9\told.default.mesh\n# operator comment\n10.0.0.1 db\n",
			entries: []Entry{bookstore, bookbuyer}, want: base + block + "# operator comment\n10.0.0.1 db\n"},
		{name: "missing end marker at end of file", in: base + BeginMarker + "\n127.77.0.9\told.default.mesh\n",
			entries: []Entry{bookstore, bookbuyer}, want: base + block},
		{name: "external names of an Egress beside the mesh names", in: base,
			entries: []Entry{{Hostname: "api.github.com", IP: netip.MustParseAddr("127.77.241.238")}, bookstore},
			want:    base + BeginMarker + "\n127.77.241.238\tapi.github.com\n127.77.0.3\tbookstore.default.mesh\n" + EndMarker + "\n"},
		{name: "duplicate entries collapse", in: "", entries: []Entry{bookstore, bookstore, bookbuyer}, want: block},
		{name: "two blocks merge into one", in: block + "x y\n" + block, entries: []Entry{bookstore, bookbuyer}, want: block + "x y\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(Render([]byte(tt.in), tt.entries))
			if diff := cmp.Diff(got, tt.want); diff != "" {
				t.Errorf("Render (-got +want):\n%s", diff)
			}
		})
	}
}

func TestUpdatePreservesModeAndReportsChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(path, []byte(base), 0o640); err != nil {
		t.Fatal(err)
	}
	changed, err := Update(path, []Entry{bookstore})
	if err != nil || !changed {
		t.Fatalf("Update = %v, %v; want true, nil", changed, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o640); got != want {
		t.Errorf("mode = %v, want %v", got, want)
	}
	changed, err = Update(path, []Entry{bookstore})
	if err != nil || changed {
		t.Errorf("second Update = %v, %v; want false, nil", changed, err)
	}
	got, _ := os.ReadFile(path)
	want := base + BeginMarker + "\n127.77.0.3\tbookstore.default.mesh\n" + EndMarker + "\n"
	if diff := cmp.Diff(string(got), want); diff != "" {
		t.Errorf("file (-got +want):\n%s", diff)
	}
}

func TestUpdateThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "hosts.real")
	if err := os.WriteFile(real, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "hosts")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Update(link, []Entry{bookstore}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced by a file (%v)", err)
	}
}

func TestUpdateRejectsBadEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	for _, e := range []Entry{{Hostname: "a b", IP: bookstore.IP}, {Hostname: "x.mesh"}, {Hostname: "", IP: bookstore.IP}} {
		if _, err := Update(path, []Entry{e}); err == nil {
			t.Errorf("Update(%+v) succeeded, want an error", e)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a rejected update created the file (%v)", err)
	}
}
