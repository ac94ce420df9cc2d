package qemutest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// QMP is a client of QEMU's machine protocol (docs/interop/qmp-spec.rst):
// JSON objects over a unix socket, one command at a time, and
// asynchronous events in between.
type QMP struct {
	conn    net.Conn
	enc     *json.Encoder
	cmdMu   sync.Mutex // one command in flight
	replies chan message

	mu     sync.Mutex
	cond   *sync.Cond
	events []Event
	err    error // the connection's end
}

// message is anything QEMU sends: a greeting, a reply or an event.
type message struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string         `json:"event"`
	Data  map[string]any `json:"data"`
}

// Event is an event with the time the test received it.
type Event struct {
	Name     string
	Data     map[string]any
	Received time.Time
}

// Dial connects to QEMU's QMP socket, waiting up to timeout for QEMU to
// create it, and leaves capabilities negotiation mode.
func Dial(path string, timeout time.Duration) (*QMP, error) {
	deadline := time.Now().Add(timeout)
	var conn net.Conn
	for {
		var err error
		if conn, err = net.Dial("unix", path); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("qmp: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	q := &QMP{conn: conn, enc: json.NewEncoder(conn), replies: make(chan message, 1)}
	q.cond = sync.NewCond(&q.mu)
	dec := json.NewDecoder(conn)
	var greeting message
	conn.SetReadDeadline(deadline)
	if err := dec.Decode(&greeting); err != nil || greeting.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp: no greeting: %v", err)
	}
	conn.SetReadDeadline(time.Time{})
	go q.read(dec)
	if _, err := q.Execute("qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *QMP) read(dec *json.Decoder) {
	for {
		var m message
		if err := dec.Decode(&m); err != nil {
			q.mu.Lock()
			q.err = fmt.Errorf("qmp: connection closed: %w", err)
			q.cond.Broadcast()
			q.mu.Unlock()
			close(q.replies)
			return
		}
		if m.Event != "" {
			q.mu.Lock()
			q.events = append(q.events, Event{Name: m.Event, Data: m.Data, Received: time.Now()})
			q.cond.Broadcast()
			q.mu.Unlock()
			continue
		}
		q.replies <- m
	}
}

// Execute runs a command and returns its "return" value.
func (q *QMP) Execute(command string, args any) (json.RawMessage, error) {
	q.cmdMu.Lock()
	defer q.cmdMu.Unlock()
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	if err := q.enc.Encode(req); err != nil {
		return nil, fmt.Errorf("qmp: %s: %w", command, err)
	}
	select {
	case m, ok := <-q.replies:
		switch {
		case !ok:
			return nil, fmt.Errorf("qmp: %s: connection closed", command)
		case m.Error != nil:
			return nil, fmt.Errorf("qmp: %s: %s: %s", command, m.Error.Class, m.Error.Desc)
		}
		return m.Return, nil
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("qmp: %s: no reply within 30s", command)
	}
}

// WaitEvent waits for an event received from the index from on (see
// Mark) that match accepts.
func (q *QMP) WaitEvent(from int, timeout time.Duration, match func(Event) bool) (Event, error) {
	timer := time.AfterFunc(timeout, func() {
		q.mu.Lock()
		q.cond.Broadcast()
		q.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := from; ; {
		for ; i < len(q.events); i++ {
			if match(q.events[i]) {
				return q.events[i], nil
			}
		}
		if q.err != nil {
			return Event{}, q.err
		}
		if time.Now().After(deadline) {
			return Event{}, errors.New("qmp: no such event within " + timeout.String())
		}
		q.cond.Wait()
	}
}

// Mark is the number of events received so far.
func (q *QMP) Mark() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.events)
}

// Close closes the connection.
func (q *QMP) Close() { q.conn.Close() }
