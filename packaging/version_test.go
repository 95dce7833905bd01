package main

import "testing"

func TestPackageVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tag   string
		since int
		dirty bool
		want  string
	}{
		{name: "no tag", since: 315, want: "0.0.0+git315.gabc"},
		{name: "no tag, dirty", since: 315, dirty: true, want: "0.0.0+git315.gabc.dirty"},
		{name: "at a tag", tag: "v1.2.3", want: "1.2.3"},
		{name: "at a tag, dirty", tag: "v1.2.3", dirty: true, want: "1.2.3+dirty"},
		{name: "after a tag", tag: "v1.2.3", since: 4, want: "1.2.3+git4.gabc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := packageVersion(tc.tag, tc.since, "abc", tc.dirty)
			if got != tc.want {
				t.Errorf("packageVersion = %q, want %q", got, tc.want)
			}
			if err := checkVersion(got); err != nil {
				t.Errorf("checkVersion(%q): %v", got, err)
			}
		})
	}
	if err := checkVersion("v1.0-rc1"); err == nil {
		t.Error(`checkVersion("v1.0-rc1") passed; dpkg and rpm cannot share it`)
	}
}
