// Package machinetest is for privileged integration tests that change this
// machine: CPU online state and hugepage counts. It serialises such tests
// across test processes with a file lock (go test runs packages, and the
// oracle module, in parallel), and restores every value it changed in
// t.Cleanup, also when the test fails.
//
// Tests that need it skip, with the reason printed, when not run as root or
// when the kernel file is not writable.
package machinetest
