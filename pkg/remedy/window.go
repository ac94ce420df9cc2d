package remedy

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is a weekly time window in which a remedy may restart the
// kubelet (--remedy-window): on Days, from Start to End in Location. An
// End before Start crosses midnight: the window belongs to the day it
// starts on ("fri 22:00-02:00" runs from Friday 22:00 to Saturday 02:00).
// Only the restart waits for a window: the drift is reported, and a check
// whether a restart could help at all runs, whenever it happens.
type Window struct {
	// Days are the weekdays the window starts on.
	Days [7]bool
	// Start and End are minutes after midnight; End == Start is the whole
	// day.
	Start, End int
	Location   *time.Location
	spec       string
}

func (w Window) String() string { return w.spec }

var weekdays = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// ParseWindow parses "DAYS HH:MM-HH:MM [ZONE]": DAYS is "*" (every day), a
// day ("sat"), a range ("mon-fri") or a list of either ("mon,wed,fri-sun");
// times are 24-hour clock; ZONE is an IANA zone name ("Europe/Berlin"), UTC
// when left out.
func ParseWindow(spec string) (Window, error) {
	w := Window{spec: spec, Location: time.UTC}
	f := strings.Fields(spec)
	if len(f) != 2 && len(f) != 3 {
		return w, fmt.Errorf("remedy window %q: want \"DAYS HH:MM-HH:MM [ZONE]\", e.g. \"mon-fri 02:00-05:00 Europe/Berlin\"", spec)
	}
	if err := w.parseDays(strings.ToLower(f[0])); err != nil {
		return w, fmt.Errorf("remedy window %q: %w", spec, err)
	}
	from, to, ok := strings.Cut(f[1], "-")
	var err error
	if !ok {
		return w, fmt.Errorf("remedy window %q: times %q: want HH:MM-HH:MM", spec, f[1])
	}
	if w.Start, err = hhmm(from); err == nil {
		w.End, err = hhmm(to)
	}
	if err != nil {
		return w, fmt.Errorf("remedy window %q: %w", spec, err)
	}
	if len(f) == 3 {
		if w.Location, err = time.LoadLocation(f[2]); err != nil {
			return w, fmt.Errorf("remedy window %q: time zone: %w", spec, err)
		}
	}
	return w, nil
}

func (w *Window) parseDays(s string) error {
	if s == "*" {
		for i := range w.Days {
			w.Days[i] = true
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, ok := weekdays[from]
		if !ok {
			return fmt.Errorf("day %q: want sun, mon, tue, wed, thu, fri or sat", from)
		}
		b := a
		if isRange {
			if b, ok = weekdays[to]; !ok {
				return fmt.Errorf("day %q: want sun, mon, tue, wed, thu, fri or sat", to)
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			w.Days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

// hhmm parses HH:MM into minutes after midnight.
func hhmm(s string) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(h) != 2 || len(m) != 2 || hh < 0 || hh > 23 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("time %q: want HH:MM, 00:00 to 23:59", s)
	}
	return hh*60 + mm, nil
}

// span is the window's opening that starts on the day of t's date in the
// window's zone: [from, to), and whether the window opens that day.
func (w Window) span(day time.Time) (from, to time.Time, ok bool) {
	y, mo, d := day.Date()
	midnight := time.Date(y, mo, d, 0, 0, 0, 0, w.Location)
	if !w.Days[midnight.Weekday()] {
		return from, to, false
	}
	from = time.Date(y, mo, d, w.Start/60, w.Start%60, 0, 0, w.Location)
	length := w.End - w.Start
	if length <= 0 {
		length += 24 * 60
	}
	// The end by the wall clock, so that a day of a daylight saving change
	// keeps the window's hours.
	end := w.Start + length
	to = time.Date(y, mo, d+end/(24*60), (end%(24*60))/60, end%60, 0, 0, w.Location)
	return from, to, true
}

// Windows are the remedy windows: none means always.
type Windows []Window

// Open reports whether t is in a window (always, when there are none),
// and otherwise when the next window opens (zero when none ever does).
func (ws Windows) Open(t time.Time) (open bool, next time.Time) {
	if len(ws) == 0 {
		return true, time.Time{}
	}
	for _, w := range ws {
		local := t.In(w.Location)
		// The opening that started yesterday may still run.
		for day := -1; day <= 7; day++ {
			from, to, ok := w.span(local.AddDate(0, 0, day))
			if !ok {
				continue
			}
			if !t.Before(from) && t.Before(to) {
				return true, time.Time{}
			}
			if from.After(t) && (next.IsZero() || from.Before(next)) {
				next = from
			}
		}
	}
	return false, next
}

func (ws Windows) String() string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = w.spec
	}
	return strings.Join(s, "; ")
}
