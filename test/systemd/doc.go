// Package systemd holds what hotplugd's tests need to exercise its systemd
// integration on machines where systemd is not PID 1 (see
// docs/testing.md §6 of the shared docs): StartJournald runs a real,
// standalone systemd-journald for the duration of a test and reads its
// entries back with journalctl. The package's own test checks
// deploy/systemd/hotplugd.service with `systemd-analyze verify`.
//
// StartJournald writes on the host: it creates /run/systemd/journal (the
// socket directory) and journald creates /run/log/journal; both are removed
// afterwards when the test created them, and the journald it started is
// stopped by PID. Only test code imports this package.
package systemd
