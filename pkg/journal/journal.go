package journal

import (
	"sync"

	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// Phase is how far a remedy has gone.
type Phase string

// The phases of a remedy, in order. Each is written down before it starts.
const (
	// PhaseRestarting: the kubelet's supervisor (systemd, or the restart
	// command) is being asked to restart the kubelet. The supervisor owns
	// the restart from there: the kubelet's stop, the state-file repair
	// (hotplugd preflight in the kubelet's own start) and its start happen
	// whatever becomes of hotplugd. Before is the kubelet process that ran
	// when the restart was asked for: a kubelet with the same process
	// afterwards was never restarted.
	PhaseRestarting Phase = "restarting"
	// PhaseVerifying: the supervisor's restart is done; the kubelet's
	// healthz and the Node are being checked.
	PhaseVerifying Phase = "verifying"
)

// The phases a hotplugd before the supervisor owned the restart wrote
// (it stopped the kubelet, rewrote the state files and started it itself).
// A record left in one of them by such a hotplugd may mean a stopped
// kubelet: the next hotplugd asks the supervisor to start it (a no-op when
// it runs) and records the attempt as interrupted.
const (
	LegacyPhaseStopping    Phase = "stopping"
	LegacyPhaseRepairing   Phase = "repairing"
	LegacyPhaseStarting    Phase = "starting"
	LegacyPhaseRollingBack Phase = "rolling back"
)

// Legacy reports whether p is a phase of the earlier design, in which the
// kubelet may have been left stopped.
func (p Phase) Legacy() bool {
	switch p {
	case LegacyPhaseStopping, LegacyPhaseRepairing, LegacyPhaseStarting, LegacyPhaseRollingBack:
		return true
	}
	return false
}

// Underway is a remedy in progress, as written down before each phase.
type Underway struct {
	// Key is the (prediction, kubelet configuration) the remedy is for.
	Key   string    `json:"key"`
	Phase Phase     `json:"phase"`
	Start time.Time `json:"start"`
	// Drift is the drift it remedies, for people.
	Drift string `json:"drift"`
	// Files are the state files a hotplugd of the earlier design was
	// repairing, with their backups; read, never written any more.
	Files []FileBackup `json:"files,omitempty"`
	// Kubelet is the kubelet the restart is for, as discovered before it
	// was asked for.
	Kubelet *Kubelet `json:"kubelet,omitempty"`
	// Before is the kubelet process that ran when the restart was asked
	// for (nil: none known).
	Before *Process `json:"before,omitempty"`
}

// Process identifies one kubelet process: its PID and its start time in
// clock ticks since boot (/proc/<pid>/stat), which together never name
// another process.
type Process struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// Kubelet is what verifying a restart needs to know about the kubelet.
type Kubelet struct {
	// Config is its effective KubeletConfiguration (JSON).
	Config                     json.RawMessage `json:"config"`
	RootDir                    string          `json:"rootDir"`
	StateDir                   string          `json:"stateDir"`
	HealthzURL                 string          `json:"healthzURL,omitempty"`
	AllocatableIgnoresEviction bool            `json:"allocatableIgnoresEviction,omitempty"`
	Version                    string          `json:"version"`
}

// FileBackup is one state file and where its old contents are kept.
type FileBackup struct {
	Path   string `json:"path"`
	Backup string `json:"backup"`
}

// Outcome is how an attempt ended.
type Outcome string

// The outcomes.
const (
	OutcomeRemediated Outcome = "remediated"
	// OutcomeFailed: the restart was asked for and the kubelet did not come
	// back reporting the machine (or the supervisor refused the job); the
	// kubelet is left to its supervisor, never stopped by hotplugd.
	OutcomeFailed      Outcome = "failed"
	OutcomeNeedsPerson Outcome = "needs_person" // nothing done
	OutcomeDryRun      Outcome = "dry_run"
	// OutcomeRefused: the kubelet would refuse to start with its
	// configuration on this machine; not restarted.
	OutcomeRefused Outcome = "refused"
	// OutcomeInterrupted: hotplugd was stopped during the remedy and the
	// next one could not tell how it ended (the record was too old, or the
	// restart was never asked for); nothing is concluded for the key.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeWithheld: a restart could help, but hotplugd cannot judge
	// what it would start (a configuration, command line or binary staged
	// since the kubelet started, a unit masked or not reloaded, a state
	// file it cannot judge, no repair in the kubelet's start) or what it
	// would do to running pods: no restart, an Event says why.
	OutcomeWithheld Outcome = "withheld"
	// OutcomeUnverified: the kubelet was restarted and runs, but the Node
	// could not be read to verify it (the API server away): not a kubelet
	// failure.
	OutcomeUnverified Outcome = "unverified"
)

// Outcomes are every outcome, in the order of their declaration.
func Outcomes() []Outcome {
	return []Outcome{OutcomeRemediated, OutcomeFailed, OutcomeNeedsPerson, OutcomeDryRun, OutcomeRefused,
		OutcomeInterrupted, OutcomeWithheld, OutcomeUnverified}
}

// Restarted says whether an attempt with this outcome asked the
// kubelet's supervisor for a restart (what the daily budget counts).
func (o Outcome) Restarted() bool {
	return o == OutcomeRemediated || o == OutcomeFailed || o == OutcomeUnverified
}

// Entry is one finished attempt.
type Entry struct {
	// Seq numbers the entries of this journal, from 1.
	Seq     int64     `json:"seq"`
	Key     string    `json:"key"`
	Start   time.Time `json:"start"`
	Outcome Outcome   `json:"outcome"`
	Why     string    `json:"why,omitempty"`
	// Reason and Message are what the Node says about it: the Event's
	// reason (Remediated, RemediationFailed, NeedsDrain,
	// KubeletWouldRefuse) and its message for people, which the condition
	// carries while the drift lasts.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Warning: a Warning Event (else Normal).
	Warning bool `json:"warning,omitempty"`
	// Restarted: the kubelet's supervisor was asked to restart it.
	Restarted bool `json:"restarted,omitempty"`
}

// Retry is a person's request that what earlier attempts concluded be
// tried again: the value of the Node's annotation hotplugd.io/retry, and
// when hotplugd took it. Attempts that started before At no longer stand
// in the way of a new one (View.Last); the rate limit and the daily budget
// still count them.
type Retry struct {
	Token string    `json:"token"`
	At    time.Time `json:"at"`
}

// record is the journal file's contents.
type record struct {
	// Version of this layout.
	Version  int       `json:"version"`
	Underway *Underway `json:"underway,omitempty"`
	// Retry is the last retry taken (a hotplugd of an earlier version
	// drops it: its attempts then stand again, the safe way).
	Retry *Retry `json:"retry,omitempty"`
	// Attempts are the finished attempts, oldest first, at most
	// maxEntries.
	Attempts []Entry `json:"attempts"`
	// Seq is the last entry's number.
	Seq int64 `json:"seq"`
}

const (
	journalVersion = 1
	maxEntries     = 64
	// JournalFile is the journal's name in the state directory.
	JournalFile = "remedy.json"
)

// Journal is the remedy's record on disk: what is under way and what was
// tried. It survives hotplugd's restarts, so that a remedy interrupted by
// SIGKILL or a crash is finished by the next hotplugd, and a failed attempt
// is not repeated by a crash-looping one. Every change is written
// atomically and durably before the step it announces. A journal with no
// path keeps the record in memory only (tests, --dry-run).
type Journal struct {
	path string

	mu      sync.Mutex
	rec     record
	changed chan struct{}
}

// Open reads the journal at dir/remedy.json (none yet: empty).
// A file that cannot be read or parsed is an error and is left as it is:
// the operator decides (the error says where and what to do).
func Open(dir string) (*Journal, error) {
	j := &Journal{rec: record{Version: journalVersion}, changed: make(chan struct{})}
	if dir == "" {
		return j, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w (create it, or give another --state-dir)", err)
	}
	j.path = filepath.Join(dir, JournalFile)
	b, err := statefile.Read(j.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return j, nil
	case err != nil:
		return nil, fmt.Errorf("journal: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("journal %s is corrupt: %v (it was left as it is: if no kubelet restart by hotplugd is under way, move it aside and start hotplugd again)", j.path, err)
	}
	if r.Version != journalVersion {
		return nil, fmt.Errorf("journal %s has layout version %d, this hotplugd writes %d (left as it is: move it aside after checking the kubelet runs)", j.path, r.Version, journalVersion)
	}
	j.rec = r
	return j, nil
}

// Changed returns a channel closed at the journal's next change.
func (j *Journal) Changed() <-chan struct{} {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changed
}

// View is the journal's record at one moment, a value: the control loop
// reads it as one of its inputs and Decide looks at it without locks.
type View struct {
	// Underway is the remedy in progress, nil when none.
	Underway *Underway
	// Attempts are the finished attempts, oldest first.
	Attempts []Entry
	// Seq is the number of the last entry (0: none).
	Seq int64
	// Retry is the last retry taken, nil when none.
	Retry *Retry
}

// View returns the record as it is now (a copy).
func (j *Journal) View() View {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := View{Attempts: append([]Entry(nil), j.rec.Attempts...), Seq: j.rec.Seq}
	if j.rec.Underway != nil {
		u := *j.rec.Underway
		v.Underway = &u
	}
	if j.rec.Retry != nil {
		r := *j.rec.Retry
		v.Retry = &r
	}
	return v
}

// SetRetry takes a retry: attempts started before at no longer count for
// Last. It is kept in memory even when the file cannot be written (the
// error says so), so it is taken once.
func (j *Journal) SetRetry(token string, at time.Time) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rec.Retry = &Retry{Token: token, At: at}
	return j.save()
}

// Since returns the entries numbered after seq, oldest first.
func (v View) Since(seq int64) []Entry {
	var out []Entry
	for _, e := range v.Attempts {
		if e.Seq > seq {
			out = append(out, e)
		}
	}
	return out
}

// Last returns the last attempt for key, if any, not counting those a
// retry set aside (started before it).
func (v View) Last(key string) (Entry, bool) {
	for i := len(v.Attempts) - 1; i >= 0; i-- {
		if v.Retry != nil && v.Attempts[i].Start.Before(v.Retry.At) {
			break
		}
		if v.Attempts[i].Key == key {
			return v.Attempts[i], true
		}
	}
	return Entry{}, false
}

// LastStart is the start of the latest attempt, under way or finished
// (zero: none): the rate limit counts from it across restarts.
func (v View) LastStart() time.Time {
	var t time.Time
	if n := len(v.Attempts); n > 0 {
		t = v.Attempts[n-1].Start
	}
	if u := v.Underway; u != nil && u.Start.After(t) {
		t = u.Start
	}
	return t
}

// RestartsSince returns the starts of the attempts after t that asked for
// a kubelet restart, oldest first (the daily budget: a restart at exactly
// now-24h has left the window).
func (v View) RestartsSince(t time.Time) []time.Time {
	var out []time.Time
	for _, e := range v.Attempts {
		if e.Restarted && e.Start.After(t) {
			out = append(out, e.Start)
		}
	}
	if u := v.Underway; u != nil && u.Start.After(t) {
		out = append(out, u.Start)
	}
	return out
}

// Since returns the entries numbered after seq, oldest first.
func (j *Journal) Since(seq int64) []Entry { return j.View().Since(seq) }

// Seq is the number of the last entry (0: none).
func (j *Journal) Seq() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rec.Seq
}

// Path is the journal's file ("" in memory only).
func (j *Journal) Path() string { return j.path }

// Underway returns the remedy in progress, nil when none.
func (j *Journal) Underway() *Underway { return j.View().Underway }

// Attempts returns the finished attempts, oldest first.
func (j *Journal) Attempts() []Entry { return j.View().Attempts }

// Last returns the last attempt for key, if any.
func (j *Journal) Last(key string) (Entry, bool) { return j.View().Last(key) }

// LastStart is the start of the latest attempt, under way or finished
// (zero: none).
func (j *Journal) LastStart() time.Time { return j.View().LastStart() }

// Begin writes u down as under way.
func (j *Journal) Begin(u Underway) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rec.Underway = &u
	return j.save()
}

// Enter moves the remedy under way to phase p.
func (j *Journal) Enter(p Phase) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.rec.Underway == nil {
		return errors.New("journal: no remedy under way")
	}
	j.rec.Underway.Phase = p
	return j.save()
}

// RestartsSince returns the starts of the attempts after t that asked for
// a kubelet restart (View.RestartsSince).
func (j *Journal) RestartsSince(t time.Time) []time.Time { return j.View().RestartsSince(t) }

// Finish records the outcome of the remedy under way (if any) and clears
// it; e's Seq is set.
func (j *Journal) Finish(e Entry) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.rec.Underway = nil
	j.rec.Seq++
	e.Seq = j.rec.Seq
	j.rec.Attempts = append(j.rec.Attempts, e)
	if n := len(j.rec.Attempts); n > maxEntries {
		j.rec.Attempts = append([]Entry(nil), j.rec.Attempts[n-maxEntries:]...)
	}
	return j.save()
}

// save writes the record (j.mu held) and tells the watchers.
func (j *Journal) save() error {
	close(j.changed)
	j.changed = make(chan struct{})
	if j.path == "" {
		return nil
	}
	b, err := json.MarshalIndent(j.rec, "", "  ")
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	if err := statefile.Replace(j.path, append(b, '\n')); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}
