package remedy

import (
	"testing"
	"time"
)

func TestWindows(t *testing.T) {
	if _, err := time.LoadLocation("Europe/Berlin"); err != nil {
		t.Skipf("SKIPPED: no time zone database: %v", err)
	}
	utc := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		specs []string
		at    string
		open  bool
		next  string // when not open
	}{
		{nil, "2026-11-27T10:00:00Z", true, ""},
		// Friday 27 November 2026.
		{[]string{"mon-fri 02:00-05:00"}, "2026-11-27T02:00:00Z", true, ""},
		{[]string{"mon-fri 02:00-05:00"}, "2026-11-27T04:59:59Z", true, ""},
		{[]string{"mon-fri 02:00-05:00"}, "2026-11-27T05:00:00Z", false, "2026-11-30T02:00:00Z"},
		{[]string{"mon-fri 02:00-05:00"}, "2026-11-27T01:59:00Z", false, "2026-11-27T02:00:00Z"},
		// Across midnight: Friday's window runs into Saturday.
		{[]string{"fri 22:00-02:00"}, "2026-11-28T01:30:00Z", true, ""},
		{[]string{"fri 22:00-02:00"}, "2026-11-28T02:00:00Z", false, "2026-12-04T22:00:00Z"},
		// A whole day; lists and wrapping ranges.
		{[]string{"sat,sun 00:00-00:00"}, "2026-11-29T23:59:00Z", true, ""},
		{[]string{"fri-mon 03:00-04:00"}, "2026-11-30T03:30:00Z", true, ""},
		{[]string{"fri-mon 03:00-04:00"}, "2026-12-01T03:30:00Z", false, "2026-12-04T03:00:00Z"},
		// A zone: 02:00 in Berlin is 01:00 UTC in winter.
		{[]string{"* 02:00-03:00 Europe/Berlin"}, "2026-11-27T01:00:00Z", true, ""},
		{[]string{"* 02:00-03:00 Europe/Berlin"}, "2026-11-27T02:00:00Z", false, "2026-11-28T01:00:00Z"},
		// Several: the earliest next.
		{[]string{"mon 01:00-02:00", "sat 09:00-10:00"}, "2026-11-27T12:00:00Z", false, "2026-11-28T09:00:00Z"},
	} {
		var ws Windows
		for _, s := range tc.specs {
			w, err := ParseWindow(s)
			if err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		open, next := ws.Open(utc(tc.at))
		var want time.Time
		if tc.next != "" {
			want = utc(tc.next)
		}
		if open != tc.open || !next.Equal(want) {
			t.Errorf("%q at %s: open %v, next %v; want %v, %v", tc.specs, tc.at, open, next, tc.open, want)
		}
	}
}

func TestParseWindowRefuses(t *testing.T) {
	for _, s := range []string{"", "mon", "mon 2:00-05:00", "mon 02:00", "mon 24:00-01:00", "mo 02:00-03:00",
		"mon-fr 02:00-03:00", "mon 02:00-03:00 Mars/Olympus", "mon 02:00-03:00 UTC extra", "mon 02:0-03:00"} {
		if w, err := ParseWindow(s); err == nil {
			t.Errorf("ParseWindow(%q) = %+v, want an error", s, w)
		}
	}
}
